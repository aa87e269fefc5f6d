"""L4-quantum: ``quantum.Expectation`` against its specification, exact and with shots.

Cases exist for a device that claims ``quantum.Expectation`` (the gradient
cases also need ``quantum.ExpectationVJP``), over the conformance circuits
(:mod:`polyhal.conformance.quantum_circuits`) in every claimed float dtype,
on seeded angles in ``[-pi, pi]``. Ids are
``L4-quantum/Expectation/<dtype>/<kind>-<circuit>`` (``-N`` appended for the
N-th seed of a profile):

* ``exact``: expectations against the reference executor, float64
  ``atol=1e-8`` (float32: ``1e-5`` absolute and relative).
* ``shots``: ``shots=4000`` with a fixed seed; every entry within
  ``5 sigma + 1e-9`` of the exact value, ``sigma`` the bound of
  :mod:`polyhal.reference.statevector`, ``sum_k |c_k| sqrt(1 - <P_k>^2) /
  sqrt(S)``, from the exact value of each Pauli term.
* ``grad-<method>``: the vjp graph (:func:`polyhal.autodiff.vjp`) of a node
  with ``grad_method`` ``adjoint``, ``parameter_shift`` and ``finite_diff``,
  on seeded cotangents, against central finite differences of the exact
  forward pass (float64 ``1e-6`` absolute and relative; the forward output
  too).
* ``grad-parameter_shift-shots``: the same with ``shots``; each entry within
  5 sigma of the exact VJP, sigma bounded through the parameter-shift rule of
  :mod:`polyhal.quantum.gates` (the sum of the shifted points' bounds, weighted
  by the rule's and the cotangent's magnitudes). There is no adjoint case with
  shots (a device may refuse it), nor a finite-difference one (its noise is
  amplified by the inverse step).
* ``reproducible``: the shots node twice on one executable and once more from
  a fresh compile gives identical results; another seed gives different ones.

The ``ci`` profile takes a handful of cases (float64 for all but the exact
expectations and one adjoint gradient); ``full`` every circuit x kind x
claimed dtype x seed.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from polyhal import autodiff
from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.execute import run_on_device
from polyhal.conformance.profiles import Profile
from polyhal.conformance.quantum_circuits import CIRCUITS, CircuitCase
from polyhal.conformance.tolerances import Comparison, Tolerance
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import CompileOptions, Device
from polyhal.ir import DType, Graph, GraphBuilder, TensorType
from polyhal.ops.quantum import Spec, expectation, expectation_attrs, node_spec
from polyhal.quantum.gates import generator
from polyhal.quantum.observables import Observable
from polyhal.reference import statevector
from polyhal.runtime.placement import node_reason

LEVEL = "L4-quantum"
FORWARD, VJP = "quantum.Expectation", "quantum.ExpectationVJP"
TOLERANCES = {DType.FLOAT64: Tolerance(atol=1e-8),
              DType.FLOAT32: Tolerance(atol=1e-5, rtol=1e-5)}
"""Exact expectations (both compute in float64; float32 rounds once at the end)."""
GRADIENT_TOLERANCES = {DType.FLOAT64: Tolerance(atol=1e-6, rtol=1e-6),
                       DType.FLOAT32: Tolerance(atol=1e-5, rtol=1e-5)}
"""Gradients against finite differences (whose own error is about 1e-10)."""
SIGMAS = 5.0
"""Shot estimates must lie within this many (bounded) standard deviations."""
SLACK = {DType.FLOAT64: 1e-9, DType.FLOAT32: 1e-6}
"""Added to the shot bound: float rounding."""
SHOTS = 4000
GRADIENT_SHOTS = 20_000
"""Shots of the gradient cases: each shifted point adds its own noise, and with these
shots a gradient of the wrong sign lies outside 5 sigma in most entries."""
SEED = 1234
FD_STEP = 1e-5
"""Step of the central differences of the exact forward pass."""
EXACT_METHODS = ("adjoint", "parameter_shift", "finite_diff")
ROWS = 3


@dataclass(frozen=True)
class Plan:
    """One case to generate: kind, circuit and dtype."""

    kind: str
    """``exact``, ``shots``, ``grad-<method>``, ``grad-parameter_shift-shots``,
    ``reproducible``."""
    circuit: str
    dtype: DType


KINDS = ("exact", "shots", *(f"grad-{m}" for m in EXACT_METHODS), "grad-parameter_shift-shots",
         "reproducible")

CI_PLANS = (Plan("shots", "ansatz_2q", DType.FLOAT64),
            Plan("shots", "controlled_3q", DType.FLOAT64),
            *(Plan(f"grad-{m}", "controlled_3q", DType.FLOAT64) for m in EXACT_METHODS),
            Plan("grad-adjoint", "controlled_3q", DType.FLOAT32),
            Plan("grad-parameter_shift-shots", "ansatz_2q", DType.FLOAT64),
            Plan("reproducible", "ansatz_2q", DType.FLOAT64))
"""The ``ci`` cases besides the exact expectations (which take every circuit and dtype)."""


def _plans(dtypes: list[DType], profile: Profile) -> Iterator[Plan]:
    """The cases of ``profile`` among the claimed ``dtypes``."""
    if profile.name != "ci":
        for kind in KINDS:
            for circuit in CIRCUITS:
                for dtype in dtypes:
                    yield Plan(kind, circuit, dtype)
        return
    for circuit in CIRCUITS:
        for dtype in dtypes:
            yield Plan("exact", circuit, dtype)
    yield from (p for p in CI_PLANS if p.dtype in dtypes)


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L4-quantum cases of a device with ``caps`` (none unless it claims
    ``quantum.Expectation``)."""
    claimed = caps.ops.get(FORWARD, frozenset())
    dtypes = [d for d in (DType.FLOAT64, DType.FLOAT32) if d in claimed]
    for plan in _plans(dtypes, profile):
        for index, seed in enumerate(profile.seeds):
            suffix = "" if index == 0 else f"-{index}"
            case_id = f"{LEVEL}/Expectation/{plan.dtype.value}/{plan.kind}-{plan.circuit}{suffix}"
            yield _case(caps, plan, case_id, seed)


