"""Helpers every recipe family shares, and the schema-driven generic recipe.

Shapes: :func:`shape_for` gives the concrete data shape of a shape class,
:func:`broadcast_shapes_for` shapes that broadcast, :func:`symbolic` the
declared type of an input whose leading dim is the symbol ``batch``.

Values: :func:`uniform`, :func:`positive`, :func:`nonzero`, :func:`off_half`,
:func:`grid` and :func:`distinct` make well-conditioned data of any dtype;
:func:`special_values` (from :mod:`.base`) mixes in NaN, infinities and extremes.

Every choice comes from the ``rng`` a recipe is given or from the shape class,
so the same ``rng`` state always gives the same sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import SHAPE_CLASSES, OpSample, special_values, values
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.registry import REQUIRED, OpDef

SYMBOL = "batch"
"""The symbolic leading dim of ``symbolic`` samples."""

CLASS_INDEX = {name: index for index, name in enumerate(SHAPE_CLASSES)}
"""Shape class -> its position in :data:`SHAPE_CLASSES` (a stable variant number)."""

RANKS = {"scalar": 0, "rank1": 1, "rank2": 2, "rank3": 3, "rank4": 4, "rank5": 5}
"""The rank of the plain rank classes."""

FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64)
"""The float dtypes in the order recipes cycle through them."""

ALL_DTYPES = tuple(DType)
"""Every dtype, in declaration order (for recipes that pick a secondary dtype)."""

ValueFn = Callable[[DType, tuple[int, ...], np.random.Generator], np.ndarray]
"""Makes an array of a dtype and shape from an rng."""


def dtypes_for(op: OpDef) -> list[DType]:
    """The dtypes a recipe is asked about: the first input's type variable, or for an
    op without inputs (Constant) every dtype its type variables admit; sorted by name."""
    if op.inputs:
        allowed = op.type_vars[op.inputs[0].type_var]
    else:
        allowed = frozenset().union(*op.type_vars.values())
    return sorted(allowed, key=lambda d: d.value)


def variant(shape_class: str, count: int, offset: int = 0) -> int:
    """A stable option number in ``[0, count)`` for ``shape_class``."""
    return (CLASS_INDEX[shape_class] + offset) % count


def pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    """One of ``options``, chosen by ``rng``."""
    return options[int(rng.integers(len(options)))]


def cycle_dtype(options: Sequence[DType], shape_class: str, offset: int = 0) -> DType:
    """A secondary dtype that changes with the shape class."""
    return options[variant(shape_class, len(options), offset)]


# --------------------------------------------------------------------------- shapes


def shape_for(shape_class: str, rng: np.random.Generator) -> tuple[int, ...] | None:
    """The concrete data shape of a one-tensor shape class (``None`` for ``broadcast``).

    ``symbolic`` shapes are concrete too: declare them with :func:`symbolic`.
    """
    if shape_class == "scalar":
        return ()
    if shape_class == "rank1":
        return (int(rng.integers(2, 7)),)
    if shape_class == "rank2":
        return (int(rng.integers(2, 5)), int(rng.integers(2, 6)))
    if shape_class == "rank3":
        return (2, int(rng.integers(2, 4)), int(rng.integers(2, 5)))
    if shape_class == "rank4":
        return (2, int(rng.integers(1, 3)), 3, 2)
    if shape_class == "rank5":
        return (2, 1, int(rng.integers(2, 4)), 1, 2)
    if shape_class == "empty":
        return (2, 0, 3)
    if shape_class == "symbolic":
        return (int(rng.integers(2, 5)), 3)
    if shape_class == "special":
        return (3, 4)
    return None


_BROADCASTS = {
    2: (((3, 1, 4), (2, 4)), ((2, 1), (1, 3)), ((4,), (2, 3, 4)), ((2, 3, 1), (3, 2))),
    3: (((3, 1, 4), (2, 4), (1,)), ((2, 1, 1), (1, 3, 1), (4,)), ((3, 1), (), (2, 1, 4))),
}


def broadcast_shapes_for(count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``count`` different shapes that broadcast together (numpy rules)."""
    if count <= 1:
        return [(3, 1, 4)][:count]
    if count > 3:
        return [*pick(rng, _BROADCASTS[3]), *[(1,)] * (count - 3)]
    return list(pick(rng, _BROADCASTS[count]))


def symbolic(dtype: DType, shape: Sequence[int], count: int = 1) -> TensorType:
    """The declared type of an array of ``shape`` whose first ``count`` dims are symbols
    (``batch``, then ``batch1``, ...)."""
    names = [SYMBOL if i == 0 else f"{SYMBOL}{i}" for i in range(count)]
    return TensorType(dtype, (*names, *shape[count:]))


