"""The ``quant`` domain: integer ops ONNX lacks but hardware needs, with exact
integer semantics. One op so far, the rescale at the end of an integer layer:

``quant.Requantize(x, multiplier, shift[, bias]; zero_point=0, rounding="half_up",
relu=0) -> y``

* ``x``: int32, any rank; ``multiplier``, ``shift`` and the optional ``bias``:
  int32, each a scalar (per tensor) or 1-D of length ``x.shape[-1]`` (per
  channel, along the last axis; ``x`` then needs rank >= 1), each broadcasting
  on its own.
* ``zero_point`` in [-128, 127]; ``rounding`` ``"half_up"`` (ties toward
  +infinity) or ``"half_even"`` (ties to even); ``relu`` 0 or 1.
* ``y``: int8 of ``x``'s shape. Per element, in exact integer arithmetic::

      p = (x + bias) * multiplier          # bias 0 when absent; |p| < 2^63
      q = round(p / 2^shift)               # by `rounding`; shift = 0: q = p
      y = min(127, max(zero_point if relu else -128, q + zero_point))

* ``multiplier`` must lie in [0, 2^31 - 1] and ``shift`` in [0, 63]: a constant
  outside is a :class:`~polyhal.errors.VerificationError`, a run-time value
  outside an :class:`~polyhal.errors.ExecutionError` (never a silent wrap).

The effective scale is ``multiplier / 2^shift``; :func:`multiplier_and_shift`
turns a real scale into the pair, with the multiplier in [2^30, 2^31). The op
is not differentiable (its values are integers). ``docs/fpga.md`` states the
same semantics for the RTL, which must be bit-exact with this kernel.

>>> import numpy as np, polyhal
>>> from polyhal.ir import GraphBuilder, i32
>>> g = GraphBuilder("rescale")
>>> acc = g.input("acc", i32[4])
>>> g.output(requantize(acc, 1, 1), name="y")    # y = round(acc / 2), ties up
>>> polyhal.run(g.build(), np.array([3, -3, 5, 300], np.int32))["y"].tolist()
[2, -1, 3, 127]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polyhal.errors import IRError
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register

DOMAIN = "quant"
ROUNDINGS = ("half_up", "half_even")
MULTIPLIER_RANGE = (0, 2**31 - 1)
SHIFT_RANGE = (0, 63)
PARAMS = ("multiplier", "shift", "bias")
"""Inputs 1 to 3, the per-tensor or per-channel parameters."""
_RANGES = {"multiplier": MULTIPLIER_RANGE, "shift": SHIFT_RANGE}


# --------------------------------------------------------------------------- inference


def _check_attrs(ctx: InferContext) -> None:
    zero_point, rounding = ctx.attrs["zero_point"], ctx.attrs["rounding"]
    if not -128 <= zero_point <= 127:
        raise ctx.error(f"attribute zero_point={zero_point} must lie in [-128, 127]")
    if rounding not in ROUNDINGS:
        raise ctx.error(f"attribute rounding={rounding!r} must be one of "
                        f"{', '.join(map(repr, ROUNDINGS))}")
    ctx.flag("relu")


def _check_param(ctx: InferContext, index: int, x: TensorType) -> None:
    name = PARAMS[index - 1]
    param = ctx.input(index)
    if param.rank > 1:
        raise ctx.error(f"input {index} ({name}) {param} must be a scalar (per tensor) or "
                        "1-D (per channel, along x's last axis)")
    if param.rank == 1:
        if x.rank == 0:
            raise ctx.error(f"input {index} ({name}) is 1-D (per channel) but x is a scalar; "
                            "per-channel parameters need x of rank >= 1")
        length, channels = param.shape[0], x.shape[-1]
        if isinstance(length, int) and isinstance(channels, int) and length != channels:
            raise ctx.error(f"input {index} ({name}) has length {length} but x {x} has "
                            f"{channels} channels along its last axis")
    known = ctx.const(index)
    if known is not None and name in _RANGES:
        problem = out_of_range(name, known)
        if problem:
            raise ctx.error(problem)


def _infer(ctx: InferContext) -> TensorType:
    x = ctx.input(0)
    _check_attrs(ctx)
    for index in (1, 2, 3):
        if ctx.has_input(index):
            _check_param(ctx, index, x)
    return TensorType(DType.INT8, x.shape)


# --------------------------------------------------------------------------- kernel


def out_of_range(name: str, values: np.ndarray) -> str:
    """A message naming the first entry of ``values`` outside ``name``'s range, or ""."""
    low, high = _RANGES[name]
    bad = (values < low) | (values > high)
    if not bad.any():
        return ""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"input {name} holds {int(values[index])} at {list(index)}; {name} must lie in "
            f"[{low}, {high}]")


def check_inputs(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
                 bias: np.ndarray | None, rounding: str) -> None:
    """Raise ValueError naming what a run of the op rejects: a multiplier or shift out
    of range, an unknown rounding, a parameter that is neither a scalar nor 1-D along
    ``x``'s last axis. (Every kernel of the op checks its inputs with this.)"""
    for name, values in (("multiplier", multiplier), ("shift", shift)):
        problem = out_of_range(name, values)
        if problem:
            raise ValueError(problem)
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding={rounding!r} must be one of {', '.join(ROUNDINGS)}")
    for name, param in zip(PARAMS, (multiplier, shift, bias), strict=True):
        if param is not None and (param.ndim > 1 or (param.ndim == 1 and (
                x.ndim == 0 or param.shape[0] != x.shape[-1]))):
            raise ValueError(f"input {name} of shape {list(param.shape)} is neither a scalar "
                             f"nor 1-D of length x.shape[-1] for x of shape {list(x.shape)}")


