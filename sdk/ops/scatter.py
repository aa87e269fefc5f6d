"""Element-wise indexing ops (ONNX semantics): GatherElements, ScatterElements,
ScatterND and OneHot.

ScatterElements writes where GatherElements reads, so the one is the other's
gradient; ScatterND writes whole slices addressed by index tuples. Indices may
be negative (counting from the back); one out of range is an error, at run time
or at graph construction when the indices are a constant. As in
:mod:`polyhal.ops.shape`, validation lives in pure helpers that raise
``ValueError`` (``IndexError`` for an index), shared by inference and kernels.

Choices where ONNX is silent:

* Along the axes other than ``axis``, GatherElements/ScatterElements indices
  may be shorter than data (they address its leading part), never longer.
* With ``reduction="none"`` and a repeated index the update that comes last in
  row-major order wins (ONNX leaves the order open). Reductions into bool data
  are or (add), and (mul), max and min; max and min propagate NaN (as polyhal's
  Max and Min do).
* OneHot needs indices of rank >= 1, as ONNX's shape inference does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import ALL_TYPES, DType
from polyhal.ir.limits import ensure_allocatable
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.movement import check_indices
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register
from polyhal.ops.shape import INDEX_TYPES, INT64, checked, show

_REDUCTIONS = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum,
               "min": np.minimum}

_REDUCTION_ATTR = Attr("reduction", AttrKind.STRING, "none",
                       "none (overwrite), add, mul, max or min.")


def reduction_ufunc(reduction: str) -> np.ufunc | None:
    """The ufunc that combines an update with the current value; ``None`` overwrites."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"attribute reduction={reduction!r} must be one of "
                         f"{', '.join(_REDUCTIONS)}")
    return _REDUCTIONS[reduction]


def _wrapped(indices: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``indices`` checked against ``[-size, size)`` and mapped into ``[0, size)``."""
    check_indices(indices, size, axis)
    index = indices.astype(np.int64)
    return np.where(index < 0, index + size, index)


def _check_known(ctx: InferContext, known: np.ndarray | None, size: D.Dim, axis: int) -> None:
    """Bounds-check indices known at graph construction (a constant input 1)."""
    if known is not None and isinstance(size, int):
        try:
            check_indices(known, size, axis)
        except IndexError as exc:
            raise ctx.error(f"input 1 (indices): {exc}") from None


def _apply(out: np.ndarray, index: tuple[np.ndarray, ...] | np.ndarray, updates: np.ndarray,
           reduction: str) -> np.ndarray:
    """Write (or reduce) ``updates`` into ``out`` at ``index``, in place."""
    combine = reduction_ufunc(reduction)
    if combine is None:
        out[index] = updates
    else:
        combine.at(out, index, updates)
    return out


# --------------------------------------------------------------------------- GatherElements

def check_element_shapes(data: Sequence[D.Dim], indices: Sequence[D.Dim], axis: int) -> None:
    """Indices have data's rank and, along the other axes, at most its (static) sizes."""
    if len(indices) != len(data):
        raise ValueError(f"input 1 (indices) has rank {len(indices)}, input 0 (data) has "
                         f"rank {len(data)}; they must match")
    for k, (d, i) in enumerate(zip(data, indices, strict=True)):
        if k != axis and isinstance(d, int) and isinstance(i, int) and i > d:
            raise ValueError(f"input 1 (indices) has size {i} in dimension {k} where input 0 "
                             f"(data) has {d}; only axis {axis} may be longer")


def _infer_gather_elements(ctx: InferContext) -> TensorType:
    data, indices = ctx.input(0), ctx.input(1)
    if data.rank == 0:
        raise ctx.error("input 0 (data) must have rank >= 1, got a scalar")
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    checked(ctx, check_element_shapes, data.shape, indices.shape, axis)
    _check_known(ctx, ctx.const(1), data.shape[axis], axis)
    return data.with_shape(indices.shape)


def _leading(data: np.ndarray, shape: Sequence[int], axis: int) -> np.ndarray:
    """The part of ``data`` that indices of ``shape`` address (all of ``axis``)."""
    return data[tuple(slice(None) if k == axis else slice(n) for k, n in enumerate(shape))]


def _gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    axis %= data.ndim
    check_element_shapes(data.shape, indices.shape, axis)
    index = _wrapped(indices, data.shape[axis], axis)
    return np.take_along_axis(_leading(data, indices.shape, axis), index, axis=axis)


register(OpDef(
    name="GatherElements", inputs=(Input("data", "T"), Input("indices", "Tind")),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "Tind": INDEX_TYPES},
    attrs=(Attr("axis", AttrKind.INT, 0),), infer=_infer_gather_elements,
    kernel=_gather_elements, onnx_since=13, differentiable=True,
    doc="output[i][j][k] = data[indices[i][j][k]][j][k] for axis 0 (likewise for the other "
        "axes): indices has data's rank, the output has indices' shape. Along the other "
        "axes indices may be shorter than data, never longer. Negative indices count from "
        "the back; one out of range is an error."))