def _case(caps: Capabilities, plan: Plan, case_id: str, seed: int) -> Case:
    rng = np.random.default_rng([seed, zlib.crc32(case_id.encode())])
    circuit = CIRCUITS[plan.circuit]()
    x = rng.uniform(-np.pi, np.pi, (ROWS, circuit.num_inputs)).astype(plan.dtype.numpy)
    w = rng.uniform(-np.pi, np.pi, circuit.num_weights).astype(plan.dtype.numpy)
    case = Case(case_id, LEVEL, FORWARD, plan.dtype.value, plan.kind)
    if plan.kind == "exact":
        return _exact(case, circuit, x, w)
    if plan.kind == "shots":
        return _shots(case, circuit, x, w)
    if plan.kind == "reproducible":
        return _reproducible(case, circuit, x, w)
    cotangent = rng.uniform(-1, 1, (ROWS, len(circuit.observables))).astype(plan.dtype.numpy)
    method = plan.kind.removeprefix("grad-").removesuffix("-shots")
    shots = GRADIENT_SHOTS if plan.kind.endswith("-shots") else None
    return _gradient(caps, case, circuit, [x, w, cotangent], method, shots)


def forward_graph(circuit: CircuitCase, x: np.ndarray, w: np.ndarray, **attrs: Any) -> Graph:
    """The one-node ``quantum.Expectation`` graph of ``circuit`` (inputs ``x``, ``w``;
    output ``e``) at the shapes of ``x`` and ``w``."""
    g = GraphBuilder(f"expectation_{circuit.name}")
    xs, ws = g.input("x", TensorType.of(x)), g.input("w", TensorType.of(w))
    g.output(expectation(xs, ws, circuit.circuit, circuit.observables, circuit.input_params,
                         circuit.weight_params, **attrs), name="e")
    return g.build()


def _spec(circuit: CircuitCase) -> Spec:
    """The exact-mode node spec of ``circuit``."""
    return node_spec(expectation_attrs(circuit.circuit, circuit.observables,
                                       circuit.input_params, circuit.weight_params))


