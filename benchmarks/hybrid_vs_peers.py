"""Hybrid quantum-classical training: polyhal against PennyLane and qiskit-machine-learning.

Task "moons-4q". Every runner trains the same model on the same data, in one process,
one runner after another:

* data: ``two_moons(300, seed=0, noise=0.1)`` from ``polyhal.train``; the first 200
  points train, the last 100 test (float64 inputs, int64 labels).
* model: ``Linear(2, 4)`` + tanh -> 4-qubit circuit -> ``Linear(4, 2)`` -> softmax
  cross-entropy. Circuit: ``RY(h_i)`` on qubit ``i`` (the four tanh outputs), then two
  layers of [``RY(w)`` on each qubit, ``RZ(w)`` on each qubit, CNOT ring
  ``CNOT(i, (i + 1) % 4)``]; 16 weights (layer ``l``, qubit ``i``: RY weight ``l*8 + i``,
  RZ weight ``l*8 + 4 + i``); outputs ``<Z_i>`` for ``i = 0..3``.
* training: Adam (lr 0.05), batches of 20 in data order (no shuffling), 10 epochs.
  Every runner starts from the same weights: the circuit's uniform in ``[0, 2*pi)`` from
  ``numpy.random.default_rng(0)``, the Linear layers polyhal's ``initialize(seed=0)``
  (Kaiming-uniform weights, zero biases; copied into the torch peers). All float64
  (qiskit-machine-learning's TorchConnector rounds its outputs and gradients to float32,
  see :func:`qiskit_ml_estimator_qnn`).
* timing: ``time.perf_counter()`` around each epoch (forward, backward and optimizer steps;
  not the test evaluation). ``seconds_per_epoch`` is the median over epochs 2..N, the
  first epoch (warm-up, caches, JIT) is reported on its own. ``test_accuracy`` is the
  argmax accuracy on the 100 test points after training.

Peers:

1. PennyLane + torch, ``default.qubit``, ``diff_method="backprop"``, parameter broadcasting
   (one QNode call per batch).
2. PennyLane + torch, ``lightning.qubit``, ``diff_method="adjoint"``, the same broadcast
   QNode call (lightning accepts it, and splits the batch into one tape per sample).
3. qiskit-machine-learning: ``EstimatorQNN`` on ``qiskit_aer.primitives.EstimatorV2`` with
   ``ParamShiftEstimatorGradient``, wrapped in ``TorchConnector``.

polyhal (``polyhal.train.fit`` on ``open_device("quantum")`` with CPU fallback, see
:func:`polyhal_rows`): the default exact configuration, and 1024 shots per expectation
with parameter-shift gradients on Aer. A peer whose package is missing is
reported as ``skipped: <reason>`` and the others still run.

    python benchmarks/hybrid_vs_peers.py              # the full run: 200 train points, 10 epochs
    python benchmarks/hybrid_vs_peers.py --quick      # CI: 20 train points (one batch), 2 epochs
    python benchmarks/hybrid_vs_peers.py --epochs 5   # another number of epochs
    python benchmarks/hybrid_vs_peers.py --json rows.json   # also write the rows as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from polyhal.train import two_moons

N_QUBITS = 4
N_LAYERS = 2
N_WEIGHTS = N_LAYERS * 2 * N_QUBITS  # 16
LEARNING_RATE = 0.05
BATCH = 20
EPOCHS = 10
QUICK_EPOCHS = 2
QUICK_TRAIN = 20
POLYHAL_NAMES = ("polyhal exact (adjoint)", "polyhal shots=1024 (parameter-shift, Aer)")
PENNYLANE_DEFAULT = "PennyLane default.qubit (backprop)"
PENNYLANE_LIGHTNING = "PennyLane lightning.qubit (adjoint)"
QISKIT_ML = "qiskit-ml EstimatorQNN (Aer V2, param-shift)"
PACKAGES = ("polyhal", "numpy", "torch", "pennylane", "pennylane_lightning", "qiskit",
            "qiskit-aer", "qiskit-machine-learning")


@dataclass(frozen=True)
class MoonsData:
    """The moons-4q split: ``x_*`` float64 ``[n, 2]``, ``y_*`` int64 ``[n]``."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_data(quick: bool) -> MoonsData:
    """``two_moons(300, seed=0, noise=0.1)``: train on the first 200 points (the first
    :data:`QUICK_TRAIN` with ``quick``), test on the last 100."""
    x, y = two_moons(300, seed=0, noise=0.1)
    x, y = np.asarray(x, np.float64), np.asarray(y, np.int64)
    train = QUICK_TRAIN if quick else 200
    return MoonsData(x[:train], y[:train], x[200:], y[200:])