# --------------------------------------------------------------------------- ScatterElements

def _check_updates(ctx: InferContext, indices: TensorType, updates: TensorType) -> None:
    same = updates.rank == indices.rank and all(
        not (isinstance(u, int) and isinstance(i, int)) or u == i
        for u, i in zip(updates.shape, indices.shape, strict=True))
    if not same:
        raise ctx.error(f"input 2 (updates) {updates} must have the shape of input 1 "
                        f"(indices) {indices}")


def _infer_scatter_elements(ctx: InferContext) -> TensorType:
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    checked(ctx, reduction_ufunc, ctx.attrs["reduction"])
    if data.rank == 0:
        raise ctx.error("input 0 (data) must have rank >= 1, got a scalar")
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    checked(ctx, check_element_shapes, data.shape, indices.shape, axis)
    _check_updates(ctx, indices, updates)
    _check_known(ctx, ctx.const(1), data.shape[axis], axis)
    return data


def _scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *,
                      axis: int, reduction: str) -> np.ndarray:
    axis %= data.ndim
    check_element_shapes(data.shape, indices.shape, axis)
    if updates.shape != indices.shape:
        raise ValueError(f"input 2 (updates) has shape {list(updates.shape)}, input 1 "
                         f"(indices) {list(indices.shape)}; they must match")
    index = list(np.indices(indices.shape, sparse=True))
    index[axis] = _wrapped(indices, data.shape[axis], axis)
    return _apply(np.array(data, copy=True), tuple(index), updates, reduction)


register(OpDef(
    name="ScatterElements",
    inputs=(Input("data", "T"), Input("indices", "Tind"), Input("updates", "T")),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "Tind": INDEX_TYPES},
    attrs=(Attr("axis", AttrKind.INT, 0), _REDUCTION_ATTR),
    infer=_infer_scatter_elements, kernel=_scatter_elements, onnx_since=18,
    differentiable=True,
    doc="A copy of data where, for axis 0, output[indices[i][j]][j] = updates[i][j] (or "
        "combined with the current value by reduction add, mul, max or min; likewise for "
        "the other axes). indices and updates have one shape, of data's rank, shorter than "
        "data along the other axes if at all. Negative indices count from the back; one out "
        "of range is an error. With reduction none a repeated index keeps the update last "
        "in row-major order; max and min propagate NaN."))


# --------------------------------------------------------------------------- ScatterND

def scatter_nd_depth(data: Sequence[D.Dim], indices: Sequence[D.Dim],
                     updates: Sequence[D.Dim]) -> int | None:
    """``k = indices.shape[-1]`` checked against the shapes (``None`` when symbolic)."""
    if not data:
        raise ValueError("input 0 (data) must have rank >= 1, got a scalar")
    if not indices:
        raise ValueError("input 1 (indices) must have rank >= 1, got a scalar")
    k = indices[-1]
    if not isinstance(k, int):
        return None
    if k > len(data):
        raise ValueError(f"input 1 (indices) holds index tuples of length {k}, more than the "
                         f"rank {len(data)} of input 0 (data)")
    expected = [*indices[:-1], *data[k:]]
    matches = len(updates) == len(expected) and all(
        not (isinstance(u, int) and isinstance(e, int)) or u == e
        for u, e in zip(updates, expected, strict=True))
    if not matches:
        raise ValueError(f"input 2 (updates) has shape {show(updates)}, expected "
                         f"indices.shape[:-1] + data.shape[{k}:] = {show(expected)}")
    return k


def _infer_scatter_nd(ctx: InferContext) -> TensorType:
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    checked(ctx, reduction_ufunc, ctx.attrs["reduction"])
    k = checked(ctx, scatter_nd_depth, data.shape, indices.shape, updates.shape)
    known = ctx.const(1)
    if known is not None and k is not None:
        for axis in range(k):
            _check_known(ctx, known[..., axis], data.shape[axis], axis)
    return data


def _scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *,
                reduction: str) -> np.ndarray:
    k = scatter_nd_depth(data.shape, indices.shape, updates.shape)
    assert k is not None  # concrete shapes
    lead, tail = data.shape[:k], data.shape[k:]
    tuples = indices.reshape(math.prod(indices.shape[:-1]), k)
    # Each index tuple becomes one row of data viewed as [prod(lead), *tail].
    rows = np.zeros(len(tuples), dtype=np.int64)
    for axis, size in enumerate(lead):
        rows = rows * size + _wrapped(tuples[:, axis], size, axis)
    out = np.array(data, copy=True)
    _apply(out.reshape(math.prod(lead), *tail), rows,
           updates.reshape(len(tuples), *tail), reduction)
    return out