def exact_values(spec: Spec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact expectations ``[B, n_obs]`` in float64 (the specification's simulator)."""
    return statevector.expectations(spec.program, spec.observables, spec.angles(x, w, LEVEL))


def term_sigma(states: np.ndarray, observables: list[Observable], shots: int) -> np.ndarray:
    """The shot-noise bound ``[B, n_obs]`` of :mod:`polyhal.reference.statevector`:
    ``sum_k |c_k| sqrt(1 - <P_k>^2) / sqrt(S)`` from each term's exact value."""
    result = np.zeros((states.shape[0], len(observables)))
    for j, obs in enumerate(observables):
        for coefficient, label in obs.terms:
            value = statevector.exact_expectations(states, [Observable(((1.0, label),))])[:, 0]
            result[:, j] += abs(coefficient) * np.sqrt(np.clip(1 - value**2, 0.0, 1.0))
    return result / np.sqrt(shots)


def forward_sigma(spec: Spec, x: np.ndarray, w: np.ndarray, shots: int) -> np.ndarray:
    """The bound on the standard deviation of each shot estimate ``[B, n_obs]``."""
    states = statevector.simulate(spec.program, spec.angles(x, w, LEVEL))
    return term_sigma(states, spec.observables, shots)


def gradient_sigma(spec: Spec, x: np.ndarray, w: np.ndarray, cotangent: np.ndarray,
                   shots: int) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on the standard deviations of a parameter-shift VJP with shots, for the
    inputs ``[B, n_in]`` and the weights ``[n_w]``: the standard deviation of a sum is at
    most the sum of the terms' (whatever their correlation), so each occurrence angle
    gets ``sum_shifts |coefficient| sum_o |cotangent[b, o]| sigma_o(shifted)``, and each
    parameter the sum over its occurrences weighted by ``|d angle / d parameter|``."""
    angles = spec.angles(x, w, LEVEL)
    program = spec.program
    by_angle = np.zeros(angles.shape)
    weights = np.abs(cotangent.astype(np.float64))
    for k in range(program.num_occurrences):
        for coefficient, shift in generator(program.occurrence_gates[k]).rule.terms:
            shifted = angles.copy()
            shifted[:, k] += shift
            states = statevector.simulate(program, shifted)
            sigma = term_sigma(states, spec.observables, shots)
            by_angle[:, k] += abs(coefficient) * (weights * sigma).sum(axis=1)
    return spec.binding.split(by_angle @ np.abs(program.coefficients).T)


def finite_difference_vjp(spec: Spec, x: np.ndarray, w: np.ndarray, cotangent: np.ndarray,
                          step: float = FD_STEP) -> tuple[np.ndarray, np.ndarray]:
    """The VJP ``(d_inputs [B, n_in], d_weights [n_w])`` by central differences of the
    exact forward pass, in float64 at the given (possibly float32) values."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    ct = cotangent.astype(np.float64)

    def slope(dx: np.ndarray, dw: np.ndarray) -> np.ndarray:
        ahead = exact_values(spec, x + dx, w + dw)
        behind = exact_values(spec, x - dx, w - dw)
        return ct * (ahead - behind) / (2 * step)

    d_inputs = np.zeros_like(x)
    for j in range(x.shape[1]):
        dx = np.zeros_like(x)
        dx[:, j] = step  # rows are independent: one pass moves every row's column j
        d_inputs[:, j] = slope(dx, np.zeros_like(w)).sum(axis=1)
    d_weights = np.zeros_like(w)
    for k in range(w.shape[0]):
        dw = np.zeros_like(w)
        dw[k] = step
        d_weights[k] = slope(np.zeros_like(x), dw).sum()
    return d_inputs, d_weights


def _exact(case: Case, circuit: CircuitCase, x: np.ndarray, w: np.ndarray) -> Case:
    case.graph = forward_graph(circuit, x, w)
    case.inputs = [x, w]
    case.expected = reference_outputs(case.graph, case.inputs)
    case.tolerance = TOLERANCES[DType.from_numpy(x.dtype)]
    return case


def _shots(case: Case, circuit: CircuitCase, x: np.ndarray, w: np.ndarray) -> Case:
    spec = _spec(circuit)
    dtype = DType.from_numpy(x.dtype)
    case.graph = forward_graph(circuit, x, w, shots=SHOTS, seed=SEED)
    case.inputs = [x, w]
    case.expected = [exact_values(spec, x, w).astype(x.dtype)]
    bounds = [SIGMAS * forward_sigma(spec, x, w, SHOTS) + SLACK[dtype]]
    case.check = partial(_within, case.graph, case.inputs, case.expected, bounds)
    return case


def _gradient(caps: Capabilities, case: Case, circuit: CircuitCase, inputs: list[np.ndarray],
              method: str, shots: int | None) -> Case:
    x, w, cotangent = inputs
    dtype = DType.from_numpy(x.dtype)
    attrs: dict[str, Any] = {"grad_method": method}
    if shots is not None:
        attrs.update(shots=shots, seed=SEED)
    graph = autodiff.vjp(forward_graph(circuit, x, w, **attrs), wrt=["x", "w"])
    missing = sorted({reason for node in graph.nodes
                      if (reason := node_reason(caps, graph, node)) is not None})
    if missing:
        return replace(case, not_applicable="the gradient graph needs what the device does "
                                            f"not claim: {'; '.join(missing)}")
    spec = _spec(circuit)
    d_inputs, d_weights = finite_difference_vjp(spec, x, w, cotangent)
    case.graph, case.inputs = graph, inputs
    case.expected = [a.astype(x.dtype) for a in (exact_values(spec, x, w), d_inputs,
                                                 d_weights)]
    if shots is None:
        case.tolerance = GRADIENT_TOLERANCES[dtype]
        return case
    bounds = [SIGMAS * forward_sigma(spec, x, w, shots),
              *(SIGMAS * s for s in gradient_sigma(spec, x, w, cotangent, shots))]
    case.check = partial(_within, graph, inputs, case.expected,
                         [b + SLACK[dtype] for b in bounds])
    return case


def _within(graph: Graph, inputs: list[np.ndarray], expected: list[np.ndarray],
            bounds: list[np.ndarray], device: Device) -> Comparison:
    """Every output entry within its bound of the expected (exact) value."""
    actual = run_on_device(device, graph, inputs)
    if len(actual) != len(expected):
        return Comparison(False, float("inf"), float("inf"),
                          f"{len(actual)} outputs, expected {len(expected)}")
    problems, worst = [], np.zeros(3)  # absolute, relative, over the bound
    for index, (a, e, bound) in enumerate(zip(actual, expected, bounds, strict=True)):
        if a.dtype != e.dtype or a.shape != e.shape:
            return Comparison(False, float("inf"), float("inf"),
                              f"output {index}: got {a.dtype}{list(a.shape)}, expected "
                              f"{e.dtype}{list(e.shape)}")
        exact = e.astype(np.float64)
        error = np.abs(a.astype(np.float64) - exact)
        error = np.where(np.isnan(error), np.inf, error)
        bad = ~(error <= bound)
        if error.size:
            relative = error / np.where(exact == 0, 1.0, np.abs(exact))
            worst = np.maximum(worst, [error.max(), relative.max(), (error / bound).max()])
        if bad.any():
            problems.append(f"output {index}: {int(bad.sum())} of {a.size} entries outside "
                            f"{SIGMAS:g} sigma")
    summary = f"worst entry at {worst[2] * SIGMAS:.2f} sigma"
    return Comparison(not problems, float(worst[0]), float(worst[1]),
                      "; ".join([*problems, summary]))


def _reproducible(case: Case, circuit: CircuitCase, x: np.ndarray, w: np.ndarray) -> Case:
    case.graph = forward_graph(circuit, x, w, shots=SHOTS, seed=SEED)
    case.inputs = [x, w]
    other = forward_graph(circuit, x, w, shots=SHOTS, seed=SEED + 1)
    case.check = partial(_same_seed_same_draws, case.graph, other, case.inputs)
    return case


def _same_seed_same_draws(graph: Graph, other: Graph, inputs: list[np.ndarray],
                          device: Device) -> tuple[bool, str]:
    """Two runs of one executable and a run of a fresh compile agree exactly; the graph
    with another seed gives other estimates."""
    executable = device.compile(graph, CompileOptions())
    runs = []
    for _ in range(2):
        buffers = [device.upload(a) for a in inputs]
        runs.append([device.download(b) for b in executable.run(buffers)])
    runs.append(run_on_device(device, graph, inputs))
    different = run_on_device(device, other, inputs)
    problems = []
    if not _identical(runs[0], runs[1]):
        problems.append("two runs of one executable with the same seed differ")
    if not _identical(runs[0], runs[2]):
        problems.append("a second compile of the same seeded graph gives other results")
    if _identical(runs[0], different):
        problems.append(f"seeds {SEED} and {SEED + 1} give identical estimates")
    return not problems, "; ".join(problems) or (
        f"seed {SEED}: identical over 3 runs; seed {SEED + 1}: different estimates")


def _identical(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y)
                                    for x, y in zip(a, b, strict=True))