def initial_quantum_weights() -> np.ndarray:
    """The 16 circuit weights every runner starts from: uniform in ``[0, 2*pi)``,
    ``numpy.random.default_rng(0)``."""
    return np.random.default_rng(0).uniform(0.0, 2.0 * np.pi, N_WEIGHTS)


def make_row(name: str, epoch_seconds: list[float], test_accuracy: float) -> dict:
    """One result row from the per-epoch wall times and the final test accuracy.

    ``seconds_per_epoch`` is the median of epochs 2..N (``None`` with a single epoch),
    ``first_epoch_s`` the first epoch on its own; ``epoch_seconds`` keeps every epoch's
    time (in the JSON) so that outliers can be seen.
    """
    later = epoch_seconds[1:]
    return {
        "name": name,
        "seconds_per_epoch": statistics.median(later) if later else None,
        "first_epoch_s": epoch_seconds[0],
        "test_accuracy": float(test_accuracy),
        "epochs": len(epoch_seconds),
        "epoch_seconds": list(epoch_seconds),
    }


def polyhal_model(shots: int | None = None, seed: int | None = None) -> object:
    """The moons-4q network in polyhal: ``Linear(2, 4)``, tanh, the circuit
    (``angle_encoded_ansatz(4, 2)``, the circuit above), ``Linear(4, 2)``; float64.

    Every runner starts from these weights: ``initialize(seed=0)`` draws the Linear layers
    (the torch peers copy them), the circuit weights are :func:`initial_quantum_weights`.
    """
    from polyhal import nn
    from polyhal.quantum.ansatz import angle_encoded_ansatz, z_observables

    circuit, inputs, weights = angle_encoded_ansatz(N_QUBITS, N_LAYERS)
    model = nn.Sequential(
        nn.Linear(2, N_QUBITS, dtype="float64"), nn.Tanh(),
        nn.QuantumLayer(circuit, z_observables(N_QUBITS), inputs, weights, shots=shots,
                        seed=seed),
        nn.Linear(N_QUBITS, 2, dtype="float64")).initialize(seed=0)
    model.load_state_dict({**model.state_dict(), "2.weight": initial_quantum_weights()})
    return model


def initial_linear_weights() -> dict[str, np.ndarray]:
    """``{"pre.weight", "pre.bias", "post.weight", "post.bias"}`` of :func:`polyhal_model`
    in torch's layout (``weight`` is ``[out, in]``)."""
    state = polyhal_model().state_dict()
    return {"pre.weight": state["0.weight"].T, "pre.bias": state["0.bias"],
            "post.weight": state["3.weight"].T, "post.bias": state["3.bias"]}


def _polyhal_run(name: str, model: object, device: object, data: MoonsData,
                 epochs: int) -> dict:
    """``polyhal.train.fit`` (Adam lr 0.05, batches of 20 in data order) with ``device``
    and CPU fallback; an epoch is timed from the end of the previous epoch's last step
    (the start of ``fit`` for the first) to the end of its own last step."""
    from polyhal import train

    step_ends: dict[int, float] = {}

    def record(info: object) -> None:
        step_ends[info.epoch] = time.perf_counter()

    start = time.perf_counter()
    train.fit(model, (data.x_train, data.y_train), epochs=epochs, batch_size=BATCH,
              optimizer=train.Adam(LEARNING_RATE), device=device, fallback="cpu",
              shuffle=False, progress=False, callbacks=[record])
    ends = [step_ends[e] for e in range(epochs)]
    epoch_seconds = [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]
    result = train.evaluate(model, (data.x_test, data.y_test), device=device,
                            fallback="cpu", metrics=["accuracy"])
    return make_row(name, epoch_seconds, result["accuracy"])


def polyhal_rows(data: MoonsData, epochs: int) -> list[dict]:
    """The polyhal side of the benchmark: rows named as in ``POLYHAL_NAMES``.

    1. The default configuration: ``open_device("quantum")`` (exact; the forward pass and
       adjoint gradients on the batched statevector engine), classical nodes on ``cpu``.
    2. 1024 shots per expectation (seed 0): forward passes on Aer (``BackendEstimatorV2``
       over ``AerSimulator``), gradients by the parameter-shift rule, every shifted point
       of a step in one Aer call.
    """
    from polyhal.hal import open_device

    device = open_device("quantum")
    return [_polyhal_run(POLYHAL_NAMES[0], polyhal_model(), device, data, epochs),
            _polyhal_run(POLYHAL_NAMES[1], polyhal_model(shots=1024, seed=0), device, data,
                         epochs)]


