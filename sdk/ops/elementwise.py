"""Elementwise ops (ONNX semantics): unary math, activations, binary arithmetic,
comparisons, logic, selection, the variadic Sum/Mean/Max/Min, and Cast.

Every kernel runs with numpy floating-point warnings silenced: ``log(0)``,
``1/0`` and integer overflow have defined results here (IEEE 754 for floats,
two's complement wrap-around for integers), never a warning or an exception.
Where ONNX leaves a behaviour open, the choice is stated in the op's ``doc``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyhal import ops
from polyhal.ir.dtypes import ALL_TYPES, FLOAT_TYPES, NUMERIC_TYPES, SIGNED_NUMERIC_TYPES, DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext, broadcast_types, same_as_input
from polyhal.ops.registry import REQUIRED, Attr, AttrKind, Input, OpDef, Output, register

BOOL_TYPES = frozenset({DType.BOOL})
POW_BASE_TYPES = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64,
                            DType.INT32, DType.INT64})

Kernel = Callable[..., Any]


# --------------------------------------------------------------------------- helpers


def _quiet(kernel: Kernel) -> Kernel:
    """``kernel`` with numpy's floating-point warnings off (results are defined)."""

    @functools.wraps(kernel)
    def run(*args: Any, **attrs: Any) -> Any:
        with np.errstate(all="ignore"):
            return kernel(*args, **attrs)

    return run


def _broadcast(dtype: DType | None = None, like: int = 0) -> Callable[[InferContext], TensorType]:
    """Inference of a broadcasting op: every required input must be present.

    The result dtype is ``dtype``, else that of input ``like``.
    """

    def infer(ctx: InferContext) -> TensorType:
        count = max(len(ctx.inputs), ctx.op.min_inputs)
        types = [ctx.input(i) for i in range(count)]
        return broadcast_types(ctx, *types, dtype=dtype or types[like].dtype)

    return infer


def _with_choices(checks: dict[str, Sequence[Any]],
                  infer: Callable[[InferContext], TensorType]) -> Callable[[InferContext], Any]:
    """``infer`` preceded by checks that attributes take one of their allowed values."""

    def checked(ctx: InferContext) -> TensorType:
        for attr, allowed in checks.items():
            ctx.choice(attr, allowed)
        return infer(ctx)

    return checked


def _unary(name: str, kernel: Kernel, dtypes: frozenset[DType], doc: str, since: int, *,
           io: tuple[str, str] = ("X", "Y"), out_dtypes: frozenset[DType] | None = None,
           infer: Callable[[InferContext], Any] | None = None, **extra: Any) -> OpDef:
    """Register a one-input op (output dtype = input dtype unless ``out_dtypes``)."""
    type_vars = {"T": dtypes} if out_dtypes is None else {"T1": dtypes, "T2": out_dtypes}
    t_in, t_out = ("T", "T") if out_dtypes is None else ("T1", "T2")
    return register(OpDef(
        name=name, inputs=(Input(io[0], t_in),), outputs=(Output(io[1], t_out),),
        type_vars=type_vars, infer=infer or same_as_input(0), kernel=_quiet(kernel),
        doc=doc, onnx_since=since, **extra))


def _binary(name: str, kernel: Kernel, dtypes: frozenset[DType], doc: str, since: int, *,
            out_dtypes: frozenset[DType] | None = None,
            infer: Callable[[InferContext], Any] | None = None, **extra: Any) -> OpDef:
    """Register a broadcasting two-input op ``A, B -> C``."""
    type_vars = {"T": dtypes} if out_dtypes is None else {"T": dtypes, "T1": out_dtypes}
    out_var = "T" if out_dtypes is None else "T1"
    out_dtype = None if out_dtypes is None else next(iter(out_dtypes))
    return register(OpDef(
        name=name, inputs=(Input("A", "T"), Input("B", "T")), outputs=(Output("C", out_var),),
        type_vars=type_vars, infer=infer or _broadcast(out_dtype), kernel=_quiet(kernel),
        doc=doc, onnx_since=since, **extra))