def declare(sample: OpSample, indices: Sequence[int] = (0,)) -> OpSample:
    """``sample`` with inputs ``indices`` (graph inputs of rank >= 1) declared with a
    symbolic leading dim."""
    for index in indices:
        array = sample.inputs[index]
        if array is None or array.ndim == 0 or index in sample.const_inputs:
            continue
        sample.input_types[index] = symbolic(DType.from_numpy(array.dtype), array.shape)
    return sample


# --------------------------------------------------------------------------- values


def uniform(low: float = -3.0, high: float = 3.0) -> ValueFn:
    """Values in ``[low, high]`` (ints: whole numbers, clipped to the dtype)."""
    def make(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return values(dtype, shape, rng, low, high)
    return make


def moderate(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values in [-3, 3], or [-1, 1] for 16-bit floats (for ops that accumulate)."""
    limit = 1.0 if dtype.is_low_precision else 3.0
    return values(dtype, shape, rng, -limit, limit)


def positive(low: float = 0.1, high: float = 4.0) -> ValueFn:
    """Values in ``[low, high]`` (ints: 1..high)."""
    def make(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if dtype.is_int:
            return values(dtype, shape, rng, 1, max(1, int(high)))
        return values(dtype, shape, rng, low, high)
    return make


def nonzero(low: float = 0.5, high: float = 3.0) -> ValueFn:
    """Magnitudes in ``[low, high]`` with random signs (unsigned: positive; ints >= 1)."""
    def make(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if dtype is DType.BOOL:
            return np.ones(shape, bool)
        if dtype.is_int:
            magnitude = rng.integers(max(1, int(low)), max(1, int(high)) + 1, size=shape)
        else:
            magnitude = rng.uniform(low, high, size=shape)
        sign = rng.choice([-1, 1], size=shape) if dtype is not DType.UINT8 else 1
        return np.asarray(magnitude * sign).astype(dtype.numpy)
    return make


def off_half(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Floats in (-4, 4) whose fraction keeps clear of .5 ties and of whole numbers
    (in every float dtype, bfloat16 included)."""
    whole = rng.integers(-4, 4, size=shape)
    frac = rng.uniform(0.15, 0.35, size=shape) + rng.integers(0, 2, size=shape) * 0.5
    return np.asarray(whole + frac).astype(dtype.numpy)


def grid(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values from four (ints: -2..1, uint8: 0..3; floats: -1, -0.5, 0.5, 1.5), so
    comparisons see equal pairs."""
    if dtype is DType.BOOL:
        return values(dtype, shape, rng)
    if dtype is DType.UINT8:
        return values(dtype, shape, rng, 0, 3)
    if dtype.is_int:
        return values(dtype, shape, rng, -2, 1)
    return rng.choice([-1.0, -0.5, 0.5, 1.5], size=shape).astype(dtype.numpy)


def with_nans(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values in [-3, 3] with about a third NaN (floats)."""
    x = values(dtype, shape, rng)
    if dtype.is_float:
        x[rng.random(shape) < 1 / 3] = np.nan
    return x


def distinct(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Pairwise different values (no ties), exact in ``dtype`` (at most 256 elements)."""
    size = int(np.prod(shape, dtype=np.int64))
    order = rng.permutation(size)
    if dtype is DType.UINT8:
        return order.reshape(shape).astype(dtype.numpy)
    if dtype.is_int:
        return (order - size // 2).reshape(shape).astype(dtype.numpy)
    return ((order - size / 2) * 0.25).reshape(shape).astype(dtype.numpy)


def specials(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values mixed with NaN, +-inf, -0.0 and the dtype's extremes."""
    return special_values(dtype, shape, rng)


def has_specials(dtype: DType) -> bool:
    """True when ``dtype`` has special values (every dtype but bool)."""
    return dtype is not DType.BOOL


# --------------------------------------------------------------------------- generic recipe


def generic(op: OpDef, dtype: DType, shape_class: str,
            rng: np.random.Generator) -> OpSample | None:
    """A recipe read off the schema, for ops without a written one.

    It applies to ops whose required inputs all share the primary type variable
    and that have no required attribute: every input gets the same shape (shapes
    that broadcast in ``broadcast``); variadic ops get two inputs.
    """
    if not op.inputs:
        return None
    primary = op.inputs[0].type_var
    required = [spec for spec in op.inputs if not spec.optional]
    if any(spec.type_var != primary for spec in required):
        return None
    if any(a.default is REQUIRED for a in op.attrs):
        return None
    count = 2 if op.inputs[-1].variadic else len(required)
    if shape_class == "broadcast":
        if count < 2:
            return None
        shapes = broadcast_shapes_for(count, rng)
    else:
        shape = shape_for(shape_class, rng)
        if shape is None:
            return None
        shapes = [shape] * count
    if shape_class == "special":
        if not has_specials(dtype):
            return None
        inputs = [specials(dtype, s, rng) for s in shapes]
    else:
        inputs = [values(dtype, s, rng) for s in shapes]
    sample = OpSample(inputs)
    if shape_class == "symbolic":
        declare(sample, indices=range(count))
    return sample