register(OpDef(
    name="ScatterND",
    inputs=(Input("data", "T"), Input("indices", "I"), Input("updates", "T")),
    outputs=(Output("output", "T"),), type_vars={"T": ALL_TYPES, "I": INT64},
    attrs=(_REDUCTION_ATTR,), infer=_infer_scatter_nd, kernel=_scatter_nd, onnx_since=18,
    differentiable=True,
    doc="A copy of data where each length-k index tuple in indices (k = indices.shape[-1] "
        "<= rank(data)) addresses an element (k = rank) or a slice data[i1, ..., ik] that "
        "the matching entry of updates (shape indices.shape[:-1] + data.shape[k:]) replaces, "
        "or is combined into by reduction add, mul, max or min. Negative indices count from "
        "the back; one out of range is an error. With reduction none a repeated tuple keeps "
        "the update last in row-major order."))


# --------------------------------------------------------------------------- OneHot

ONE_HOT_INDEX_TYPES = frozenset({DType.UINT8, DType.INT8, DType.INT16, DType.INT32,
                                 DType.INT64, DType.FLOAT16, DType.FLOAT32, DType.FLOAT64})


def one_hot_depth(depth: np.ndarray) -> int:
    """The number of classes: the one element of ``depth``, truncated to an integer >= 1."""
    if depth.size != 1:
        raise ValueError(f"input 1 (depth) must hold exactly one value, got shape "
                         f"{list(depth.shape)}")
    value = depth.reshape(()).item()
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"input 1 (depth) = {value} is not finite")
    count = int(value)
    if count < 1:
        raise ValueError(f"input 1 (depth) = {value} must be at least 1")
    return count


def _infer_one_hot(ctx: InferContext) -> TensorType:
    indices, depth, values = ctx.input(0), ctx.input(1), ctx.input(2)
    if indices.rank == 0:
        raise ctx.error("input 0 (indices) must have rank >= 1, got a scalar")
    if depth.rank > 1 or depth.num_elements not in (None, 1):
        raise ctx.error(f"input 1 (depth) must be a scalar or a one-element 1-D tensor, "
                        f"got {depth}")
    if values.rank != 1 or (isinstance(values.shape[0], int) and values.shape[0] != 2):
        raise ctx.error(f"input 2 (values) must be a 1-D tensor [off_value, on_value], "
                        f"got {values}")
    axis = ctx.axis(ctx.attrs["axis"], indices.rank + 1)
    known = ctx.const(1)
    size = ctx.fresh("depth") if known is None else checked(ctx, one_hot_depth, known)
    return TensorType(values.dtype, (*indices.shape[:axis], size, *indices.shape[axis:]))


def _one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *,
             axis: int) -> np.ndarray:
    count = one_hot_depth(depth)
    if values.shape != (2,):
        raise ValueError(f"input 2 (values) must have shape [2] ([off_value, on_value]), got "
                         f"{list(values.shape)}")
    rank = indices.ndim + 1
    if not -rank <= axis < rank:
        raise ValueError(f"attribute axis={axis} is out of range for output rank {rank}")
    ensure_allocatable([*indices.shape, count], "OneHot output")
    # Non-integer indices are cast to int64 (truncated); NaN and inf are out of range.
    position = np.trunc(indices.astype(np.float64)) if indices.dtype.kind == "f" else (
        indices.astype(np.int64))
    valid = (position >= -count) & (position < count)
    position = np.where(position < 0, position + count, position)
    hot = valid[..., None] & (position[..., None] == np.arange(count))
    return np.ascontiguousarray(np.moveaxis(np.where(hot, values[1], values[0]), -1, axis))


register(OpDef(
    name="OneHot",
    inputs=(Input("indices", "T1"), Input("depth", "T2"), Input("values", "T3")),
    outputs=(Output("output", "T3"),),
    type_vars={"T1": ONE_HOT_INDEX_TYPES, "T2": ONE_HOT_INDEX_TYPES, "T3": ALL_TYPES},
    attrs=(Attr("axis", AttrKind.INT, -1, "Where the new axis goes, in [-r-1, r]."),),
    infer=_infer_one_hot, kernel=_one_hot, onnx_since=28,
    doc="One-hot encoding of indices of rank >= 1: a new axis of size depth (a scalar or "
        "one-element tensor; non-integer values truncate, and it must be at least 1) is "
        "inserted at axis; the output holds values[1] (on) where the position along it "
        "equals the index and values[0] (off) elsewhere, in values' dtype. Indices in "
        "[-depth, depth-1] wrap "
        "(negative count from the back); others, NaN and inf give an all-off row. "
        "Non-integer indices truncate toward zero. The new dim is depth's value when depth "
        "is a constant, else a fresh symbol."))