def _variadic(name: str, kernel: Kernel, dtypes: frozenset[DType], doc: str, **extra: Any
              ) -> OpDef:
    """Register a broadcasting op of one or more inputs ``data_0, ... -> <name>``."""
    return register(OpDef(
        name=name, inputs=(Input("data_0", "T", variadic=True),),
        outputs=(Output(name.lower(), "T"),), type_vars={"T": dtypes}, infer=_broadcast(),
        kernel=_quiet(kernel), doc=doc, onnx_since=13, differentiable=True, **extra))


# --------------------------------------------------------------------------- unary math


def _erf(x: np.ndarray) -> np.ndarray:
    """erf, computed in float64 with :func:`math.erf` and rounded to ``x``'s dtype."""
    values = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))
    return values.astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-x) overflows to inf for very negative x, and 1 / inf = 0 is the right limit.
    return 1 / (1 + np.exp(-x))


_unary("Abs", np.abs, NUMERIC_TYPES, "|x|; abs(INT_MIN) wraps to INT_MIN (two's complement).",
       13, differentiable=True)
_unary("Neg", np.negative, SIGNED_NUMERIC_TYPES,
       "-x; -INT_MIN wraps to INT_MIN (two's complement).", 13, differentiable=True)
_unary("Exp", np.exp, FLOAT_TYPES, "e**x.", 13, io=("input", "output"), differentiable=True)
_unary("Log", np.log, FLOAT_TYPES, "Natural log; log(0) = -inf, log(x < 0) = NaN.", 13,
       io=("input", "output"), differentiable=True)
_unary("Sqrt", np.sqrt, FLOAT_TYPES, "Square root; sqrt(x < 0) = NaN.", 13,
       differentiable=True)
_unary("Reciprocal", lambda x: 1 / x, FLOAT_TYPES, "1 / x; 1 / ±0 = ±inf.", 13,
       differentiable=True)
_unary("Tanh", np.tanh, FLOAT_TYPES, "Hyperbolic tangent.", 13, io=("input", "output"),
       differentiable=True)
_unary("Sigmoid", _sigmoid, FLOAT_TYPES, "1 / (1 + exp(-x)).", 13, differentiable=True)
_unary("Erf", _erf, FLOAT_TYPES, "The Gauss error function.", 13, io=("input", "output"),
       differentiable=True)
_unary("Sin", np.sin, FLOAT_TYPES, "Sine (radians).", 22, io=("input", "output"),
       differentiable=True)
_unary("Cos", np.cos, FLOAT_TYPES, "Cosine (radians).", 22, io=("input", "output"),
       differentiable=True)
_unary("Floor", np.floor, FLOAT_TYPES, "Largest integer <= x; NaN, ±inf and ±0 unchanged.", 13)
_unary("Ceil", np.ceil, FLOAT_TYPES, "Smallest integer >= x; NaN, ±inf and ±0 unchanged.", 13)
_unary("Round", np.round, FLOAT_TYPES,
       "Nearest integer, halves to even (2.5 -> 2, -4.5 -> -4); NaN, ±inf and ±0 unchanged.",
       22)
_unary("Sign", np.sign, NUMERIC_TYPES, "-1, 0 or 1 by the sign of x; sign(NaN) = NaN.", 13,
       io=("input", "output"))
_unary("Not", np.logical_not, BOOL_TYPES, "Logical not.", 1)
_unary("IsNaN", np.isnan, FLOAT_TYPES, "True where x is NaN.", 20, out_dtypes=BOOL_TYPES,
       infer=lambda ctx: ctx.input(0).with_dtype(DType.BOOL))


# --------------------------------------------------------------------------- activations


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


def _leaky_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x < 0, x * alpha, x)


def _leaky_relu_decompose(x: Any, alpha: float = 0.01) -> Any:
    return ops.where(ops.less(x, 0.0), x * alpha, x)


def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x < 0, alpha * np.expm1(x), x)


def _elu_decompose(x: Any, alpha: float = 1.0) -> Any:
    return ops.where(ops.less(x, 0.0), (ops.exp(x) - 1.0) * alpha, x)


_GELU_TANH_SCALE = math.sqrt(2 / math.pi)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    # Computed in float64 and rounded once, so the spec is as exact as the dtype allows.
    v = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * v * (1 + np.tanh(_GELU_TANH_SCALE * (v + 0.044715 * v**3)))
    else:
        y = 0.5 * v * (1 + _erf(v / math.sqrt(2)))
    return y.astype(x.dtype)


