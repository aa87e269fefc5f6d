"""Data-movement ops (ONNX semantics): Concat, Split, Slice, Gather, Pad, Tile.

Like the shape ops (:mod:`polyhal.ops.shape`), validation lives in pure helpers
that raise ``ValueError``, shared by inference and the kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import ALL_TYPES
from polyhal.ir.limits import ensure_allocatable
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import REQUIRED, Attr, AttrKind, Input, OpDef, Output, register
from polyhal.ops.shape import (
    INDEX_TYPES,
    INT64,
    check_dims,
    checked,
    fresh_dims,
    input_name,
    ints,
    normalize_axes,
    shape_operand,
    show,
)

# For a symbolic dim, a start/end at least this far out means "from/to the edge".
SENTINEL = 2**31 - 1


def _replace(shape: tuple[D.Dim, ...], axis: int, dim: D.Dim) -> tuple[D.Dim, ...]:
    return (*shape[:axis], dim, *shape[axis + 1:])


# --------------------------------------------------------------------------- Concat

def _infer_concat(ctx: InferContext) -> TensorType:
    types = [ctx.input(i) for i in range(len(ctx.inputs))]
    first = types[0]
    if first.rank == 0:
        raise ctx.error("Concat inputs must have rank >= 1, input 0 is a scalar")
    axis = ctx.axis(ctx.attrs["axis"], first.rank)
    dims = list(first.shape)
    for i, t in enumerate(types[1:], 1):
        if t.rank != first.rank:
            raise ctx.error(f"input {i} has rank {t.rank}, input 0 has rank {first.rank}")
        for k, d in enumerate(t.shape):
            if k == axis:
                dims[k] = D.dim_add(dims[k], d)
            elif not D.dims_equal(dims[k], d):
                if isinstance(dims[k], int) and isinstance(d, int):
                    raise ctx.error(f"input {i} has size {d} in dimension {k} where input 0 "
                                    f"has {dims[k]}; only axis {axis} may differ")
                if isinstance(d, int):  # keep the static size; a symbol is bound at run time
                    dims[k] = d
    return first.with_shape(tuple(dims))


register(OpDef(
    name="Concat", inputs=(Input("inputs", "T", variadic=True),),
    outputs=(Output("concat_result", "T"),), type_vars={"T": ALL_TYPES},
    attrs=(Attr("axis", AttrKind.INT, REQUIRED),),
    infer=_infer_concat, onnx_since=13, differentiable=True,
    kernel=lambda *inputs, axis: np.concatenate(inputs, axis=axis),
    doc="Joins the inputs along axis (negative counts from the back); other dims must match."))


# --------------------------------------------------------------------------- Split

def split_sizes(dim: int, count: int) -> list[int]:
    """``count`` chunks of ``ceil(dim / count)``, the trailing ones cut short (maybe to 0)."""
    chunk = -(-dim // count)
    return [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]


def _infer_split(ctx: InferContext) -> list[TensorType]:
    data = ctx.input(0)
    if data.rank == 0:
        raise ctx.error("input 0 (input) must have rank >= 1, got a scalar")
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    count, num, dim = ctx.num_outputs, ctx.attrs["num_outputs"], data.shape[axis]
    sizes: Sequence[D.Dim]
    if ctx.has_input(1):
        if num is not None:
            raise ctx.error("give input 1 (split) or attribute num_outputs, not both")
        values, length = shape_operand(ctx, 1)
        if length != count:
            raise ctx.error(f"input 1 (split) has {length} entries but the node has "
                            f"{count} outputs")
        if values is None:
            sizes = fresh_dims(ctx, count, "split")
        else:
            checked(ctx, check_dims, values, "input 1 (split)")
            if isinstance(dim, int) and sum(values) != dim:
                raise ctx.error(f"input 1 (split) = {show(values)} sums to {sum(values)}, "
                                f"but axis {axis} has size {dim}")
            sizes = values
    else:
        if num is None:
            raise ctx.error("needs input 1 (split) or attribute num_outputs")
        if num != count:
            raise ctx.error(f"attribute num_outputs={num} but the node has {count} outputs")
        if isinstance(dim, int):
            sizes = split_sizes(dim, count)
        else:
            part = D.dim_div_exact(dim, count)
            sizes = [part] * count if part is not None else fresh_dims(ctx, count, "split")
    return [data.with_shape(_replace(data.shape, axis, s)) for s in sizes]


def _split(data: np.ndarray, split: np.ndarray | None = None, *, num_outputs: int | None,
           axis: int) -> tuple[np.ndarray, ...]:
    axis %= data.ndim
    dim = data.shape[axis]
    if split is None:
        if num_outputs is None or num_outputs < 1:
            raise ValueError("needs input 1 (split) or attribute num_outputs >= 1")
        sizes = split_sizes(dim, num_outputs)
    else:
        sizes = ints(split)
        check_dims(sizes, "input 1 (split)")
        if sum(sizes) != dim:
            raise ValueError(f"input 1 (split) = {show(sizes)} sums to {sum(sizes)}, but axis "
                             f"{axis} has size {dim}")
    bounds = np.cumsum([0, *sizes]).tolist()
    lead = (slice(None),) * axis
    return tuple(data[(*lead, slice(lo, hi))] for lo, hi in pairwise(bounds))


register(OpDef(
    name="Split", inputs=(Input("input", "T"), Input("split", "I", optional=True)),
    outputs=(Output("outputs", "T", variadic=True),), type_vars={"T": ALL_TYPES, "I": INT64},
    attrs=(Attr("num_outputs", AttrKind.INT, None), Attr("axis", AttrKind.INT, 0)),
    infer=_infer_split, kernel=_split, onnx_since=18, differentiable=True,
    doc="Splits along axis into the sizes in split, or into num_outputs chunks of "
        "ceil(size/num_outputs) where the trailing chunks are cut short (possibly to 0, "
        "e.g. 5 into 4 gives 2, 2, 1, 0). Exactly one of split and num_outputs is given."))


# --------------------------------------------------------------------------- Slice

def slice_spec(rank: int, starts: list[int], ends: list[int], axes: list[int] | None,
               steps: list[int] | None) -> list[tuple[int, int, int, int]]:
    """``(axis, start, end, step)`` per sliced axis, validated."""
    n = len(starts)
    if len(ends) != n:
        raise ValueError(f"input 2 (ends) has {len(ends)} entries, input 1 (starts) has {n}")
    if axes is None:
        if n > rank:
            raise ValueError(f"input 1 (starts) has {n} entries for rank {rank}")
        axes = list(range(n))
    elif len(axes) != n:
        raise ValueError(f"input 3 (axes) has {len(axes)} entries, input 1 (starts) has {n}")
    axes = normalize_axes(axes, rank, "input 3 (axes)")
    steps = [1] * n if steps is None else steps
    if len(steps) != n:
        raise ValueError(f"input 4 (steps) has {len(steps)} entries, input 1 (starts) has {n}")
    if 0 in steps:
        raise ValueError(f"input 4 (steps) = {show(steps)} holds a 0")
    return list(zip(axes, starts, ends, steps, strict=True))


def slice_window(dim: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """ONNX's clamped ``(start, end, length)``; ``end == -1`` means "through index 0"."""
    if dim == 0:
        return 0, 0, 0
    start += dim if start < 0 else 0
    end += dim if end < 0 else 0
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, end, len(range(start, end, step))


