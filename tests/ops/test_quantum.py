"""The quantum domain's specification: circuits, observables, binding and the reference
statevector simulator, checked against qiskit's own Statevector."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import qiskit  # noqa: F401
from qiskit import QuantumCircuit
from qiskit.circuit.library import get_standard_gate_name_mapping
from qiskit.quantum_info import SparsePauliOp, Statevector

import polyhal
from polyhal.errors import ExecutionError, IRError, VerificationError
from polyhal.ir import GraphBuilder, f32, f64, load, save
from polyhal.ops import quantum
from polyhal.quantum import dumps, observable_text, parse_observable, program
from polyhal.quantum.ansatz import angle_encoded_ansatz, parameter, z_observables
from polyhal.quantum.gates import FOUR_TERM, GENERATORS, TWO_TERM, generator
from tests.quantum_circuits import random_circuit


def _graph(circuit, observables, inputs, weights, n_in, n_w, dtype=f64, **attrs):
    g = GraphBuilder("q")
    x, w = g.input("x", dtype["batch", n_in]), g.input("w", dtype[n_w])
    g.output(quantum.expectation(x, w, circuit, observables, inputs, weights, **attrs), name="e")
    return g.build()


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generators_match_qiskit_matrices(name: str) -> None:
    gate = get_standard_gate_name_mapping()[name]
    for theta in (0.0, 0.37, -2.1, 5.0):
        expected = type(gate)(theta).to_matrix()
        np.testing.assert_allclose(generator(name).unitaries(np.array(theta)), expected,
                                   atol=1e-12)
    expected_rule = FOUR_TERM if name in ("crx", "cry", "crz") else TWO_TERM
    assert generator(name).rule is expected_rule


@pytest.mark.parametrize("seed", range(6))
def test_reference_matches_qiskit_statevector(seed: int) -> None:
    case = random_circuit(seed)
    rng = np.random.default_rng(seed)
    graph = _graph(case.circuit, case.observables, case.inputs, case.weights,
                   len(case.inputs), len(case.weights))
    x = rng.uniform(-3, 3, (4, len(case.inputs)))
    w = rng.uniform(-3, 3, len(case.weights))
    got = polyhal.compile(graph)(x, w)["e"]
    for row in range(4):
        bound = case.circuit.assign_parameters(
            {**dict(zip(case.inputs, x[row], strict=True)),
             **dict(zip(case.weights, w, strict=True))})
        state = Statevector(bound)
        want = [state.expectation_value(SparsePauliOp.from_list(
            [(label, c) for c, label in parse_observable(o).terms])).real
            for o in case.observables]
        np.testing.assert_allclose(got[row], want, atol=1e-10)


def test_binding_is_by_name_not_order() -> None:
    a, b = parameter("a"), parameter("b")
    qc = QuantumCircuit(1)
    qc.ry(a, 0)
    qc.rx(b, 0)
    x = np.array([[0.3]])
    w = np.array([1.1])
    forward = polyhal.compile(_graph(qc, ["X"], [a], [b], 1, 1))(x, w)["e"]
    swapped = polyhal.compile(_graph(qc, ["X"], [b], [a], 1, 1))(x, w)["e"]
    state = Statevector(qc.assign_parameters({a: 0.3, b: 1.1}))
    assert forward[0, 0] == pytest.approx(state.expectation_value(SparsePauliOp("X")).real)
    assert not np.allclose(forward, swapped)


def test_shots_are_unbiased_and_seeded() -> None:
    qc, x, w = angle_encoded_ansatz(2, 1)
    obs = [*z_observables(2), "0.5*XX - YI"]
    exact = _graph(qc, obs, x, w, 2, 4)
    shots = _graph(qc, obs, x, w, 2, 4, shots=20000, seed=3)
    rng = np.random.default_rng(0)
    xs, ws = rng.uniform(-2, 2, (3, 2)), rng.uniform(-2, 2, 4)
    want = polyhal.compile(exact)(xs, ws)["e"]
    run = polyhal.compile(shots)
    first, second = run(xs, ws)["e"], run(xs, ws)["e"]
    np.testing.assert_array_equal(first, second)
    # 5 sigma with sigma <= sum |c| / sqrt(shots)
    bound = 5 * np.array([1, 1, 1.5]) / np.sqrt(20000)
    assert np.all(np.abs(first - want) <= bound)
    assert not np.array_equal(first, want)
    other = polyhal.compile(_graph(qc, obs, x, w, 2, 4, shots=20000, seed=4))(xs, ws)["e"]
    assert not np.array_equal(first, other)


def test_reference_vjp_matches_finite_differences() -> None:
    case = random_circuit(11)
    n_in, n_w = len(case.inputs), len(case.weights)
    attrs = quantum.expectation_attrs(case.circuit, case.observables, case.inputs, case.weights)
    rng = np.random.default_rng(1)
    x, w = rng.uniform(-2, 2, (3, n_in)), rng.uniform(-2, 2, n_w)
    ct = rng.normal(size=(3, len(case.observables)))
    d_x, d_w = polyhal.ops.get_op("ExpectationVJP", "quantum").kernel(x, w, ct, **attrs)
    kernel = polyhal.ops.get_op("Expectation", "quantum").kernel

    def loss(x_, w_):
        return float(np.sum(ct * kernel(x_, w_, **attrs)))

    eps = 1e-6
    for j in range(n_in):
        for row in range(3):
            dx = np.zeros_like(x)
            dx[row, j] = eps
            fd = (loss(x + dx, w) - loss(x - dx, w)) / (2 * eps)
            assert d_x[row, j] == pytest.approx(fd, abs=1e-7)
    for k in range(n_w):
        dw = np.zeros_like(w)
        dw[k] = eps
        assert d_w[k] == pytest.approx((loss(x, w + dw) - loss(x, w - dw)) / (2 * eps), abs=1e-7)


def test_float32_rounds_once() -> None:
    qc, x, w = angle_encoded_ansatz(2, 1)
    g64 = _graph(qc, z_observables(2), x, w, 2, 4)
    g32 = _graph(qc, z_observables(2), x, w, 2, 4, dtype=f32)
    xs = np.array([[0.1, 0.2]], np.float32)
    ws = np.array([0.3, 0.4, 0.5, 0.6], np.float32)
    out32 = polyhal.compile(g32)(xs, ws)["e"]
    assert out32.dtype == np.float32
    out64 = polyhal.compile(g64)(xs.astype(np.float64), ws.astype(np.float64))["e"]
    np.testing.assert_array_equal(out32, out64.astype(np.float32))


def test_graph_round_trips_through_files(tmp_path) -> None:
    qc, x, w = angle_encoded_ansatz(2, 1)
    graph = _graph(qc, z_observables(2), x, w, 2, 4)
    path = tmp_path / "vqc.json"
    save(graph, path)
    loaded = load(path)
    xs, ws = np.array([[0.1, 0.2]]), np.array([0.3, 0.4, 0.5, 0.6])
    np.testing.assert_array_equal(polyhal.compile(loaded)(xs, ws)["e"],
                                  polyhal.compile(graph)(xs, ws)["e"])
    assert "ry(" in loaded.nodes[0].attrs["qasm"]


def test_circuits_serialize_deterministically() -> None:
    assert dumps(angle_encoded_ansatz(3, 2)[0]) == dumps(angle_encoded_ansatz(3, 2)[0])


# --------------------------------------------------------------------------- bad input


def _attrs(**override):
    qc, x, w = angle_encoded_ansatz(2, 1)
    attrs = quantum.expectation_attrs(qc, z_observables(2), x, w)
    attrs.update(override)
    return attrs


def _build(**override):
    g = GraphBuilder("bad")
    x, w = g.input("x", f64["batch", 2]), g.input("w", f64[4])
    g.output(polyhal.ops.apply("Expectation", x, w, domain="quantum", **_attrs(**override)))
    return g.build()


@pytest.mark.parametrize(("override", "message"), [
    ({"circuit": "not base64!"}, "not base64"),
    ({"circuit": base64.b64encode(b"QISKIT garbage").decode()}, "not a readable QPY"),
    ({"circuit": base64.b64encode(b"QISKIT\x0c\x01\x00\x00" + bytes(8)).decode()},
     "QPY version 12 is older than 13"),
    ({"observables": ["ZZZ"]}, "acts on 3 qubits, but the circuit has 2"),
    ({"observables": ["ZQ"]}, "cannot parse"),
    ({"observables": ["Z + ZZ"]}, "different lengths"),
    ({"observables": []}, "at least one observable"),
    ({"weight_params": ["w0", "w1", "w2"]}, "w3 are bound to neither"),
    ({"weight_params": ["w0", "w1", "w2", "x0"]}, "bound twice"),
    ({"weight_params": ["w0", "w1", "w2", "nope"]}, "not a parameter of the circuit"),
    ({"shots": 0}, "shots=0"),
    ({"seed": -1}, "seed=-1"),
    ({"grad_method": "magic"}, "grad_method='magic'"),
])
def test_bad_attributes_are_verification_errors(override, message) -> None:
    with pytest.raises(VerificationError, match=message) as info:
        _build(**override)
    assert "quantum.Expectation" in str(info.value)


def test_wrong_input_width_is_named() -> None:
    g = GraphBuilder("bad")
    x, w = g.input("x", f64["batch", 3]), g.input("w", f64[4])
    with pytest.raises(VerificationError, match="3 columns but attribute input_params binds 2"):
        g.output(polyhal.ops.apply("Expectation", x, w, domain="quantum", **_attrs()))


def test_a_cotangent_with_other_rows_than_the_inputs_is_refused_when_verified() -> None:
    g = GraphBuilder("bad")
    x, w, ct = g.input("x", f64[3, 2]), g.input("w", f64[4]), g.input("ct", f64[4, 2])
    with pytest.raises(VerificationError, match=r"input 2 \(cotangent\) float64\[4, 2\] has "
                       r"4 rows but input 0 \(inputs\) float64\[3, 2\] has 3"):
        g.op("ExpectationVJP", x, w, ct, domain="quantum", num_outputs=2, **_attrs())


def test_non_unitary_and_non_affine_circuits_are_rejected() -> None:
    a = parameter("a")
    measured = QuantumCircuit(1, 1)
    measured.ry(a, 0)
    measured.measure(0, 0)
    with pytest.raises(IRError, match="'measure', which is not a unitary gate"):
        program(dumps(measured))
    curved = QuantumCircuit(1)
    curved.ry(a * a, 0)
    with pytest.raises(IRError, match="not affine"):
        program(dumps(curved))
    wide = QuantumCircuit(21)
    with pytest.raises(IRError, match="21 qubits exceed the limit of 20"):
        program(dumps(wide))


def test_non_finite_inputs_are_execution_errors() -> None:
    run = polyhal.compile(_build())
    with pytest.raises(ExecutionError, match=r"input 'inputs' has a non-finite value nan at "
                                             r"\[1, 0\]"):
        run(np.array([[0.0, 0.0], [np.nan, 0.0]]), np.zeros(4))
    with pytest.raises(ExecutionError, match="input 'weights' has a non-finite value inf"):
        run(np.zeros((1, 2)), np.array([0.0, np.inf, 0.0, 0.0]))


def test_observable_text_round_trips() -> None:
    op = SparsePauliOp.from_list([("XZ", 0.5), ("IY", -2.0)])
    text = observable_text(op)
    assert text == "0.5*XZ - 2.0*IY"
    assert parse_observable(text).terms == ((0.5, "XZ"), (-2.0, "IY"))
    with pytest.raises(IRError, match="not real"):
        observable_text(SparsePauliOp.from_list([("X", 1j)]))