# --------------------------------------------------------------------------------------
# peers (torch models)
# --------------------------------------------------------------------------------------


def _hybrid_model(quantum: Callable, quantum_params: list) -> object:
    """``Linear(2, 4)`` + tanh -> ``quantum`` (a ``[batch, 4] -> [batch, 4]`` float64
    callable) -> ``Linear(4, 2)``, as a ``torch.nn.Module``.

    The Linear layers start from :func:`initial_linear_weights`, as polyhal's do, so
    every runner starts from the same weights. ``quantum_params`` (the circuit weights,
    ``nn.Parameter``) are registered on the model; a caller whose weights live in a
    module (TorchConnector) attaches that module to the model itself.
    """
    import torch
    from torch import nn

    pre = nn.Linear(2, N_QUBITS, dtype=torch.float64)
    post = nn.Linear(N_QUBITS, 2, dtype=torch.float64)
    start = initial_linear_weights()
    with torch.no_grad():
        for layer, prefix in ((pre, "pre"), (post, "post")):
            layer.weight.copy_(torch.as_tensor(start[f"{prefix}.weight"]))
            layer.bias.copy_(torch.as_tensor(start[f"{prefix}.bias"]))

    class Hybrid(nn.Module):
        """The moons-4q hybrid network."""

        def __init__(self) -> None:
            super().__init__()
            self.pre, self.post = pre, post
            self.quantum = quantum
            self.quantum_weights = nn.ParameterList(quantum_params)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            """Logits ``[batch, 2]`` of inputs ``[batch, 2]``."""
            return self.post(self.quantum(torch.tanh(self.pre(x))))

    return Hybrid()


def _train_torch(name: str, model: object, data: MoonsData, epochs: int) -> dict:
    """Adam (lr 0.05) on softmax cross-entropy, batches of 20 in data order; one timed
    ``perf_counter`` interval per epoch; test accuracy after the last epoch. Runs with
    torch's default dtype set to float64."""
    import torch

    # lightning.qubit hands expectation values back as Python floats, which PennyLane's
    # torch interface turns into tensors of torch's default dtype: without this the
    # lightning forward values would be float32 (its gradients are float64 either way).
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _train_loop(name, model, data, epochs)
    finally:
        torch.set_default_dtype(previous)


def _train_loop(name: str, model: object, data: MoonsData, epochs: int) -> dict:
    """The body of :func:`_train_torch`."""
    import torch

    x_train = torch.as_tensor(data.x_train, dtype=torch.float64)
    y_train = torch.as_tensor(data.y_train, dtype=torch.int64)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    epoch_seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for lo in range(0, len(x_train), BATCH):
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[lo:lo + BATCH]), y_train[lo:lo + BATCH])
            loss.backward()
            optimizer.step()
        epoch_seconds.append(time.perf_counter() - start)
    with torch.no_grad():
        logits = model(torch.as_tensor(data.x_test, dtype=torch.float64))
    accuracy = (logits.argmax(dim=1).numpy() == data.y_test).mean()
    return make_row(name, epoch_seconds, accuracy)


def _pennylane_peer(name: str, device_name: str, diff_method: str, data: MoonsData,
                    epochs: int) -> dict:
    """A PennyLane (torch interface) peer: one broadcast QNode call per batch."""
    import pennylane as qml
    import torch

    device = qml.device(device_name, wires=N_QUBITS)

    @qml.qnode(device, interface="torch", diff_method=diff_method)
    def circuit(h: torch.Tensor, w: torch.Tensor) -> list:
        """The moons-4q circuit; ``h[..., i]`` broadcasts over the batch."""
        for i in range(N_QUBITS):
            qml.RY(h[..., i], wires=i)
        for layer in range(N_LAYERS):
            for i in range(N_QUBITS):
                qml.RY(w[layer * 8 + i], wires=i)
            for i in range(N_QUBITS):
                qml.RZ(w[layer * 8 + 4 + i], wires=i)
            for i in range(N_QUBITS):
                qml.CNOT(wires=[i, (i + 1) % N_QUBITS])
        return [qml.expval(qml.PauliZ(i)) for i in range(N_QUBITS)]

    weights = torch.nn.Parameter(torch.tensor(initial_quantum_weights(), dtype=torch.float64))

    def quantum(h: torch.Tensor) -> torch.Tensor:
        """``[batch, 4]`` -> ``[batch, 4]``: column ``i`` is ``<Z_i>``."""
        return torch.stack(circuit(h, weights), dim=-1)

    return _train_torch(name, _hybrid_model(quantum, [weights]), data, epochs)