def _whole_axis(start: int, end: int, step: int) -> bool:
    """True when a slice keeps every element of any axis (in order or reversed)."""
    if step == 1:
        return (start == 0 or start <= -SENTINEL - 1) and end >= SENTINEL
    return step == -1 and (start == -1 or start >= SENTINEL) and end <= -SENTINEL - 1


def _infer_slice(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    operands = {i: shape_operand(ctx, i) if ctx.has_input(i) else (None, None)
                for i in range(1, 5)}
    values = {i: v for i, (v, _) in operands.items()}
    if any(values[i] is None and ctx.has_input(i) for i in range(1, 5)):
        if not ctx.has_input(3):
            n = operands[1][1]
            if n > data.rank:
                raise ctx.error(f"input 1 (starts) has {n} entries for rank {data.rank}")
            axes = list(range(n))
        elif values[3] is None:
            return data.with_shape(fresh_dims(ctx, data.rank, "slice"))
        else:
            axes = checked(ctx, normalize_axes, values[3], data.rank, "input 3 (axes)")
        return data.with_shape(tuple(ctx.fresh(f"slice{i}") if i in axes else d
                                     for i, d in enumerate(data.shape)))
    spec = checked(ctx, slice_spec, data.rank, values[1], values[2], values[3], values[4])
    dims = list(data.shape)
    for axis, start, end, step in spec:
        d = dims[axis]
        if isinstance(d, int):
            dims[axis] = slice_window(d, start, end, step)[2]
        elif not _whole_axis(start, end, step):  # min/max of a symbol: not a polynomial
            dims[axis] = ctx.fresh(f"slice{axis}")
    return data.with_shape(tuple(dims))


def _slice(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray:
    spec = slice_spec(data.ndim, ints(starts), ints(ends), None if axes is None else ints(axes),
                      None if steps is None else ints(steps))
    index = [slice(None)] * data.ndim
    for axis, start, end, step in spec:
        lo, hi, _ = slice_window(data.shape[axis], start, end, step)
        index[axis] = slice(lo, None if hi < 0 else hi, step)
    return data[tuple(index)]


register(OpDef(
    name="Slice",
    inputs=(Input("data", "T"), Input("starts", "I"), Input("ends", "I"),
            Input("axes", "I", optional=True), Input("steps", "I", optional=True)),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "I": INDEX_TYPES},
    infer=_infer_slice, kernel=_slice, onnx_since=13, differentiable=True,
    doc="Strided windows per axis with ONNX's clamping: negative starts/ends count from the "
        "back; for a negative step start clamps to [0, size-1] and end to [-1, size-1] (so, "
        "unlike numpy, a start before the front still takes element 0). A repeated axis or a "
        "0 step is an error. On a symbolic dim only a whole-axis slice (start 0 or <= "
        "-2**31, end >= 2**31-1, step 1, or the reverse with step -1) keeps the symbol; "
        "other lengths get a fresh symbol."))


# --------------------------------------------------------------------------- Gather

def check_indices(indices: np.ndarray, size: int, axis: int) -> None:
    """Indices must lie in ``[-size, size)``."""
    bad = (indices < -size) | (indices >= size)
    if bad.any():
        first = int(indices[bad].reshape(-1)[0])
        raise IndexError(f"index {first} is out of range for axis {axis} of size {size} "
                         f"(allowed: {-size} to {size - 1})")


def _infer_gather(ctx: InferContext) -> TensorType:
    data, indices = ctx.input(0), ctx.input(1)
    if data.rank == 0:
        raise ctx.error("input 0 (data) must have rank >= 1, got a scalar")
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    known = ctx.const(1)
    if known is not None and isinstance(data.shape[axis], int):
        try:
            check_indices(known, data.shape[axis], axis)
        except IndexError as exc:
            raise ctx.error(f"input 1 (indices): {exc}") from None
    return data.with_shape(data.shape[:axis] + indices.shape + data.shape[axis + 1:])


def _gather(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    axis %= data.ndim
    size = data.shape[axis]
    check_indices(indices, size, axis)
    index = indices.astype(np.int64)
    return np.take(data, np.where(index < 0, index + size, index), axis=axis)


register(OpDef(
    name="Gather", inputs=(Input("data", "T"), Input("indices", "I")),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "I": INDEX_TYPES},
    attrs=(Attr("axis", AttrKind.INT, 0),), infer=_infer_gather, kernel=_gather,
    onnx_since=13, differentiable=True,
    doc="Picks entries of data along axis by indices (negative counts from the back); the "
        "output shape is data[:axis] + indices + data[axis+1:]. An index out of range is an "
        "error (at run time, or at graph construction when indices are constant)."))


# --------------------------------------------------------------------------- Pad

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def pad_amounts(rank: int, pads: list[int], axes: list[int] | None) -> list[tuple[int, int]]:
    """``(begin, end)`` for every axis of the input."""
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank, "input 3 (axes)")
    if len(pads) != 2 * len(axes):
        raise ValueError(f"input 1 (pads) has {len(pads)} entries, expected 2 * {len(axes)}")
    amounts = [(0, 0)] * rank
    for i, a in enumerate(axes):
        amounts[a] = (pads[i], pads[i + len(axes)])
    return amounts


