"""Recipes of the element-wise indexing ops: GatherElements, ScatterElements,
ScatterND and OneHot.

Indices are seeded, in range and about a third of them negative (int32 in odd
classes where the op takes it, a constant in ``rank4`` so inference checks
them). ScatterElements and ScatterND walk every reduction; with ``none`` the
indices never repeat (ONNX leaves the order of repeated writes open), with a
reduction they may. OneHot's dtype is the indices' (floats carry fractions
that truncate, ``special`` adds NaN/inf or the integer extremes, all out of
range); depth and values change dtype with the class, depth is a scalar or a
one-element tensor, a constant or (``rank2``) a graph input.
"""

from __future__ import annotations

import math

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe, values
from polyhal.conformance.recipes.generic import ALL_DTYPES, cycle_dtype, declare, variant
from polyhal.conformance.recipes.shape import _data
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef
from polyhal.ops.scatter import ONE_HOT_INDEX_TYPES


def _negate_some(index: np.ndarray, sizes: np.ndarray | int,
                 rng: np.random.Generator) -> np.ndarray:
    """``index`` (in ``[0, size)``) with about a third moved to ``[-size, 0)``."""
    return np.where(rng.random(index.shape) < 1 / 3, index - sizes, index)


def axis_indices(shape: tuple[int, ...], size: int, axis: int, unique: bool,
                 rng: np.random.Generator) -> np.ndarray:
    """int64 indices of ``shape`` into an axis of ``size``; with ``unique`` no index
    repeats along ``axis`` (``shape[axis] <= size``)."""
    axis %= len(shape)
    if unique:
        keys = rng.random((*shape[:axis], size, *shape[axis + 1:]))
        order = np.argsort(keys, axis=axis)  # a random permutation along every line
        index = np.take(order, np.arange(shape[axis]), axis=axis)
    else:
        index = rng.integers(0, size, size=shape) if size else np.zeros(shape, np.int64)
    return _negate_some(index.astype(np.int64), size, rng)


# --------------------------------------------------------------------------- *Elements

# class -> (data shape, indices shape, axis); indices' first dim follows data's in symbolic
_ELEMENT_PLAN: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {
    "rank1": ((6,), (8,), 0),
    "rank2": ((3, 4), (2, 4), 0),
    "rank3": ((2, 3, 4), (2, 2, 3), -1),
    "rank4": ((2, 1, 3, 2), (1, 1, 3, 2), 2),
    "rank5": ((2, 1, 3, 1, 2), (2, 1, 2, 1, 2), -5),
    "empty": ((2, 0, 3), (2, 0, 2), 2),
    "symbolic": ((3, 4), (3, 2), 1),
    "special": ((3, 4), (3, 3), 1),
}

_SCATTER_REDUCTION = {"rank1": "add", "rank2": "none", "rank3": "mul", "rank4": "max",
                      "rank5": "min", "empty": "add", "symbolic": "none", "special": "max"}


def _element_sample(dtype: DType, shape_class: str, rng: np.random.Generator,
                    scatter: bool) -> OpSample | None:
    if shape_class not in _ELEMENT_PLAN:
        return None
    shape, index_shape, axis = _ELEMENT_PLAN[shape_class]
    if shape_class == "symbolic":
        batch = int(rng.integers(2, 5))
        shape, index_shape = (batch, *shape[1:]), (batch, *index_shape[1:])
    data = _data(dtype, shape, shape_class, rng)
    if data is None:
        return None
    reduction = _SCATTER_REDUCTION[shape_class] if scatter else "add"
    index = axis_indices(index_shape, shape[axis], axis, reduction == "none", rng)
    index = index.astype(np.int32 if variant(shape_class, 2) else np.int64)
    inputs: list[np.ndarray | None] = [data, index]
    attrs: dict[str, object] = {"axis": axis}
    if scatter:
        updates = _data(dtype, index_shape, shape_class, rng)
        inputs.append(updates)
        if reduction != "none":
            attrs["reduction"] = reduction
    sample = OpSample(inputs, attrs,
                      const_inputs=frozenset({1}) if shape_class == "rank4" else frozenset())
    if shape_class == "symbolic":
        declare(sample, indices=range(len(inputs)))
    return sample


@recipe("core.GatherElements")
def gather_elements(op: OpDef, dtype: DType, shape_class: str,
                    rng: np.random.Generator) -> OpSample | None:
    """Ranks 1 to 5 along varied (negative too) axes; indices longer than data along
    the axis (rank1), shorter along the others (rank2, rank3)."""
    return _element_sample(dtype, shape_class, rng, scatter=False)


@recipe("core.ScatterElements")
def scatter_elements(op: OpDef, dtype: DType, shape_class: str,
                     rng: np.random.Generator) -> OpSample | None:
    """Every reduction (none without repeated indices, add with them), updates
    shorter than data along the other axes; ``special`` takes max over NaN/inf."""
    return _element_sample(dtype, shape_class, rng, scatter=True)


# --------------------------------------------------------------------------- ScatterND

