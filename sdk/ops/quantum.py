"""Quantum ops (domain ``quantum``): expectation values of parameterized circuits.

``quantum.Expectation(inputs[B, n_in], weights[n_w]) -> [B, n_obs]``: for each
batch row ``b``, the circuit's parameters are bound explicitly by name
(``input_params[j]`` takes ``inputs[b, j]``, ``weight_params[k]`` takes
``weights[k]``; name order is never used), the circuit is applied to
``|0...0>``, and output ``[b, j]`` is ``<psi|O_j|psi>`` for observable ``j``.

* ``circuit``: the qiskit circuit as base64 QPY (:func:`polyhal.quantum.dumps`),
  unitary gates only; it is unrolled as :mod:`polyhal.quantum.circuit`
  describes, and a circuit that fails to parse is an :class:`IRError`.
* ``qasm``: OpenQASM 3 text of the same circuit, for people (never parsed).
* ``observables``: one Pauli sum per output column
  (:mod:`polyhal.quantum.observables`; the rightmost letter is qubit 0).
* ``shots``: absent for exact expectations; ``S > 0`` for estimates from ``S``
  samples per Pauli term (:mod:`polyhal.reference.statevector` states the
  sampling); ``seed`` fixes the draws (absent: fresh entropy every run).
* ``grad_method``: how gradients are computed (``auto``, ``adjoint``,
  ``parameter_shift``, ``finite_diff``); an implementation choice, since every
  method computes the same derivative (exactly, or as an estimate with shots).

``quantum.ExpectationVJP(inputs, weights, cotangent[B, n_obs])`` gives the
vector-Jacobian product: ``d_inputs[b, j] = sum_o cotangent[b, o] dE[b, o] /
d inputs[b, j]`` and ``d_weights[k] = sum_b sum_o cotangent[b, o] dE[b, o] /
d weights[k]``. Autodiff emits it; its seed stream is ``[seed, 1]``.

Both compute in float64 and round once to the input dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from polyhal.errors import ExecutionError, IRError
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import REQUIRED, Attr, AttrKind, Input, OpDef, Output, register
from polyhal.quantum.binding import Binding, bind
from polyhal.quantum.circuit import dumps, program, to_qasm
from polyhal.quantum.observables import Observable, check_observables, observable_text
from polyhal.reference import statevector

FLOATS = frozenset({DType.FLOAT32, DType.FLOAT64})
GRAD_METHODS = ("auto", "adjoint", "parameter_shift", "finite_diff")
MAX_SHOTS = 1 << 40

ATTRS = (
    Attr("circuit", AttrKind.STRING, REQUIRED, "The circuit, base64 QPY."),
    Attr("qasm", AttrKind.STRING, None, "OpenQASM 3 text of the circuit (for reading only)."),
    Attr("observables", AttrKind.STRINGS, REQUIRED,
         "One Pauli sum per output column, e.g. 'ZI + 0.5*XX' (rightmost letter: qubit 0)."),
    Attr("input_params", AttrKind.STRINGS, REQUIRED,
         "Circuit parameter bound to each input column, in column order."),
    Attr("weight_params", AttrKind.STRINGS, REQUIRED,
         "Circuit parameter bound to each weight, in weight order."),
    Attr("shots", AttrKind.INT, None, "Samples per Pauli term; absent: exact."),
    Attr("seed", AttrKind.INT, None, "Seed of the shot sampling; absent: fresh entropy."),
    Attr("grad_method", AttrKind.STRING, "auto",
         "auto, adjoint, parameter_shift or finite_diff."),
)


class Spec:
    """A node's circuit, observables and binding, checked (shared by every kernel)."""

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.program = program(attrs["circuit"])
        self.observables: list[Observable] = check_observables(list(attrs["observables"]),
                                                               self.program.num_qubits)
        self.binding: Binding = bind(self.program, list(attrs["input_params"]),
                                     list(attrs["weight_params"]))
        shots, seed = attrs.get("shots"), attrs.get("seed")
        if shots is not None and not (isinstance(shots, int) and 0 < shots <= MAX_SHOTS):
            raise IRError(f"attribute shots={shots!r} must be a positive integer "
                          f"(at most 2**40), or absent for exact expectations")
        if seed is not None and not (isinstance(seed, int) and 0 <= seed < 1 << 63):
            raise IRError(f"attribute seed={seed!r} must be an integer in [0, 2**63)")
        method = attrs.get("grad_method") or "auto"
        if method not in GRAD_METHODS:
            raise IRError(f"attribute grad_method={method!r} must be one of "
                          f"{', '.join(GRAD_METHODS)}")
        self.shots: int | None = shots
        self.seed: int | None = seed
        self.grad_method: str = method

    def angles(self, inputs: np.ndarray, weights: np.ndarray, where: str) -> np.ndarray:
        """Occurrence angles ``[B, n_occ]``; an :class:`ExecutionError` on non-finite values."""
        check_finite(inputs, f"{where}: input 'inputs'")
        check_finite(weights, f"{where}: input 'weights'")
        values = self.binding.parameters(inputs.astype(np.float64), weights.astype(np.float64))
        return self.program.angles(values)

    def rng(self, stream: int) -> np.random.Generator:
        """The sampling generator of this node (``stream`` 0 forward, 1 VJP)."""
        return np.random.default_rng(None if self.seed is None else [self.seed, stream])

    def stream_seed(self, stream: int) -> int | None:
        """An integer seed for a simulator's own sampler, drawn from stream ``stream``."""
        return None if self.seed is None else int(self.rng(stream).integers(1 << 31))


