"""Shape ops (ONNX semantics): Reshape, Transpose, Squeeze, Unsqueeze, Flatten,
Expand, Shape, Identity, and the tensor makers Constant, ConstantOfShape, Range.

Ops that take a shape as an input infer exact (possibly symbolic) output dims
when that input is a known constant. When it is not, the static length of the
shape input still gives the output rank, and each unknown dim becomes a fresh
``_``-symbol that is bound at run time.

Validation lives in small pure helpers that raise ``ValueError``: inference
turns their message into a ``VerificationError`` (:func:`checked`) and kernels
let it become an ``ExecutionError``, so both stages say the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyhal.errors import LimitExceededError
from polyhal.ir import dims as D
from polyhal.ir.dtypes import ALL_TYPES, DType
from polyhal.ir.limits import current_limits, ensure_allocatable
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext, broadcast_shapes, const_ints, same_as_input
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register

INT64 = frozenset({DType.INT64})
INDEX_TYPES = frozenset({DType.INT32, DType.INT64})


# --------------------------------------------------------------------------- helpers

def show(values: Sequence[Any], limit: int = 8) -> str:
    """A list for an error message, cut short so hostile inputs stay readable."""
    items = [str(v) for v in list(values)[:limit]]
    return "[" + ", ".join(items) + (", ...]" if len(values) > limit else "]")


def checked(ctx: InferContext, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, with a ``ValueError`` turned into ``ctx.error``."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


def input_name(ctx: InferContext, index: int) -> str:
    """``input 1 (shape)``: how errors name an input."""
    return f"input {index} ({ctx.op.input_spec(index).name})"


def shape_operand(ctx: InferContext, index: int) -> tuple[list[int] | None, int]:
    """A 1-D shape-like input: its values when constant (else ``None``), and its length."""
    t = ctx.input(index)
    what = input_name(ctx, index)
    if t.rank != 1:
        raise ctx.error(f"{what} must be a 1-D tensor, got {t}")
    values = const_ints(ctx, index, what)
    if values is not None:
        return values, len(values)
    if not isinstance(t.shape[0], int):
        raise ctx.error(f"{what} has symbolic length {t.shape[0]}, so the output rank "
                        "cannot be inferred")
    return None, t.shape[0]


def output_rank(ctx: InferContext, rank: int, index: int) -> int:
    """``rank``, the output rank that the length of shape-like input ``index`` gives,
    checked against ``Limits.max_rank`` before any dimension is made: a model file can
    declare that input 2**62 elements long."""
    limit = current_limits().max_rank
    if rank > limit:
        raise LimitExceededError(f"{input_name(ctx, index)} is {ctx.input(index).shape[0]} "
                                 f"elements long, so the output would have rank {rank}, over "
                                 f"the limit of {limit}")
    return rank


def fresh_dims(ctx: InferContext, count: int, tag: str) -> tuple[str, ...]:
    """``count`` new symbols for dims that depend on run-time values."""
    return tuple(ctx.fresh(f"{tag}{i}") for i in range(count))


def ints(array: np.ndarray) -> list[int]:
    """A small integer array as Python ints (no overflow in later arithmetic)."""
    return [int(v) for v in np.asarray(array).reshape(-1)]


def normalize_axes(values: Sequence[int], rank: int, what: str) -> list[int]:
    """Axes in ``[-rank, rank)`` mapped to ``[0, rank)``; repeats are an error."""
    result = []
    for v in values:
        if not -rank <= v < rank:
            raise ValueError(f"{what}: axis {v} is out of range for rank {rank}")
        result.append(v % rank)
    if len(set(result)) != len(result):
        raise ValueError(f"{what} = {show(values)} repeats an axis")
    return result


def check_dims(values: Sequence[int], what: str) -> None:
    """Sizes must be non-negative."""
    bad = [v for v in values if v < 0]
    if bad:
        raise ValueError(f"{what} = {show(values)} has negative size {bad[0]}")


# --------------------------------------------------------------------------- Reshape

def reshape_dims(in_shape: Sequence[D.Dim], spec: Sequence[int],
                 allowzero: int) -> list[D.Dim | None]:
    """The output dims of Reshape; ``None`` for a -1 that is not a polynomial."""
    what = f"input 1 (shape) = {show(spec)}"
    if allowzero not in (0, 1):
        raise ValueError(f"attribute allowzero={allowzero} must be 0 or 1")
    if list(spec).count(-1) > 1:
        raise ValueError(f"{what} has more than one -1")
    if any(v < -1 for v in spec):
        raise ValueError(f"{what} has a negative size other than -1")
    if allowzero and 0 in spec and -1 in spec:
        raise ValueError(f"{what}: with allowzero=1 a shape cannot hold both 0 and -1")
    dims: list[D.Dim | None] = []
    for i, v in enumerate(spec):
        if v == 0 and not allowzero:  # 0 copies the input's dimension
            if i >= len(in_shape):
                raise ValueError(f"{what}: entry {i} is 0 (copy), but the input has rank "
                                 f"{len(in_shape)}")
            dims.append(in_shape[i])
        else:
            dims.append(v)
    total = D.dim_prod(list(in_shape))
    if -1 not in spec:
        count = D.dim_prod(dims)  # type: ignore[arg-type]
        if isinstance(total, int) and isinstance(count, int) and total != count:
            raise ValueError(f"{what} holds {count} elements, the input {total}")
        return dims
    pos = list(spec).index(-1)
    known = D.dim_prod([d for i, d in enumerate(dims) if i != pos])  # type: ignore[misc]
    if known == 0:
        raise ValueError(f"{what}: cannot infer the -1 when the other sizes multiply to 0")
    quotient = D.dim_div_exact(total, known)
    if quotient is None and isinstance(total, int) and isinstance(known, int):
        raise ValueError(f"{what}: {total} elements do not divide into rows of {known}")
    dims[pos] = quotient
    return dims


def _infer_reshape(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    allowzero = int(ctx.flag("allowzero"))  # checked even when the shape is not a constant
    spec, length = shape_operand(ctx, 1)
    if spec is None:
        return data.with_shape(fresh_dims(ctx, output_rank(ctx, length, 1), "reshape"))
    dims = checked(ctx, reshape_dims, data.shape, spec, allowzero)
    return data.with_shape(tuple(ctx.fresh("reshape") if d is None else d for d in dims))


def _reshape(data: np.ndarray, shape: np.ndarray, *, allowzero: int) -> np.ndarray:
    return data.reshape(reshape_dims(data.shape, ints(shape), allowzero))


register(OpDef(
    name="Reshape", inputs=(Input("data", "T"), Input("shape", "I")),
    outputs=(Output("reshaped", "T"),), type_vars={"T": ALL_TYPES, "I": INT64},
    attrs=(Attr("allowzero", AttrKind.INT, 0, "1: a 0 in shape is a size, not a copy"),),
    infer=_infer_reshape, kernel=_reshape, onnx_since=25, differentiable=True,
    doc="Same elements in a new shape: -1 is inferred, 0 copies the input dim unless "
        "allowzero=1. A -1 whose size is not a polynomial in the input's symbols gets a "
        "fresh symbol."))


# --------------------------------------------------------------------------- Transpose

def _infer_transpose(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    perm = ctx.attrs["perm"]
    if perm is None:
        return data.with_shape(data.shape[::-1])
    if sorted(perm) != list(range(data.rank)):
        raise ctx.error(f"attribute perm={show(perm)} is not a permutation of "
                        f"0..{data.rank - 1} (input rank {data.rank})")
    return data.with_shape(tuple(data.shape[p] for p in perm))


register(OpDef(
    name="Transpose", inputs=(Input("data", "T"),), outputs=(Output("transposed", "T"),),
    type_vars={"T": ALL_TYPES}, attrs=(Attr("perm", AttrKind.INTS, None),),
    infer=_infer_transpose, kernel=lambda data, *, perm: np.transpose(data, perm),
    onnx_since=25, differentiable=True,
    doc="Permutes axes: output axis i is input axis perm[i]; no perm reverses the axes."))


# --------------------------------------------------------------------------- Squeeze

def squeeze_axes(shape: Sequence[D.Dim], axes: Sequence[int] | None) -> list[int]:
    """The axes Squeeze removes; named axes must not have a static size other than 1."""
    if axes is None:
        return [i for i, d in enumerate(shape) if d == 1]
    result = normalize_axes(axes, len(shape), "input 1 (axes)")
    for a in result:
        if isinstance(shape[a], int) and shape[a] != 1:
            raise ValueError(f"input 1 (axes): cannot squeeze axis {a} of size {shape[a]}")
    return result


def _infer_squeeze(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    if not ctx.has_input(1):
        symbolic = [i for i, d in enumerate(data.shape) if isinstance(d, str)]
        if symbolic:
            raise ctx.error(f"without input 1 (axes) Squeeze drops every size-1 dimension, but "
                            f"dimension {symbolic[0]} ({data.shape[symbolic[0]]}) is symbolic, "
                            "so the output rank is unknown; give axes")
        axes = None
    else:
        axes, length = shape_operand(ctx, 1)
        if axes is None:  # which axes go is unknown: every remaining dim is fresh
            if length > data.rank:
                raise ctx.error(f"input 1 (axes) has {length} entries for rank {data.rank}")
            return data.with_shape(fresh_dims(ctx, data.rank - length, "squeeze"))
    drop = checked(ctx, squeeze_axes, data.shape, axes)
    return data.with_shape(tuple(d for i, d in enumerate(data.shape) if i not in drop))


def _squeeze(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    drop = squeeze_axes(data.shape, None if axes is None else ints(axes))
    return data.reshape([d for i, d in enumerate(data.shape) if i not in drop])


register(OpDef(
    name="Squeeze", inputs=(Input("data", "T"), Input("axes", "I", optional=True)),
    outputs=(Output("squeezed", "T"),), type_vars={"T": ALL_TYPES, "I": INT64},
    infer=_infer_squeeze, kernel=_squeeze, onnx_since=25, differentiable=True,
    doc="Removes the size-1 axes named by axes (all size-1 axes without it; inference "
        "then needs a static shape). Squeezing an axis whose size is not 1 is an error."))


# --------------------------------------------------------------------------- Unsqueeze

def unsqueeze_dims(shape: Sequence[D.Dim], axes: Sequence[int]) -> list[D.Dim]:
    """``shape`` with size-1 axes inserted at ``axes`` (axes index the output)."""
    rank = len(shape) + len(axes)
    new = set(normalize_axes(axes, rank, "input 1 (axes)"))
    rest = iter(shape)
    return [1 if i in new else next(rest) for i in range(rank)]


def _infer_unsqueeze(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    axes, length = shape_operand(ctx, 1)
    if axes is None:
        return data.with_shape(fresh_dims(ctx, output_rank(ctx, data.rank + length, 1),
                                          "unsqueeze"))
    return data.with_shape(tuple(checked(ctx, unsqueeze_dims, data.shape, axes)))


register(OpDef(
    name="Unsqueeze", inputs=(Input("data", "T"), Input("axes", "I")),
    outputs=(Output("expanded", "T"),), type_vars={"T": ALL_TYPES, "I": INT64},
    infer=_infer_unsqueeze, onnx_since=25, differentiable=True,
    kernel=lambda data, axes: data.reshape(unsqueeze_dims(data.shape, ints(axes))),
    doc="Inserts size-1 axes; axes index the output and may be negative."))


# --------------------------------------------------------------------------- Flatten

def flatten_axis(rank: int, axis: int) -> int:
    """Flatten's axis, which may equal the rank, normalized into ``[0, rank]``."""
    if not -rank <= axis <= rank:
        raise ValueError(f"attribute axis={axis} is out of range [-{rank}, {rank}]")
    return axis + rank if axis < 0 else axis