def pennylane_default_qubit(data: MoonsData, epochs: int) -> dict:
    """PennyLane ``default.qubit`` with ``diff_method="backprop"`` through torch."""
    return _pennylane_peer(PENNYLANE_DEFAULT, "default.qubit", "backprop", data, epochs)


def pennylane_lightning_adjoint(data: MoonsData, epochs: int) -> dict:
    """PennyLane ``lightning.qubit`` with ``diff_method="adjoint"``.

    Lightning accepts the broadcast QNode call with adjoint differentiation: its
    preprocessing (``broadcast_expand``) splits the batch into one tape per sample, each
    run and adjoint-differentiated in C++, all inside one ``execute``. That single
    broadcast call is what a PennyLane user would write (a Python loop over samples only
    adds overhead), so it is used here as for ``default.qubit``.
    """
    return _pennylane_peer(PENNYLANE_LIGHTNING, "lightning.qubit", "adjoint", data, epochs)


def qiskit_ml_estimator_qnn(data: MoonsData, epochs: int) -> dict:
    """qiskit-machine-learning: ``EstimatorQNN`` + ``TorchConnector`` on Aer's EstimatorV2.

    Notes from the 0.9.1 source:

    * ``ParamShiftEstimatorGradient(estimator, pass_manager=None)`` works with V2
      estimators; no pass manager is needed because Aer runs ry/rz/cx as they are.
    * ``EstimatorQNN(default_precision=0.015625)`` is the default, and with Aer's
      EstimatorV2 a positive precision adds ``N(0, precision)`` noise to each forward
      expectation value (unseeded), while the gradient jobs run at Aer's own default
      precision 0 (exact). ``default_precision=0.0`` makes the forward exact too, like the
      other peers; it does not change the amount of simulation.
    * ``TorchConnector`` returns float32 outputs and gradients (``dtype=torch.float``,
      hard-coded), and stores its weights as float32. The weights are put back to
      float64 here and the output is cast to float64 for the float64 ``Linear(4, 2)``;
      the quantum values still pass through float32.
    * The backward pass is one Aer run per (sample, observable, shifted parameter):
      20 * 4 * 2 * 20 = 3200 primitive pubs per batch of 20.
    """
    import torch
    from qiskit.circuit import ParameterVector, QuantumCircuit
    from qiskit.quantum_info import SparsePauliOp
    from qiskit_aer.primitives import EstimatorV2
    from qiskit_machine_learning.connectors import TorchConnector
    from qiskit_machine_learning.gradients import ParamShiftEstimatorGradient
    from qiskit_machine_learning.neural_networks import EstimatorQNN

    inputs = ParameterVector("h", N_QUBITS)
    weights = ParameterVector("w", N_WEIGHTS)
    circuit = QuantumCircuit(N_QUBITS)
    for i in range(N_QUBITS):
        circuit.ry(inputs[i], i)
    for layer in range(N_LAYERS):
        for i in range(N_QUBITS):
            circuit.ry(weights[layer * 8 + i], i)
        for i in range(N_QUBITS):
            circuit.rz(weights[layer * 8 + 4 + i], i)
        for i in range(N_QUBITS):
            circuit.cx(i, (i + 1) % N_QUBITS)
    # Pauli labels are little-endian: the rightmost character acts on qubit 0.
    observables = [SparsePauliOp("I" * (N_QUBITS - 1 - i) + "Z" + "I" * i)
                   for i in range(N_QUBITS)]
    estimator = EstimatorV2()
    qnn = EstimatorQNN(circuit=circuit, estimator=estimator, observables=observables,
                       input_params=list(inputs), weight_params=list(weights),
                       gradient=ParamShiftEstimatorGradient(estimator), input_gradients=True,
                       default_precision=0.0)

    # With initial_weights given, TorchConnector draws nothing from torch's generator.
    connector = TorchConnector(qnn, initial_weights=initial_quantum_weights())
    connector.weight.data = torch.tensor(initial_quantum_weights(), dtype=torch.float64)
    model = _hybrid_model(lambda h: connector(h).to(torch.float64), [])
    model.connector = connector  # registers the circuit weights with the model
    return _train_torch(QISKIT_ML, model, data, epochs)