def padded_size(size: int, begin: int, end: int, mode: str, axis: int) -> int:
    """The padded length of one axis; negative pads crop first, then the mode pads."""
    kept = size + min(begin, 0) + min(end, 0)
    if kept < 0:
        raise ValueError(f"input 1 (pads): pads {begin}, {end} remove more than the {size} "
                         f"elements of axis {axis}")
    grow = max(begin, 0), max(end, 0)
    if mode != "constant" and kept == 0 and max(grow) > 0:
        raise ValueError(f"{mode} padding of axis {axis} needs a non-empty axis")
    return kept + sum(grow)


def _infer_pad(ctx: InferContext) -> TensorType:
    data, mode = ctx.input(0), ctx.attrs["mode"]
    if mode not in PAD_MODES:
        raise ctx.error(f"attribute mode={mode!r} must be one of {', '.join(PAD_MODES)}")
    if ctx.has_input(2) and ctx.input(2).num_elements not in (None, 1):
        raise ctx.error(f"input 2 (constant_value) must be a scalar, got {ctx.input(2)}")
    pads, length = shape_operand(ctx, 1)
    axes, n_axes = shape_operand(ctx, 3) if ctx.has_input(3) else (None, data.rank)
    if length != 2 * n_axes:
        raise ctx.error(f"input 1 (pads) has {length} entries, expected 2 * {n_axes}")
    if ctx.has_input(3) and axes is None:
        return data.with_shape(fresh_dims(ctx, data.rank, "pad"))
    if pads is None:
        touched = set(range(data.rank)) if axes is None else set(
            checked(ctx, normalize_axes, axes, data.rank, "input 3 (axes)"))
        return data.with_shape(tuple(ctx.fresh(f"pad{i}") if i in touched else d
                                     for i, d in enumerate(data.shape)))
    amounts = checked(ctx, pad_amounts, data.rank, pads, axes)
    dims = [checked(ctx, padded_size, d, b, e, mode, i) if isinstance(d, int)
            else D.dim_add(d, b + e)
            for i, (d, (b, e)) in enumerate(zip(data.shape, amounts, strict=True))]
    return data.with_shape(tuple(dims))