def _infer_flatten(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    a = checked(ctx, flatten_axis, data.rank, ctx.attrs["axis"])
    return data.with_shape((D.dim_prod(list(data.shape[:a])), D.dim_prod(list(data.shape[a:]))))


def _flatten(data: np.ndarray, *, axis: int) -> np.ndarray:
    a = flatten_axis(data.ndim, axis)
    return data.reshape(math.prod(data.shape[:a]), math.prod(data.shape[a:]))


register(OpDef(
    name="Flatten", inputs=(Input("input", "T"),), outputs=(Output("output", "T"),),
    type_vars={"T": ALL_TYPES}, attrs=(Attr("axis", AttrKind.INT, 1),),
    infer=_infer_flatten, kernel=_flatten, onnx_since=25, differentiable=True,
    doc="A 2-D view: the axes before axis multiply into rows, the rest into columns."))


# --------------------------------------------------------------------------- Expand

def _infer_expand(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    shape, length = shape_operand(ctx, 1)
    if shape is None:  # a static size other than 1 survives any valid broadcast
        rank = output_rank(ctx, max(data.rank, length), 1)
        padded = (1,) * (rank - data.rank) + data.shape
        return data.with_shape(tuple(d if isinstance(d, int) and d != 1
                                     else ctx.fresh(f"expand{i}") for i, d in enumerate(padded)))
    checked(ctx, check_dims, shape, "input 1 (shape)")
    for i in range(1, min(data.rank, length) + 1):
        a, b = data.shape[-i], shape[-i]
        if isinstance(a, int) and a not in (1, b) and b != 1:
            raise ctx.error(f"input 1 (shape) = {show(shape)} does not broadcast with input 0 "
                            f"({data}): dimension {-i} is {a} vs {b}")
    return data.with_shape(broadcast_shapes(ctx, data.shape, tuple(shape)))


def _expand(data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    target = ints(shape)
    check_dims(target, "input 1 (shape)")
    try:
        out = np.broadcast_shapes(data.shape, tuple(target))
    except ValueError:
        raise ValueError(f"input shape {list(data.shape)} does not broadcast with input 1 "
                         f"(shape) = {show(target)}") from None
    ensure_allocatable(out, "Expand output")
    return np.array(np.broadcast_to(data, out))


register(OpDef(
    name="Expand", inputs=(Input("input", "T"), Input("shape", "I")),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "I": INT64},
    infer=_infer_expand, kernel=_expand, onnx_since=13, differentiable=True,
    doc="Broadcasts input and shape against each other (numpy rules, both directions: a "
        "1 in shape keeps the input's size)."))


# --------------------------------------------------------------------------- Shape

def shape_bounds(rank: int, start: int, end: int | None) -> tuple[int, int]:
    """Shape's start/end, each clamped into ``[0, rank]`` after adding rank if negative."""
    def clamp(a: int) -> int:
        return min(max(a + rank if a < 0 else a, 0), rank)

    lo = clamp(start)
    return lo, max(lo, rank if end is None else clamp(end))


def _infer_shape(ctx: InferContext) -> TensorType:
    lo, hi = shape_bounds(ctx.input(0).rank, ctx.attrs["start"], ctx.attrs["end"])
    return TensorType(DType.INT64, (hi - lo,))


def _shape(data: np.ndarray, *, start: int, end: int | None) -> np.ndarray:
    lo, hi = shape_bounds(data.ndim, start, end)
    return np.array(data.shape[lo:hi], dtype=np.int64)


register(OpDef(
    name="Shape", inputs=(Input("data", "T"),), outputs=(Output("shape", "I"),),
    type_vars={"T": ALL_TYPES, "I": INT64},
    attrs=(Attr("end", AttrKind.INT, None), Attr("start", AttrKind.INT, 0)),
    infer=_infer_shape, kernel=_shape, onnx_since=25,
    doc="The input's shape as int64, optionally dims start..end (clamped, never an error)."))


# --------------------------------------------------------------------------- Identity

register(OpDef(
    name="Identity", inputs=(Input("input", "T"),), outputs=(Output("output", "T"),),
    type_vars={"T": ALL_TYPES}, infer=same_as_input(0), kernel=lambda x: np.array(x, copy=True),
    onnx_since=25, differentiable=True, doc="A copy of the input (tensors only)."))


# --------------------------------------------------------------------------- Constant

def constant_value(value: np.ndarray | None = None, value_float: float | None = None,
                   value_floats: tuple[float, ...] | None = None, value_int: int | None = None,
                   value_ints: tuple[int, ...] | None = None) -> np.ndarray:
    """The tensor a Constant node holds; exactly one attribute must be set."""
    given = {"value": value, "value_float": value_float, "value_floats": value_floats,
             "value_int": value_int, "value_ints": value_ints}
    named = [k for k, v in given.items() if v is not None]
    if len(named) != 1:
        raise ValueError("exactly one of the attributes value, value_float, value_floats, "
                         f"value_int, value_ints must be set, got {named or 'none'}")
    if value is not None:
        return value
    if value_float is not None or value_floats is not None:
        return np.asarray(value_float if value_floats is None else value_floats, np.float32)
    return np.asarray(value_int if value_ints is None else value_ints, np.int64)


def _infer_constant(ctx: InferContext) -> TensorType:
    return TensorType.of(checked(ctx, constant_value, **ctx.attrs), "attribute value")


register(OpDef(
    name="Constant", inputs=(), outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES},
    attrs=(Attr("value", AttrKind.TENSOR, None), Attr("value_float", AttrKind.FLOAT, None),
           Attr("value_floats", AttrKind.FLOATS, None), Attr("value_int", AttrKind.INT, None),
           Attr("value_ints", AttrKind.INTS, None)),
    infer=_infer_constant, kernel=lambda **attrs: np.array(constant_value(**attrs), copy=True),
    onnx_since=25,
    doc="A constant tensor: value, or a float32 scalar/1-D (value_float(s)) or an int64 "
        "scalar/1-D (value_int(s)). String and sparse constants are not supported."))


# --------------------------------------------------------------------------- ConstantOfShape

def fill_value(value: np.ndarray | None) -> np.ndarray:
    """ConstantOfShape's fill as a 0-d array; float32 zero when absent."""
    if value is None:
        return np.zeros((), np.float32)
    if value.size != 1:
        raise ValueError(f"attribute value must hold exactly one element, got shape "
                         f"{list(value.shape)}")
    return value.reshape(())


def _infer_constant_of_shape(ctx: InferContext) -> TensorType:
    fill = checked(ctx, fill_value, ctx.attrs["value"])
    shape, length = shape_operand(ctx, 0)
    if shape is None:
        return TensorType(DType.from_numpy(fill.dtype),
                          fresh_dims(ctx, output_rank(ctx, length, 0), "fill"))
    checked(ctx, check_dims, shape, "input 0 (input)")
    return TensorType(DType.from_numpy(fill.dtype), tuple(shape))


def _constant_of_shape(input: np.ndarray, *, value: np.ndarray | None) -> np.ndarray:
    fill = fill_value(value)
    shape = ints(input)
    check_dims(shape, "input 0 (input)")
    ensure_allocatable(shape, "ConstantOfShape output")
    return np.full(shape, fill, dtype=fill.dtype)


register(OpDef(
    name="ConstantOfShape", inputs=(Input("input", "T1"),), outputs=(Output("output", "T2"),),
    type_vars={"T1": INT64, "T2": ALL_TYPES}, attrs=(Attr("value", AttrKind.TENSOR, None),),
    infer=_infer_constant_of_shape, kernel=_constant_of_shape, onnx_since=25,
    doc="A tensor of the given shape filled with the one element of value (float32 0 when "
        "absent); the output dtype is value's."))


# --------------------------------------------------------------------------- Range

RANGE_TYPES = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64,
                         DType.INT16, DType.INT32, DType.INT64})