PEERS: tuple[tuple[str, Callable[[MoonsData, int], dict]], ...] = (
    (PENNYLANE_DEFAULT, pennylane_default_qubit),
    (PENNYLANE_LIGHTNING, pennylane_lightning_adjoint),
    (QISKIT_ML, qiskit_ml_estimator_qnn),
)


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def package_versions() -> dict[str, str]:
    """Installed versions of the packages involved (``"missing"`` where absent)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def machine() -> dict[str, object]:
    """The processor, core count, Python version and torch thread count."""
    info: dict[str, object] = {
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def _fmt(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``-`` for ``None``."""
    return "-" if value is None else format(value, spec)


def report(rows: list[dict], header: str) -> dict[str, dict[str, float | None]]:
    """Print the results table and the polyhal/peer ratios; return the ratios
    (``{polyhal row: {peer row: polyhal s/epoch / peer s/epoch}}``)."""
    print(header)
    columns = ("runner", "s/epoch", "first epoch s", "test acc")
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in rows:
        if "skipped" in row:
            print(f"| {row['name']} | skipped: {row['skipped']} | | |")
            continue
        print(f"| {row['name']} | {_fmt(row['seconds_per_epoch'], '.4f')} | "
              f"{row['first_epoch_s']:.4f} | {row['test_accuracy']:.2f} |")
    done = [row for row in rows if "skipped" not in row]
    ours = [row for row in done if row["name"].startswith("polyhal")]
    peers = [row for row in done if not row["name"].startswith("polyhal")]
    ratios: dict[str, dict[str, float | None]] = {}
    if not ours:
        print("\n(no polyhal rows, so no ratios)")
        return ratios
    print("\npolyhal s/epoch / peer s/epoch (below 1: polyhal is faster)")
    columns = ("polyhal runner", *(peer["name"] for peer in peers))
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in ours:
        ratios[row["name"]] = {}
        cells = []
        for peer in peers:
            a, b = row["seconds_per_epoch"], peer["seconds_per_epoch"]
            ratio = a / b if a is not None and b else None
            ratios[row["name"]][peer["name"]] = ratio
            cells.append(_fmt(ratio, ".3f"))
        print(f"| {row['name']} | " + " | ".join(cells) + " |")
    return ratios


def main() -> None:
    """Run polyhal and the peers on moons-4q, print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"CI mode: {QUICK_EPOCHS} epochs on the first {QUICK_TRAIN} "
                             "training points (the test set stays the full 100)")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"number of epochs (default {EPOCHS}, {QUICK_EPOCHS} with --quick)")
    parser.add_argument("--json", metavar="PATH", help="also write all rows as JSON")
    args = parser.parse_args()
    epochs = args.epochs if args.epochs is not None else (QUICK_EPOCHS if args.quick else EPOCHS)
    if epochs < 1:
        parser.error("--epochs must be at least 1")
    data = load_data(args.quick)
    start = time.perf_counter()

    rows: list[dict] = []
    rows.extend(polyhal_rows(data, epochs))
    print("  ran polyhal", flush=True)
    for name, peer in PEERS:
        try:
            rows.append(peer(data, epochs))
        except ImportError as exc:
            print(f"{name}: skipped: {exc}", flush=True)
            rows.append({"name": name, "skipped": str(exc)})
            continue
        print(f"  ran {name}", flush=True)

    info, versions = machine(), package_versions()
    header = (f"# hybrid_vs_peers moons-4q{' (quick)' if args.quick else ''}: "
              f"{len(data.x_train)} train / {len(data.x_test)} test points, {epochs} epochs, "
              f"batch {BATCH}, Adam lr {LEARNING_RATE}")
    ratios = report(rows, header)
    print(f"\nmachine: {info['processor']}, {info['cpu_count']} cores, "
          f"python {info['python']}, torch threads {info.get('torch_threads', '-')}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"total wall time: {time.perf_counter() - start:.1f} s")
    if args.json:
        out = {"task": "moons-4q", "quick": args.quick, "epochs": epochs,
               "train_points": len(data.x_train), "test_points": len(data.x_test),
               "machine": info, "versions": versions, "rows": rows, "ratios": ratios}
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