def _gelu_decompose(x: Any, approximate: str = "none") -> Any:
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * _GELU_TANH_SCALE
        return x * 0.5 * (ops.tanh(inner) + 1.0)
    return x * 0.5 * (ops.erf(x * (1 / math.sqrt(2))) + 1.0)


def _softplus(x: np.ndarray) -> np.ndarray:
    # ln(1 + e**x) = max(x, 0) + ln(1 + e**-|x|): the same value without overflow.
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _softplus_decompose(x: Any) -> Any:
    return ops.relu(x) + ops.log(ops.exp(-ops.abs(x)) + 1.0)


_unary("Relu", _relu, SIGNED_NUMERIC_TYPES, "max(x, 0), elementwise; relu(NaN) = NaN.", 14,
       differentiable=True)
_unary("LeakyRelu", _leaky_relu, FLOAT_TYPES, "x if x >= 0 else alpha * x.", 16,
       attrs=(Attr("alpha", AttrKind.FLOAT, 0.01, "Slope for x < 0."),),
       decompose=_leaky_relu_decompose, differentiable=True)
_unary("Elu", _elu, FLOAT_TYPES, "x if x >= 0 else alpha * (exp(x) - 1).", 22,
       attrs=(Attr("alpha", AttrKind.FLOAT, 1.0, "Scale for x < 0."),),
       decompose=_elu_decompose, differentiable=True)
_unary("Gelu", _gelu, FLOAT_TYPES,
       "0.5 * x * (1 + erf(x / sqrt(2))); with approximate='tanh', "
       "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))).", 20,
       attrs=(Attr("approximate", AttrKind.STRING, "none", "'none' or 'tanh'."),),
       infer=_with_choices({"approximate": ("none", "tanh")}, same_as_input(0)),
       decompose=_gelu_decompose, differentiable=True)
_unary("Softplus", _softplus, FLOAT_TYPES, "ln(exp(x) + 1), computed without overflow.", 22,
       decompose=_softplus_decompose, differentiable=True)


# --------------------------------------------------------------------------- binary arithmetic