def check_finite(array: np.ndarray, where: str) -> None:
    """An :class:`ExecutionError` naming the first non-finite entry of ``array``."""
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ExecutionError(f"{where} has a non-finite value {array[index]} at {list(index)}; "
                             "circuit angles must be finite")


def node_spec(attrs: dict[str, Any]) -> Spec:
    """The checked :class:`Spec` of a node's attributes."""
    return Spec(attrs)


def _check_types(ctx: InferContext, spec: Spec) -> tuple[TensorType, TensorType]:
    x, w = ctx.input(0), ctx.input(1)
    if x.rank != 2:
        raise ctx.error(f"input 0 (inputs) must be [B, n_in], got {x}")
    if w.rank != 1:
        raise ctx.error(f"input 1 (weights) must be [n_w], got {w}")
    if w.dtype != x.dtype:
        raise ctx.error(f"input 1 (weights) is {w.dtype.value}, expected {x.dtype.value}")
    for t, name, count, attr in ((x.shape[1], "inputs", spec.binding.num_inputs, "input_params"),
                                 (w.shape[0], "weights", spec.binding.num_weights,
                                  "weight_params")):
        if isinstance(t, int) and t != count:
            raise ctx.error(f"input {name} has {t} columns but attribute {attr} binds {count}")
    return x, w


def _spec(ctx: InferContext) -> Spec:
    try:
        return Spec(ctx.attrs)
    except IRError as error:
        raise ctx.error(str(error)) from None


def _infer_expectation(ctx: InferContext) -> TensorType:
    spec = _spec(ctx)
    x, _ = _check_types(ctx, spec)
    return TensorType(x.dtype, (x.shape[0], len(spec.observables)))


def _infer_vjp(ctx: InferContext) -> list[TensorType]:
    spec = _spec(ctx)
    x, w = _check_types(ctx, spec)
    ct = ctx.input(2)
    if ct.dtype != x.dtype or ct.rank != 2 or (
            isinstance(ct.shape[1], int) and ct.shape[1] != len(spec.observables)):
        raise ctx.error(f"input 2 (cotangent) must be {x.dtype.value}[B, "
                        f"{len(spec.observables)}], got {ct}")
    if isinstance(ct.shape[0], int) and isinstance(x.shape[0], int) and ct.shape[0] != x.shape[0]:
        raise ctx.error(f"input 2 (cotangent) {ct} has {ct.shape[0]} rows but input 0 (inputs) "
                        f"{x} has {x.shape[0]}")
    return [x, w]


def _expectation(inputs: np.ndarray, weights: np.ndarray, **attrs: Any) -> np.ndarray:
    spec = Spec(attrs)
    angles = spec.angles(inputs, weights, "quantum.Expectation")
    values = statevector.expectations(spec.program, spec.observables, angles, spec.shots,
                                      spec.rng(0))
    return values.astype(inputs.dtype)


def _expectation_vjp(inputs: np.ndarray, weights: np.ndarray, cotangent: np.ndarray,
                     **attrs: Any) -> tuple[np.ndarray, np.ndarray]:
    spec = Spec(attrs)
    angles = spec.angles(inputs, weights, "quantum.ExpectationVJP")
    check_finite(cotangent, "quantum.ExpectationVJP: input 'cotangent'")
    per_angle = statevector.angle_gradients(spec.program, spec.observables, angles, spec.shots,
                                            spec.rng(1))
    d_angles = np.einsum("bo,bok->bk", cotangent.astype(np.float64), per_angle)
    d_inputs, d_weights = spec.binding.split(d_angles @ spec.program.coefficients.T)
    return d_inputs.astype(inputs.dtype), d_weights.astype(inputs.dtype)


