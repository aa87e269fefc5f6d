"""The quantum domain in the conformance suite: L4-quantum (exact and shot expectations,
gradients against finite differences, seeded reproducibility), the hybrid models of L2
and their gradients in L3, and devices with one defect each that the level must fail."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import qiskit_aer  # noqa: F401

from polyhal import hal
from polyhal.adapters.quantum import QuantumAdapter, QuantumDevice, QuantumExecutable
from polyhal.conformance import run_suite
from polyhal.conformance.levels import GENERATORS, l4_quantum
from polyhal.conformance.profiles import LEVELS, get_profile
from polyhal.conformance.quantum_circuits import CIRCUITS
from polyhal.conformance.runner import case_set_hash, generate_cases
from polyhal.hal import Capabilities, CompileOptions, Executable, open_device
from polyhal.ir import Graph
from polyhal.reference import run
from polyhal.reference.statevector import simulate

CIRCUIT_NAMES = tuple(CIRCUITS)


class OffsetExecutable(QuantumExecutable):
    """Every forward expectation 0.01 too large; gradients right."""

    def _run_node(self, node: Any, spec: Any, method: Any, arrays: Any, counters: Any) -> Any:
        results = super()._run_node(node, spec, method, arrays, counters)
        return [r + 0.01 for r in results] if method is None else results


class FlippedGradientExecutable(QuantumExecutable):
    """Expectations right; every ``ExpectationVJP`` output with the wrong sign."""

    def _run_node(self, node: Any, spec: Any, method: Any, arrays: Any, counters: Any) -> Any:
        results = super()._run_node(node, spec, method, arrays, counters)
        return results if method is None else [-r for r in results]


class UnseededExecutable(QuantumExecutable):
    """Ignores the ``seed`` attribute: shot estimates are right but never reproducible."""

    def _run_node(self, node: Any, spec: Any, method: Any, arrays: Any, counters: Any) -> Any:
        spec = copy.copy(spec)
        spec.seed = None
        return super()._run_node(node, spec, method, arrays, counters)


def _broken(name: str, executable: type[QuantumExecutable]) -> type[QuantumAdapter]:
    """A quantum adapter named ``name`` whose device compiles to ``executable``."""
    def compile_graph(self: QuantumDevice, graph: Graph, options: CompileOptions) -> Executable:
        return executable(self, graph)

    device = type(f"{executable.__name__}Device", (QuantumDevice,),
                  {"compile": compile_graph, "__module__": __name__})

    def open_broken(self: QuantumAdapter, index: int = 0, **options: Any) -> QuantumDevice:
        opened = QuantumAdapter.open(self, index, **options)
        return device(opened.driver, opened.forward)

    return type(f"{executable.__name__}Adapter", (QuantumAdapter,), {
        "name": name, "device_class": device, "executable_class": executable,
        "open": open_broken, "__module__": __name__})


OffsetAdapter = _broken("quantum-offset", OffsetExecutable)
FlippedGradientAdapter = _broken("quantum-flipped", FlippedGradientExecutable)
UnseededAdapter = _broken("quantum-unseeded", UnseededExecutable)


@pytest.fixture
def registered():
    names = []

    def add(cls):
        hal.register(cls, replace=True)
        names.append(cls.name)
        return cls

    yield add
    for name in names:
        hal.unregister(name)


@pytest.fixture(scope="module")
def quantum_caps() -> Capabilities:
    with open_device("quantum") as device:
        return device.capabilities


@pytest.fixture(scope="module")
def quantum_report():
    return run_suite("quantum", levels=["L0", "L2", "L3", "L4-quantum"], profile="ci")


def _by_level(report) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for case in report.cases:
        level = counts.setdefault(case.level, {})
        level[case.outcome] = level.get(case.outcome, 0) + 1
    return counts


def test_the_level_is_registered():
    assert "L4-quantum" in LEVELS and GENERATORS["L4-quantum"] is l4_quantum.generate


def test_quantum_passes_l0_l2_l3_and_l4_quantum(quantum_report):
    report = quantum_report
    bad = [(c.id, c.outcome, c.message) for c in report.cases
           if c.outcome not in ("passed", "not_applicable")]
    assert report.ok and not bad, bad
    levels = _by_level(report)
    print(f"quantum ci: {levels} in {report.duration_s} s")
    assert set(levels) == {"L0", "L2", "L3", "L4-quantum"}
    assert all(counts.get("passed", 0) > 0 for counts in levels.values())
    assert "not_applicable" not in levels["L4-quantum"]
    quantum_s = sum(c.duration_s for c in report.cases if c.level == "L4-quantum")
    assert quantum_s < 30
    outcomes = {c.id: c.outcome for c in report.cases}
    for model in ("hybrid-moons", "hybrid-controlled"):
        for dtype in ("float32", "float64"):
            assert outcomes[f"L2/{model}/{dtype}/batch-0"] == "passed"
            assert outcomes[f"L3/{model}/{dtype}/batch-0"] == "passed"
            assert outcomes[f"L3/{model}/{dtype}/loss-0"] == "passed"
    hybrid = next(c for c in report.cases if c.id == "L2/hybrid-moons/float64/batch-0")
    assert "fallback" in hybrid.message and hybrid.max_abs_err < 1e-12


def test_ci_cases_and_ids(quantum_caps):
    cases = generate_cases(quantum_caps, ["L4-quantum"], "ci")
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)) == 14
    prefix = "L4-quantum/Expectation"
    assert {f"{prefix}/{d}/exact-{n}" for n in CIRCUIT_NAMES
            for d in ("float32", "float64")} <= set(ids)
    assert {f"{prefix}/float64/shots-ansatz_2q", f"{prefix}/float64/shots-controlled_3q",
            f"{prefix}/float64/grad-adjoint-controlled_3q",
            f"{prefix}/float64/grad-parameter_shift-controlled_3q",
            f"{prefix}/float64/grad-finite_diff-controlled_3q",
            f"{prefix}/float32/grad-adjoint-controlled_3q",
            f"{prefix}/float64/grad-parameter_shift-shots-ansatz_2q",
            f"{prefix}/float64/reproducible-ansatz_2q"} <= set(ids)
    exact = next(c for c in cases if c.id == f"{prefix}/float64/exact-controlled_3q")
    assert exact.tolerance.atol == 1e-8 and exact.tolerance.rtol == 0
    gradient = next(c for c in cases if c.id == f"{prefix}/float64/grad-adjoint-controlled_3q")
    assert [v.name for v in gradient.graph.outputs] == ["e", "grad_x", "grad_w"]
    assert {n.attrs["grad_method"] for n in gradient.graph.nodes} == {"adjoint"}
    assert case_set_hash(cases) == case_set_hash(generate_cases(quantum_caps, ["L4-quantum"],
                                                                "ci"))


def test_full_takes_every_kind_circuit_and_dtype(quantum_caps):
    profile = get_profile("full")
    plans = list(l4_quantum._plans([*l4_quantum.TOLERANCES], profile))
    assert len(plans) == len(l4_quantum.KINDS) * len(CIRCUIT_NAMES) * 2


def test_finite_differences_match_the_reference_vjp():
    case = CIRCUITS["controlled_3q"]()
    rng = np.random.default_rng(3)
    x = rng.uniform(-np.pi, np.pi, (2, case.num_inputs))
    w = rng.uniform(-np.pi, np.pi, case.num_weights)
    ct = rng.uniform(-1, 1, (2, len(case.observables)))
    graph = l4_quantum.forward_graph(case, x, w)
    from polyhal import autodiff

    reference = run(autodiff.vjp(graph, wrt=["x", "w"]), x, w, ct)
    d_inputs, d_weights = l4_quantum.finite_difference_vjp(l4_quantum._spec(case), x, w, ct)
    np.testing.assert_allclose(d_inputs, reference["grad_x"], atol=1e-9)
    np.testing.assert_allclose(d_weights, reference["grad_w"], atol=1e-9)


def test_the_shot_bound_is_the_binomial_standard_deviation():
    case = CIRCUITS["one_qubit"]()
    spec = l4_quantum._spec(case)
    x, w = np.array([[np.pi / 3]]), np.array([0.0, 0.0])  # RY(pi/3)|0>: <Z> = 1/2, <X> = 0.87
    sigma = l4_quantum.forward_sigma(spec, x, w, 100)
    np.testing.assert_allclose(sigma[0, :2], [np.sqrt(0.75) / 10, 0.5 / 10])
    states = simulate(spec.program, spec.angles(x, w, "test"))
    # 0.5*Y - 0.25*Z: <Y> = 0, so 0.5 * 1 + 0.25 * sqrt(0.75), over sqrt(S).
    np.testing.assert_allclose(l4_quantum.term_sigma(states, spec.observables, 100)[0, 2],
                               (0.5 + 0.25 * np.sqrt(0.75)) / 10)


def test_devices_without_quantum_ops_get_no_quantum_cases():
    with open_device("cpu") as device:
        cases = generate_cases(device.capabilities, ["L2", "L3", "L4-quantum"], "ci")
    assert cases and not any(c.level == "L4-quantum" or "hybrid" in c.id for c in cases)


def test_a_device_without_the_vjp_gets_gradient_cases_not_applicable():
    caps = Capabilities(ops={"quantum.Expectation": ["float64"]}, dynamic_shapes=True)
    cases = generate_cases(caps, ["L2", "L3", "L4-quantum"], "ci")
    quantum = [c for c in cases if c.level == "L4-quantum"]
    assert {c.dtype for c in quantum} == {"float64"}
    gradients = [c for c in quantum if c.shape_class.startswith("grad-")]
    assert gradients and all("quantum.ExpectationVJP is not claimed" in c.not_applicable
                             for c in gradients)
    assert not any(c.not_applicable for c in quantum if c not in gradients)
    assert {c.id for c in cases if c.level == "L2"} == {"L2/hybrid-moons/float64/batch-0",
                                                        "L2/hybrid-controlled/float64/batch-0"}
    hybrid = [c for c in cases if c.level == "L3" and "hybrid" in c.id]
    assert len(hybrid) == 4 and all("quantum.ExpectationVJP is not claimed" in c.not_applicable
                                    for c in hybrid)


def test_reference_passes_l4_quantum_and_the_hybrid_models():
    report = run_suite("reference", levels=["L2", "L3", "L4-quantum"], profile="ci",
                       isolate=False)
    assert report.ok
    quantum = [c for c in report.cases if c.level == "L4-quantum"]
    assert len(quantum) == 14 and all(c.outcome == "passed" for c in quantum)
    assert sum("hybrid" in c.id and c.outcome == "passed" for c in report.cases) == 12


def test_expectations_off_by_a_hundredth_fail_l4_quantum(registered):
    registered(OffsetAdapter)
    report = run_suite("quantum-offset", levels=["L4-quantum"], profile="ci", isolate=False)
    assert not report.ok
    outcomes = {c.id: c.outcome for c in report.cases}
    exact = [i for i in outcomes if "/exact-" in i]
    assert exact and all(outcomes[i] == "failed" for i in exact)
    assert all(outcomes[i] == "failed" for i in outcomes if "/grad-" in i)  # their output e
    failed = next(c for c in report.cases if c.id.endswith("float64/exact-controlled_3q"))
    assert "outside atol=1e-08" in failed.message
    assert failed.max_abs_err == pytest.approx(0.01)


def test_gradients_with_the_wrong_sign_fail_l4_quantum_and_l3(registered):
    registered(FlippedGradientAdapter)
    report = run_suite("quantum-flipped", levels=["L3", "L4-quantum"], profile="ci",
                       isolate=False)
    assert not report.ok
    outcomes = {c.id: c.outcome for c in report.cases}
    gradients = [i for i in outcomes if i.startswith("L4-quantum/") and "/grad-" in i]
    assert len(gradients) == 5 and all(outcomes[i] == "failed" for i in gradients)
    assert all(outcomes[i] == "passed" for i in outcomes
               if i.startswith("L4-quantum/") and i not in gradients)
    shots = next(c for c in report.cases if "grad-parameter_shift-shots" in c.id)
    assert "outside 5 sigma" in shots.message
    assert outcomes["L3/hybrid-moons/float64/loss-0"] == "failed"


def test_a_device_that_ignores_the_seed_fails_reproducibility(registered):
    registered(UnseededAdapter)
    report = run_suite("quantum-unseeded", levels=["L4-quantum"], profile="ci", isolate=False)
    failed = {c.id: c.message for c in report.cases if c.outcome != "passed"}
    assert list(failed) == ["L4-quantum/Expectation/float64/reproducible-ansatz_2q"]
    assert "same seed differ" in next(iter(failed.values()))