def _safe_divisor(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(b == 0, b with zeros replaced by 1)`` for integer division."""
    zero = b == 0
    return zero, np.where(zero, b.dtype.type(1), b)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.divide(a, b)
    zero, safe = _safe_divisor(b)
    # fmod gives the remainder of truncating division, so a - rem is an exact multiple.
    quotient = (a - np.fmod(a, safe)) // safe
    return np.where(zero, a.dtype.type(0), quotient).astype(a.dtype, copy=False)


def _mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    remainder = np.fmod if fmod else np.mod
    if a.dtype.kind == "f":
        return remainder(a, b)
    zero, safe = _safe_divisor(b)
    return np.where(zero, a, remainder(a, safe)).astype(a.dtype, copy=False)


def _float_to_int(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Truncate toward zero; NaN -> 0; out of range saturates to target's min/max."""
    info = np.iinfo(target)
    t = np.trunc(x.astype(np.float64))
    t = np.where(np.isnan(t), 0.0, t)
    limit = float(info.max) + 1  # a power of two, exact in float64 (info.max may not be)
    inside = (t >= info.min) & (t < limit)
    out = np.where(inside, t, 0.0).astype(target)
    out = np.where(t < info.min, target.type(info.min), out)
    return np.where(t >= limit, target.type(info.max), out).astype(target, copy=False)


def _int_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact integer power, wrapping; negative exponents give trunc(1 / x**-y)."""
    base, exp = np.broadcast_arrays(x.astype(np.int64), y.astype(np.int64))
    negative = exp < 0
    # int64 arithmetic wraps modulo 2**64, which is congruent modulo any narrower width.
    power = np.power(base, np.where(negative, 0, exp))
    odd = exp % 2 == 1
    inverse = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, inverse, power).astype(x.dtype)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)
    if y.dtype.kind == "f":
        return _float_to_int(np.power(x.astype(np.float64), y.astype(np.float64)), x.dtype)
    return _int_pow(x, y)


_binary("Add", np.add, NUMERIC_TYPES,
        "a + b with broadcasting; integers wrap in two's complement.", 14, differentiable=True)
_binary("Sub", np.subtract, NUMERIC_TYPES,
        "a - b with broadcasting; integers wrap in two's complement.", 14, differentiable=True)
_binary("Mul", np.multiply, NUMERIC_TYPES,
        "a * b with broadcasting; integers wrap in two's complement.", 14, differentiable=True)
_binary("Div", _div, NUMERIC_TYPES,
        "a / b with broadcasting. Floats: IEEE 754 (x / 0 = ±inf or NaN). Integers: truncating "
        "division (toward zero, as ONNX specifies); polyhal choices: x / 0 = 0, and "
        "INT_MIN / -1 wraps to INT_MIN.", 14, differentiable=True)
register(OpDef(
    name="Mod", inputs=(Input("A", "T"), Input("B", "T")), outputs=(Output("C", "T"),),
    type_vars={"T": NUMERIC_TYPES}, kernel=_quiet(_mod),
    attrs=(Attr("fmod", AttrKind.INT, 0, "0: floor (sign of B); 1: truncation (sign of A)."),),
    infer=_with_choices({"fmod": (0, 1)}, _broadcast()), onnx_since=28, differentiable=True,
    doc="Remainder with broadcasting. fmod=0: a - floor(a / b) * b, sign of b (Python %); "
        "fmod=1: a - trunc(a / b) * b, sign of a (C fmod). Floats follow the ONNX special "
        "cases (x mod ±0 = NaN, ±inf mod y = NaN). polyhal choice for integers: a mod 0 = a "
        "(so a == Div(a, b) * b + Mod(a, b, fmod=1) holds with Div(a, 0) = 0)."))
register(OpDef(
    name="Pow", inputs=(Input("X", "T"), Input("Y", "T1")), outputs=(Output("Z", "T"),),
    type_vars={"T": POW_BASE_TYPES, "T1": NUMERIC_TYPES}, infer=_broadcast(),
    kernel=_quiet(_pow), onnx_since=15, differentiable=True,
    doc="x ** y with broadcasting; the result has x's dtype. Float x: computed in float64 and "
        "rounded once. polyhal choices for integer x: an integer y gives the exact power "
        "wrapped in two's complement, and for y < 0 the truncated 1 / x**-y (1 for x = 1, "
        "±1 for x = -1, else 0, also for x = 0); a float y computes in float64 and converts "
        "like Cast (truncate, NaN -> 0, saturate)."))


# --------------------------------------------------------------------------- comparisons, logic


def _compare(name: str, kernel: Kernel, since: int, dtypes: frozenset[DType] = NUMERIC_TYPES,
             what: str = "") -> None:
    _binary(name, kernel, dtypes, f"a {what} b with broadcasting, as bool; NaN compares false"
            + (" (NaN != NaN)." if name == "Equal" else "."), since, out_dtypes=BOOL_TYPES)


_compare("Equal", np.equal, 19, ALL_TYPES, "==")
_compare("Less", np.less, 13, what="<")
_compare("Greater", np.greater, 13, what=">")
_compare("LessOrEqual", np.less_equal, 16, what="<=")
_compare("GreaterOrEqual", np.greater_equal, 16, what=">=")
_binary("And", np.logical_and, BOOL_TYPES, "Logical and with broadcasting.", 7,
        out_dtypes=BOOL_TYPES)
_binary("Or", np.logical_or, BOOL_TYPES, "Logical or with broadcasting.", 7,
        out_dtypes=BOOL_TYPES)
_binary("Xor", np.logical_xor, BOOL_TYPES, "Logical xor with broadcasting.", 7,
        out_dtypes=BOOL_TYPES)


# --------------------------------------------------------------------------- selection, clip


def _clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None
          ) -> np.ndarray:
    y = x if lo is None else np.maximum(x, lo)
    return y if hi is None else np.minimum(y, hi)


def _clip_decompose(x: Any, lo: Any = None, hi: Any = None) -> Any:
    y = ops.max(x) if lo is None else ops.max(x, lo)  # one-input Max: a copy of x
    return y if hi is None else ops.min(y, hi)


def _infer_clip(ctx: InferContext) -> TensorType:
    for index, name in ((1, "min"), (2, "max")):
        if ctx.has_input(index) and ctx.input(index).rank != 0:
            raise ctx.error(f"input {index} ({name}) must be a scalar (rank 0), "
                            f"got {ctx.input(index)}")
    return ctx.input(0)


register(OpDef(
    name="Where", inputs=(Input("condition", "B"), Input("X", "T"), Input("Y", "T")),
    outputs=(Output("output", "T"),), type_vars={"B": BOOL_TYPES, "T": ALL_TYPES},
    infer=_broadcast(like=1), kernel=_quiet(np.where), onnx_since=16, differentiable=True,
    doc="x where condition else y, all three broadcast together."))
register(OpDef(
    name="Clip",
    inputs=(Input("input", "T"), Input("min", "T", optional=True),
            Input("max", "T", optional=True)),
    outputs=(Output("output", "T"),), type_vars={"T": NUMERIC_TYPES}, infer=_infer_clip,
    kernel=_quiet(_clip), decompose=_clip_decompose, onnx_since=13, differentiable=True,
    doc="Min(max, Max(input, min)); min and max are optional scalars (absent: no bound). "
        "When min > max every element becomes max; NaN stays NaN."))


# --------------------------------------------------------------------------- variadic


def _fold(ufunc: np.ufunc, xs: Sequence[np.ndarray]) -> np.ndarray:
    """``ufunc`` applied left to right; a fresh array even for one input."""
    return functools.reduce(ufunc, xs[1:], np.array(xs[0], copy=True))


def _mean(*xs: np.ndarray) -> np.ndarray:
    return _fold(np.add, xs) / len(xs)


def _mean_decompose(*xs: Any) -> Any:
    return ops.sum(*xs) / float(len(xs))


_variadic("Sum", lambda *xs: _fold(np.add, xs), FLOAT_TYPES,
          "Sum of one or more inputs with broadcasting, added left to right.")
_variadic("Mean", _mean, FLOAT_TYPES,
          "Sum of one or more inputs with broadcasting, divided by their count.",
          decompose=_mean_decompose)
_variadic("Max", lambda *xs: _fold(np.maximum, xs), NUMERIC_TYPES,
          "Elementwise max of one or more inputs with broadcasting; polyhal choice: NaN in "
          "any input gives NaN.")
_variadic("Min", lambda *xs: _fold(np.minimum, xs), NUMERIC_TYPES,
          "Elementwise min of one or more inputs with broadcasting; polyhal choice: NaN in "
          "any input gives NaN.")


# --------------------------------------------------------------------------- cast


def _cast(x: np.ndarray, to: DType, saturate: int, round_mode: str) -> np.ndarray:
    # saturate and round_mode only concern float8 targets, which polyhal does not have.
    if x.dtype.kind == "f" and to.is_int:
        return _float_to_int(x, to.numpy)
    return x.astype(to.numpy)


def _infer_cast(ctx: InferContext) -> TensorType:
    ctx.flag("saturate")
    ctx.choice("round_mode", ("up", "down", "nearest"))
    return ctx.input(0).with_dtype(ctx.attrs["to"])


register(OpDef(
    name="Cast", inputs=(Input("input", "T1"),), outputs=(Output("output", "T2"),),
    type_vars={"T1": ALL_TYPES, "T2": ALL_TYPES}, infer=_infer_cast, kernel=_quiet(_cast),
    attrs=(Attr("round_mode", AttrKind.STRING, "up", "float8e8m0 rounding; no effect here."),
           Attr("saturate", AttrKind.INT, 1, "float8 saturation; no effect here."),
           Attr("to", AttrKind.DTYPE, REQUIRED, "The result dtype.")),
    onnx_since=28, differentiable=True,
    doc="Converts to dtype `to`. float -> float rounds to nearest even (±inf when out of "
        "range); float -> int truncates toward zero, and (polyhal choice, undefined in ONNX) "
        "NaN gives 0 and out-of-range values saturate to the int's min/max; int -> int wraps "
        "(two's complement); x -> bool is x != 0 (NaN -> True); bool -> x gives 0 or 1."))