def pad_index(size: int, begin: int, end: int, mode: str) -> np.ndarray:
    """For each output position along an axis, the input position it copies."""
    p = np.arange(-begin, size + end)
    if mode == "edge":
        return np.clip(p, 0, size - 1)
    if mode == "wrap":
        return p % size
    if size == 1:  # reflect: mirror about the first and last element, periodically
        return np.zeros_like(p)
    p = p % (2 * size - 2)
    return np.where(p < size, p, 2 * size - 2 - p)


def _pad(data: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None,
         axes: np.ndarray | None = None, *, mode: str) -> np.ndarray:
    if mode not in PAD_MODES:
        raise ValueError(f"attribute mode={mode!r} must be one of {', '.join(PAD_MODES)}")
    amounts = pad_amounts(data.ndim, ints(pads), None if axes is None else ints(axes))
    shape = [padded_size(d, b, e, mode, i)
             for i, (d, (b, e)) in enumerate(zip(data.shape, amounts, strict=True))]
    ensure_allocatable(shape, "Pad output")
    crop = zip(data.shape, amounts, strict=True)
    x = data[tuple(slice(-min(b, 0), d + min(e, 0)) for d, (b, e) in crop)]
    if mode == "constant":
        if constant_value is not None and constant_value.size != 1:
            raise ValueError(f"input 2 (constant_value) must be a scalar, got shape "
                             f"{list(constant_value.shape)}")
        fill = 0 if constant_value is None else constant_value.reshape(())
        out = np.full(shape, fill, dtype=data.dtype)
        inner = zip(x.shape, amounts, strict=True)
        out[tuple(slice(max(b, 0), max(b, 0) + n) for n, (b, _) in inner)] = x
        return out
    for axis, (b, e) in enumerate(amounts):
        if max(b, 0) or max(e, 0):
            x = np.take(x, pad_index(x.shape[axis], max(b, 0), max(e, 0), mode), axis=axis)
    return np.array(x)


register(OpDef(
    name="Pad",
    inputs=(Input("data", "T"), Input("pads", "P"), Input("constant_value", "T", optional=True),
            Input("axes", "I", optional=True)),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "P": INT64, "I": INDEX_TYPES},
    attrs=(Attr("mode", AttrKind.STRING, "constant"),),
    infer=_infer_pad, kernel=_pad, onnx_since=25, differentiable=True,
    doc="Pads [x1_begin, x2_begin, ..., x1_end, ...] per axis (axes, or all axes). Negative "
        "pads crop first; then constant (constant_value, default 0/False), edge, wrap "
        "or reflect (mirror excluding the edge element) pads the cropped tensor; wrap and "
        "reflect repeat periodically when pads exceed the size, like numpy.pad."))


# --------------------------------------------------------------------------- Tile

def _infer_tile(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    repeats, length = shape_operand(ctx, 1)
    if length != data.rank:
        raise ctx.error(f"{input_name(ctx, 1)} has {length} entries for input rank {data.rank}")
    if repeats is None:
        return data.with_shape(fresh_dims(ctx, data.rank, "tile"))
    checked(ctx, check_dims, repeats, "input 1 (repeats)")
    return data.with_shape(tuple(D.dim_mul(d, r) for d, r in zip(data.shape, repeats, strict=True)))


def _tile(data: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    reps = ints(repeats)
    if len(reps) != data.ndim:
        raise ValueError(f"input 1 (repeats) has {len(reps)} entries for input rank {data.ndim}")
    check_dims(reps, "input 1 (repeats)")
    ensure_allocatable([d * r for d, r in zip(data.shape, reps, strict=True)], "Tile output")
    return np.tile(data, reps) if reps else np.array(data)


register(OpDef(
    name="Tile", inputs=(Input("input", "T"), Input("repeats", "I")),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "I": INT64},
    infer=_infer_tile, kernel=_tile, onnx_since=13, differentiable=True,
    doc="Repeats the input repeats[i] times along each axis i."))