_INPUTS = (Input("inputs", "T", doc="[B, n_in]: one row of input parameters per item."),
           Input("weights", "T", doc="[n_w]: the weights, shared by every row."))

register(OpDef(
    name="Expectation", domain="quantum", inputs=_INPUTS,
    outputs=(Output("Y", "T", doc="[B, n_obs]: <O_j> for each row and observable."),),
    type_vars={"T": FLOATS}, infer=_infer_expectation, kernel=_expectation, attrs=ATTRS,
    differentiable=True,
    doc="Expectation values of a parameterized qiskit circuit: the circuit's parameters "
        "bound by name to input columns and weights, observables as Pauli sums, exact or "
        "with shots (see polyhal.ops.quantum)."))

register(OpDef(
    name="ExpectationVJP", domain="quantum",
    inputs=(*_INPUTS, Input("cotangent", "T", doc="[B, n_obs]: cotangent of Expectation.")),
    outputs=(Output("d_inputs", "T", doc="[B, n_in]."), Output("d_weights", "T", doc="[n_w].")),
    type_vars={"T": FLOATS}, infer=_infer_vjp, kernel=_expectation_vjp, attrs=ATTRS,
    doc="The vector-Jacobian product of quantum.Expectation with respect to its inputs and "
        "weights (what autodiff emits)."))


def expectation_attrs(circuit: Any, observables: Sequence[Any], input_params: Sequence[Any],
                      weight_params: Sequence[Any], *, shots: int | None = None,
                      seed: int | None = None, grad_method: str = "auto") -> dict[str, Any]:
    """The attributes of a ``quantum.Expectation`` node (see :func:`expectation`)."""
    text = circuit if isinstance(circuit, str) else dumps(circuit)
    attrs: dict[str, Any] = {
        "circuit": text,
        "observables": [observable_text(o) for o in observables],
        "input_params": [_param_name(p) for p in input_params],
        "weight_params": [_param_name(p) for p in weight_params],
        "grad_method": grad_method,
    }
    if not isinstance(circuit, str):
        attrs["qasm"] = to_qasm(circuit)
    if shots is not None:
        attrs["shots"] = shots
    if seed is not None:
        attrs["seed"] = seed
    return attrs


def expectation(inputs: Any, weights: Any, circuit: Any, observables: Sequence[Any],
                input_params: Sequence[Any], weight_params: Sequence[Any], *,
                shots: int | None = None, seed: int | None = None,
                grad_method: str = "auto", name: str | None = None) -> Any:
    """Add a ``quantum.Expectation`` node on builder values ``inputs`` and ``weights``.

    ``circuit`` is a ``qiskit.QuantumCircuit`` (or base64 QPY text);
    ``observables`` are ``SparsePauliOp``\\ s, Pauli labels or Pauli-sum text;
    ``input_params`` and ``weight_params`` are the circuit's ``Parameter``\\ s
    (or their names) bound to input columns and to weights, in order.

    >>> import numpy as np, polyhal
    >>> from qiskit import QuantumCircuit
    >>> from qiskit.circuit import Parameter
    >>> from polyhal.ir import GraphBuilder, f64
    >>> from polyhal.ops import quantum
    >>> x, w = Parameter("x"), Parameter("w")
    >>> qc = QuantumCircuit(1)
    >>> _ = qc.ry(x, 0), qc.rz(w, 0)
    >>> g = GraphBuilder("one_qubit")
    >>> xs, ws = g.input("x", f64["batch", 1]), g.input("w", f64[1])
    >>> g.output(quantum.expectation(xs, ws, qc, ["Z", "X"], [x], [w]), name="e")
    >>> run = polyhal.compile(g.build())
    >>> run(np.array([[0.0], [np.pi / 2]]), np.array([0.0]))["e"].round(6).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    from polyhal.ops import apply

    attrs = expectation_attrs(circuit, observables, input_params, weight_params, shots=shots,
                              seed=seed, grad_method=grad_method)
    if name is not None:
        attrs["name"] = name
    return apply("Expectation", inputs, weights, domain="quantum", **attrs)


def _param_name(param: Any) -> str:
    name = getattr(param, "name", param)
    if not isinstance(name, str):
        raise IRError(f"expected a circuit Parameter or its name, got {param!r}")
    return name