def range_count(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    """``max(ceil((limit - start) / delta), 0)``, exact for integers."""
    if np.issubdtype(start.dtype, np.integer):
        s, l, d = int(start), int(limit), int(delta)
        if d == 0:
            raise ValueError("input 2 (delta) is 0")
        return max(-((s - l) // d), 0)  # ceil((l - s) / d) without rounding
    s, l, d = float(start), float(limit), float(delta)
    if not all(math.isfinite(v) for v in (s, l, d)):
        raise ValueError(f"Range inputs must be finite, got start={s}, limit={l}, delta={d}")
    if d == 0:
        raise ValueError("input 2 (delta) is 0")
    return max(math.ceil((l - s) / d), 0)


def _infer_range(ctx: InferContext) -> TensorType:
    for i in range(3):
        if ctx.input(i).rank != 0:
            raise ctx.error(f"{input_name(ctx, i)} must be a scalar (rank 0), got {ctx.input(i)}")
    if ctx.attrs["stash_type"] not in (1, 11):
        raise ctx.error(f"attribute stash_type={ctx.attrs['stash_type']} must be 1 (float) "
                        "or 11 (double)")
    values = [ctx.const(i) for i in range(3)]
    if any(v is None for v in values):
        return TensorType(ctx.input(0).dtype, (ctx.fresh("range"),))
    return TensorType(ctx.input(0).dtype, (checked(ctx, range_count, *values),))


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *,
           stash_type: int) -> np.ndarray:
    n = range_count(start, limit, delta)
    ensure_allocatable([n], "Range output")
    if np.issubdtype(start.dtype, np.integer):
        # int64 products may wrap, but every element fits in T, so the sum is exact
        values = np.int64(start) + np.arange(n, dtype=np.int64) * np.int64(delta)
    else:
        values = np.float64(start) + np.arange(n, dtype=np.float64) * np.float64(delta)
    return values.astype(start.dtype)


register(OpDef(
    name="Range", inputs=(Input("start", "T"), Input("limit", "T"), Input("delta", "T")),
    outputs=(Output("output", "T"),), type_vars={"T": RANGE_TYPES},
    attrs=(Attr("stash_type", AttrKind.INT, 1),),
    infer=_infer_range, kernel=_range, onnx_since=27,
    doc="start + i*delta for i < max(ceil((limit-start)/delta), 0). The count is exact for "
        "integers and computed in float64 for floats; float elements are computed in "
        "float64 and rounded once to T (16-bit floats via float32, for stash_type 1 and 11 "
        "alike). delta = 0 or a non-finite input is an error. The length is a fresh symbol "
        "unless all three inputs are constants."))