# class -> (data shape, number of index tuples, tuple length k)
_ND_PLAN: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {
    "rank1": ((6,), (3,), 1),
    "rank2": ((3, 4), (2,), 1),
    "rank3": ((2, 3, 4), (2, 2), 2),
    "rank4": ((2, 1, 3, 2), (3,), 4),
    "rank5": ((2, 1, 3, 1, 2), (2,), 3),
    "empty": ((2, 0, 3), (2,), 1),
    "symbolic": ((3, 3), (2,), 1),
    "special": ((3, 4), (2, 1), 2),
}

_ND_REDUCTION = {"rank1": "none", "rank2": "add", "rank3": "mul", "rank4": "max",
                 "rank5": "min", "empty": "none", "symbolic": "add", "special": "none"}


@recipe("core.ScatterND")
def scatter_nd(op: OpDef, dtype: DType, shape_class: str,
               rng: np.random.Generator) -> OpSample | None:
    """Index tuples addressing elements (k = rank) or slices (k < rank), in batches of
    rank 1 and 2; every reduction, repeated tuples only with one."""
    if shape_class not in _ND_PLAN:
        return None
    shape, batch_shape, k = _ND_PLAN[shape_class]
    if shape_class == "symbolic":
        shape = (int(rng.integers(2, 5)), *shape[1:])
    data = _data(dtype, shape, shape_class, rng)
    if data is None:
        return None
    reduction = _ND_REDUCTION[shape_class]
    lead = shape[:k]
    count = math.prod(batch_shape)
    flat = rng.choice(math.prod(lead), size=count, replace=reduction != "none")
    tuples = np.stack(np.unravel_index(flat, lead), axis=-1).astype(np.int64)
    tuples = _negate_some(tuples, np.asarray(lead, np.int64), rng).reshape(*batch_shape, k)
    updates = _data(dtype, (*batch_shape, *shape[k:]), shape_class, rng)
    sample = OpSample([data, tuples, updates],
                      {} if reduction == "none" else {"reduction": reduction},
                      const_inputs=frozenset({1}) if shape_class == "rank4" else frozenset())
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- OneHot

# class -> (indices shape, depth, axis, depth a constant?, depth a one-element 1-D tensor?)
_ONE_HOT_PLAN: dict[str, tuple[tuple[int, ...], int, int, bool, bool]] = {
    "rank1": ((5,), 3, 0, True, True),
    "rank2": ((2, 3), 4, 1, False, False),
    "rank3": ((2, 3, 2), 5, -4, True, False),
    "rank4": ((2, 1, 3, 2), 3, 2, True, True),
    "rank5": ((1, 2, 1, 2, 2), 2, 5, True, False),
    "empty": ((2, 0), 3, 0, True, False),
    "symbolic": ((3, 2), 4, -1, True, False),
    "special": ((3, 4), 4, 1, True, False),
}

_ONE_HOT_TYPES = sorted(ONE_HOT_INDEX_TYPES, key=lambda d: d.value)


def _one_hot_indices(dtype: DType, shape: tuple[int, ...], depth: int, special: bool,
                     rng: np.random.Generator) -> np.ndarray:
    """Indices in ``[-depth, depth)`` (unsigned: ``[0, depth)``), a fifth out of range;
    floats with a fraction; ``special`` mixes in NaN/inf or the integer extremes."""
    low = 0 if dtype is DType.UINT8 else -depth
    index = rng.integers(low, depth, size=shape)
    outside = rng.choice([depth, depth + 1 if low == 0 else -depth - 1], size=shape)
    index = np.where(rng.random(shape) < 0.2, outside, index)
    if dtype.is_float:  # truncation toward zero keeps the integer part
        index = index + np.sign(index) * rng.uniform(0.0, 0.75, size=shape)
    index = index.astype(dtype.numpy)
    if special and index.size:
        extremes = ([np.nan, np.inf, -np.inf] if dtype.is_float
                    else [np.iinfo(dtype.numpy).min, np.iinfo(dtype.numpy).max])
        flat = index.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, len(extremes)), replace=False)
        flat[picks] = np.asarray(extremes[: len(picks)], dtype=dtype.numpy)
    return index


@recipe("core.OneHot")
def one_hot(op: OpDef, dtype: DType, shape_class: str,
            rng: np.random.Generator) -> OpSample | None:
    """Indices of rank 1 to 5 (their dtype is the case's), the new axis anywhere in
    [-r-1, r]; depth of every index dtype, values of every dtype."""
    if shape_class not in _ONE_HOT_PLAN:
        return None
    shape, depth, axis, const, one_element = _ONE_HOT_PLAN[shape_class]
    if shape_class == "symbolic":
        shape = (int(rng.integers(2, 5)), *shape[1:])
    indices = _one_hot_indices(dtype, shape, depth, shape_class == "special", rng)
    depth_dtype = cycle_dtype(_ONE_HOT_TYPES, shape_class)
    depth_array = np.asarray([depth] if one_element else depth).astype(depth_dtype.numpy)
    value_dtype = cycle_dtype(ALL_DTYPES, shape_class, 3)
    if value_dtype is DType.BOOL:
        pair = np.array([False, True])
    else:  # off 0, on 1..3
        pair = values(value_dtype, (2,), rng, 1, 3)
        pair[0] = 0
    sample = OpSample([indices, depth_array, pair], {"axis": axis},
                      const_inputs=frozenset({1}) if const else frozenset())
    if shape_class == "symbolic":
        declare(sample)
    return sample
