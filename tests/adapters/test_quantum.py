"""The quantum adapter on qiskit: estimators, gradient methods, backends, noise, placement
and bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import qiskit_aer  # noqa: F401
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, depolarizing_error

import polyhal
from polyhal import autodiff, nn
from polyhal.errors import DeviceError, PolyhalError, UnsupportedError
from polyhal.hal import open_device
from polyhal.ir import GraphBuilder, f64
from polyhal.ops import quantum
from polyhal.quantum.ansatz import angle_encoded_ansatz, z_observables
from tests.quantum_circuits import random_circuit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _forward(case, **attrs):
    g = GraphBuilder("q")
    x = g.input("x", f64["batch", len(case.inputs)])
    w = g.input("w", f64[len(case.weights)])
    g.output(quantum.expectation(x, w, case.circuit, case.observables, case.inputs,
                                 case.weights, **attrs), name="e")
    return g.build()


def _data(case, rows=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-2, 2, (rows, len(case.inputs))), rng.uniform(-2, 2, len(case.weights)),
            rng.normal(size=(rows, len(case.observables))))


def _vjp(case, device, method, x, w, ct, **attrs):
    graph = autodiff.vjp(_forward(case, grad_method=method, **attrs), wrt=["x", "w"])
    out = polyhal.compile(graph, device=device)(x, w, ct)
    return out["grad_x"], out["grad_w"]


@pytest.fixture(scope="module")
def exact():
    return open_device("quantum")


@pytest.mark.parametrize("seed", range(5))
def test_gradient_methods_agree_exactly(seed: int, exact) -> None:
    """Adjoint, parameter-shift and finite differences agree to 1e-6 (and with the
    reference) on random circuits with controlled rotations and reused parameters."""
    case = random_circuit(seed)
    x, w, ct = _data(case, seed=seed)
    want = _vjp(case, "reference", "auto", x, w, ct)
    assert np.abs(want[0]).max() > 1e-3 and np.abs(want[1]).max() > 1e-3
    for method in ("adjoint", "parameter_shift", "finite_diff"):
        got = _vjp(case, exact, method, x, w, ct)
        for g, r, what in zip(got, want, ("inputs", "weights"), strict=True):
            np.testing.assert_allclose(g, r, atol=1e-6, err_msg=f"{method} d_{what}")


def test_parameter_shift_batches_every_point_into_one_call(exact) -> None:
    case = random_circuit(2)
    x, w, ct = _data(case, rows=3)
    graph = autodiff.vjp(_forward(case, grad_method="parameter_shift"), wrt=["x", "w"])
    run = polyhal.compile(graph, device=exact)
    run(x, w, ct)
    executable = next(iter(run._cache.values()))
    counters = executable.profile().counters
    from polyhal.quantum import dumps, program

    prog = program(dumps(case.circuit))
    terms = sum(4 if g in ("crx", "cry", "crz") else 2 for g in prog.occurrence_gates)
    assert counters["estimator_calls"] == 1
    assert counters["estimator_rows"] == terms * 3


@pytest.mark.parametrize("options", [{"forward": "estimator"}, {"estimator": "statevector"},
                                     {"forward": "estimator", "max_rows": 3}])
def test_estimators_agree_with_the_reference(options) -> None:
    case = random_circuit(7)
    x, w, _ = _data(case, rows=5)
    graph = _forward(case)
    want = polyhal.compile(graph)(x, w)["e"]
    got = polyhal.compile(graph, device=open_device("quantum", **options))(x, w)["e"]
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_shots_on_aer_sample_and_reproduce(exact) -> None:
    qc, xp, wp = angle_encoded_ansatz(2, 1)
    case = type(random_circuit(0))(qc, xp, wp, [*z_observables(2), "0.5*XX - YZ"])
    x, w, ct = _data(case, rows=3)
    want = polyhal.compile(_forward(case))(x, w)["e"]
    shots = _forward(case, shots=4000, seed=5)
    run = polyhal.compile(shots, device=exact)
    first = run(x, w)["e"]
    np.testing.assert_array_equal(first, run(x, w)["e"])
    assert np.all(np.abs(first - want) <= 5 * np.array([1, 1, 1.5]) / np.sqrt(4000))
    assert not np.array_equal(first, want)
    # parameter-shift with shots estimates the exact gradient
    grad_exact = _vjp(case, "reference", "auto", x, w, ct)
    grad_shots = _vjp(case, exact, "auto", x, w, ct, shots=4000, seed=5)
    assert np.abs(grad_shots[1] - grad_exact[1]).max() < 0.3
    with pytest.raises(UnsupportedError, match="adjoint' needs exact statevector"):
        _vjp(case, exact, "adjoint", x, w, ct, shots=100, seed=1)


def test_any_backend_v2_plugs_in() -> None:
    case = random_circuit(3)
    x, w, _ = _data(case, rows=2)
    device = open_device("quantum", backend=AerSimulator(seed_simulator=1))
    graph = _forward(case, shots=8000, seed=2)
    got = polyhal.compile(graph, device=device)(x, w)["e"]
    want = polyhal.compile(_forward(case))(x, w)["e"]
    assert np.all(np.abs(got - want) <= 5 * 2.0 / np.sqrt(8000))


def test_noise_model_damps_expectations_and_keeps_gradients_consistent() -> None:
    qc, xp, wp = angle_encoded_ansatz(2, 1)
    case = type(random_circuit(0))(qc, xp, wp, z_observables(2))
    noise = NoiseModel()
    noise.add_all_qubit_quantum_error(depolarizing_error(0.05, 1), ["ry", "rz"])
    noise.add_all_qubit_quantum_error(depolarizing_error(0.05, 2), ["cx"])
    device = open_device("quantum", noise_model=noise)
    x = np.array([[0.1, 0.2]])
    w = np.zeros(4)
    clean = polyhal.compile(_forward(case))(x, w)["e"]
    noisy = polyhal.compile(_forward(case), device=device)(x, w)["e"]
    assert np.all(np.abs(noisy) < np.abs(clean) - 0.02)
    # auto picks parameter-shift on a noisy device; it matches finite differences there
    ct = np.ones((1, 2))
    ps = _vjp(case, device, "auto", x, w + 0.3, ct)
    fd = _vjp(case, device, "finite_diff", x, w + 0.3, ct)
    np.testing.assert_allclose(ps[1], fd[1], atol=1e-6)
    with pytest.raises(UnsupportedError, match="not exact"):
        _vjp(case, device, "adjoint", x, w, ct)


class _BrokenBackend(AerSimulator):
    def run(self, *args, **kwargs):
        raise RuntimeError("the cryostat is warm")


def test_a_backend_that_raises_is_a_device_error() -> None:
    case = random_circuit(1)
    x, w, _ = _data(case, rows=2)
    device = open_device("quantum", backend=_BrokenBackend())
    with pytest.raises(DeviceError, match="backend estimator failed: RuntimeError: the "
                                          "cryostat is warm"):
        polyhal.compile(_forward(case, shots=10), device=device)(x, w)


@pytest.mark.parametrize(("options", "message"), [
    ({"estimator": "magic"}, "estimator 'magic' is not one of"),
    ({"estimator": "backend"}, "needs backend="),
    ({"backend": object()}, "must be a qiskit BackendV2"),
    ({"noise_model": NoiseModel(), "estimator": "statevector"}, "aer' estimator only"),
    ({"forward": "fast"}, "forward='fast'"),
    ({"max_rows": 0}, "max_rows=0"),
    ({"colour": "blue"}, "unknown option"),
    ({"backend": AerSimulator(), "forward": "statevector"}, "needs an exact device"),
])
def test_bad_options_are_unsupported_errors(options, message) -> None:
    with pytest.raises(PolyhalError, match=message):
        open_device("quantum", **options)


def test_hybrid_model_places_classical_nodes_on_cpu() -> None:
    qc, xp, wp = angle_encoded_ansatz(2, 1)
    model = nn.Sequential(nn.Linear(3, 2, dtype="float64"), nn.Tanh(),
                          nn.QuantumLayer(qc, z_observables(2), xp, wp),
                          nn.Linear(2, 1, dtype="float64")).initialize(seed=0)
    graph = model.graph(f64["batch", 3], params="constants")
    run = polyhal.compile(graph, device="quantum", fallback="cpu")
    devices = {node.split(":")[0] for node in run.placement.assignment.values()}
    on_quantum = [n for n, d in run.placement.assignment.items() if d.startswith("quantum")]
    assert devices == {"quantum", "cpu"} and len(on_quantum) == 1
    x = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_allclose(run(x)[0], polyhal.compile(graph)(x)[0], atol=1e-12)


def test_hybrid_classifier_example_reaches_its_accuracy(capsys) -> None:
    """examples/hybrid_classifier.py: quantum nodes on the device, test accuracy >= 0.9."""
    import runpy

    example = runpy.run_path(str(EXAMPLES / "hybrid_classifier.py"))
    assert example["main"]() == 0
    out = capsys.readouterr().out
    accuracy = float(out.rsplit("accuracy ", 1)[1].split()[0])
    assert accuracy >= 0.9
    assert "on quantum:0:" in out and "(quantum.ExpectationVJP)" in out