def _requantize(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
                bias: np.ndarray | None = None, *, zero_point: int, rounding: str,
                relu: int) -> np.ndarray:
    check_inputs(x, multiplier, shift, bias, rounding)
    # Python integers (object arrays) never wrap; at least 1-D, so that every step
    # stays an array.
    wide = np.atleast_1d(x).astype(object)
    s = wide + (0 if bias is None else bias.astype(object))
    p = s * multiplier.astype(object)
    n = np.broadcast_to(shift.astype(object), p.shape)
    f = p >> n                     # floor(p / 2^shift): Python's >> rounds toward -inf
    r = p - (f << n)               # 0 <= r < 2^shift
    # r against h = 2^(shift-1) is 2r against 2^shift: no case for shift = 0 (r = 0 < 1).
    twice, unit = 2 * r, np.left_shift(np.ones(p.shape, object), n)
    above, tie = twice > unit, twice == unit
    up = above | (tie if rounding == "half_up" else tie & (f % 2 == 1))
    t = f + up.astype(object) + zero_point
    low = zero_point if relu else -128
    y = np.minimum(127, np.maximum(low, t))
    return np.asarray(y, dtype=np.int8).reshape(x.shape)


register(OpDef(
    name="Requantize", domain=DOMAIN,
    inputs=(Input("x", "T", doc="int32 accumulators, any rank."),
            Input("multiplier", "T", doc="Scalar or [C] (C = x.shape[-1]), in [0, 2^31-1]."),
            Input("shift", "T", doc="Scalar or [C], in [0, 63]."),
            Input("bias", "T", optional=True, doc="Scalar or [C], added to x first.")),
    outputs=(Output("y", "Q", doc="int8, x's shape."),),
    type_vars={"T": frozenset({DType.INT32}), "Q": frozenset({DType.INT8})},
    attrs=(Attr("zero_point", AttrKind.INT, 0, doc="Added after rounding; in [-128, 127]."),
           Attr("rounding", AttrKind.STRING, "half_up",
                doc="Ties of p / 2^shift: 'half_up' (toward +inf) or 'half_even'."),
           Attr("relu", AttrKind.INT, 0, doc="1: clamp below at zero_point, not -128.")),
    infer=_infer, kernel=_requantize,
    doc=("y = min(127, max(zero_point if relu else -128, round((x + bias) * multiplier / "
         "2^shift) + zero_point)) in exact integer arithmetic (no intermediate wraps), "
         "int32 -> int8. multiplier, shift and bias are each a scalar or per channel (1-D "
         "along x's last axis); rounding of p / 2^shift is 'half_up' (floor((p + "
         "2^(shift-1)) / 2^shift)) or 'half_even'; shift 0 leaves p as it is. multiplier "
         "outside [0, 2^31-1] or shift outside [0, 63] is an error (a VerificationError for "
         "constants, an ExecutionError at run time). See polyhal.ops.requantize.")))


# --------------------------------------------------------------------------- builders


def requantize(x: Any, multiplier: Any, shift: Any, bias: Any = None, *, zero_point: int = 0,
               rounding: str = "half_up", relu: bool | int = False,
               name: str | None = None) -> Any:
    """Add a ``quant.Requantize`` node on builder value ``x`` (int32); the parameters
    may be graph values, arrays or Python ints (int32 constants)."""
    from polyhal.ops import apply

    inputs = (x, multiplier, shift) if bias is None else (x, multiplier, shift, bias)
    return apply("Requantize", *inputs, domain=DOMAIN, zero_point=zero_point,
                 rounding=rounding, relu=int(relu), name=name)


MULTIPLIER_LOW = 2**30


def multiplier_and_shift(scale: float) -> tuple[int, int]:
    """The ``(multiplier, shift)`` whose ``multiplier / 2^shift`` is nearest ``scale``,
    with ``multiplier`` in [2^30, 2^31) and ``shift`` in [0, 63].

    Scales below 2^-33 take ``shift = 63`` and a smaller multiplier (0 for scales below
    2^-64); scales of 2^31 - 0.5 or more, zero, negative and non-finite scales are an
    :class:`~polyhal.errors.IRError`.

    >>> multiplier_and_shift(0.75)
    (1610612736, 31)
    """
    if not (isinstance(scale, int | float | np.floating) and math.isfinite(scale)
            and scale > 0):
        raise IRError(f"requantize scale {scale!r} must be a positive finite number")
    mantissa, exponent = math.frexp(float(scale))        # scale = mantissa * 2^exponent
    multiplier, shift = round(math.ldexp(mantissa, 31)), 31 - exponent
    if multiplier == 2**31:                               # the mantissa rounded up to 1
        multiplier, shift = MULTIPLIER_LOW, shift - 1
    if shift < SHIFT_RANGE[0]:
        raise IRError(f"requantize scale {scale!r} is too large: multiplier / 2^shift "
                      f"reaches at most 2^31 - 1")
    if shift > SHIFT_RANGE[1]:
        return round(math.ldexp(float(scale), SHIFT_RANGE[1])), SHIFT_RANGE[1]
    return multiplier, shift
