"""A hybrid quantum-classical classifier on two moons ("moons-4q").

Linear(2, 4) + tanh feeds a 4-qubit circuit: RY(h_i) on qubit i, then two layers
of [RY(w) on each qubit, RZ(w) on each qubit, a CX ring] (16 weights,
``angle_encoded_ansatz(4, 2)``), whose <Z_i> on each qubit go through Linear(4, 2)
into a softmax cross-entropy. Data: ``two_moons(300, seed=0, noise=0.1)``, the
first 200 points train, the last 100 test. Adam (lr 0.05), batches of 20 in data
order, 10 epochs, float64 throughout.

Each training step is one graph: the circuit's forward node
(``quantum.Expectation``) and its gradient (``quantum.ExpectationVJP``) run on
the ``quantum`` device (exact, adjoint gradients), every other node falls back
to the CPU. The script prints that placement, the loss of every epoch and the
test accuracy, and exits with status 1 if the accuracy is below 0.9.

    python examples/hybrid_classifier.py
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import polyhal
from polyhal import nn, train
from polyhal.hal import Device, open_device
from polyhal.ir import DType, TensorType
from polyhal.quantum.ansatz import angle_encoded_ansatz, z_observables

QUBITS, LAYERS, EPOCHS, BATCH, LEARNING_RATE, REQUIRED_ACCURACY = 4, 2, 10, 20, 0.05, 0.9


def build_model() -> nn.Sequential:
    """Linear(2, 4) + tanh -> the 4-qubit circuit -> Linear(4, 2), initialized with seed 0."""
    circuit, inputs, weights = angle_encoded_ansatz(QUBITS, LAYERS)
    return nn.Sequential(nn.Linear(2, QUBITS, dtype="float64"), nn.Tanh(),
                         nn.QuantumLayer(circuit, z_observables(QUBITS), inputs, weights),
                         nn.Linear(QUBITS, 2, dtype="float64")).initialize(seed=0)


def placement_summary(model: nn.Sequential, device: Device) -> str:
    """Where the nodes of one training step (a batch of 20) run."""
    step = train.step_graph(model, TensorType(DType.FLOAT64, (BATCH, 2)),
                            TensorType(DType.INT64, (BATCH,)), train.cross_entropy,
                            train.Adam(LEARNING_RATE))
    placement = polyhal.compile(step, device=device, fallback="cpu").placement
    counts = Counter(placement.assignment.values())
    graph = {node.name: node.qualified_op for node in step.nodes}
    quantum = ", ".join(f"{name} ({graph[name]})" for name in placement.nodes_on(device.address))
    return (f"step graph: {len(step.nodes)} nodes in {len(placement.partitions)} partitions, "
            + ", ".join(f"{n} on {d}" for d, n in counts.items())
            + f"\n  on {device.address}: {quantum}")


def main() -> int:
    x, y = train.two_moons(300, seed=0, noise=0.1)
    model = build_model()
    print(model)
    device = open_device("quantum")
    print(placement_summary(model, device))

    start = time.perf_counter()
    history = train.fit(model, (x[:200], y[:200]), epochs=EPOCHS, batch_size=BATCH,
                        optimizer=train.Adam(LEARNING_RATE), device=device, fallback="cpu",
                        shuffle=False, progress=False)
    seconds = time.perf_counter() - start
    for epoch, metrics in enumerate(history.epochs, start=1):
        print(f"epoch {epoch:2d}: loss {metrics['loss']:.4f}, "
              f"train accuracy {metrics['accuracy']:.3f}")
    print(f"trained {EPOCHS} epochs in {seconds:.1f} s")

    result = train.evaluate(model, (x[200:], y[200:]), device=device, fallback="cpu",
                            metrics=["accuracy"])
    print(f"test: loss {result['loss']:.4f}, accuracy {result['accuracy']:.3f} "
          f"({len(x) - 200} points)")
    if result["accuracy"] < REQUIRED_ACCURACY:
        print(f"test accuracy {result['accuracy']:.3f} is below {REQUIRED_ACCURACY}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
