"""Recipes of the elementwise ops: unary math and activations, binary arithmetic,
comparisons and logic, Where, Clip, the variadic Sum/Mean/Max/Min, and Cast.

Normal classes keep inputs inside each op's well-conditioned domain (positive
Log/Sqrt arguments, divisors away from 0, Round arguments away from .5 ties,
small integers that cannot overflow); ``special`` mixes in NaN, infinities,
-0.0 and the dtype's extremes, whose results every op's doc defines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe, values
from polyhal.conformance.recipes.generic import (
    ALL_DTYPES,
    ValueFn,
    broadcast_shapes_for,
    declare,
    grid,
    has_specials,
    nonzero,
    off_half,
    positive,
    shape_for,
    specials,
    uniform,
    variant,
    with_nans,
)
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef

AttrFn = Callable[[str, DType, np.random.Generator], dict[str, Any]]

BOOL = DType.BOOL


def _shapes(shape_class: str, count: int, rng: np.random.Generator
            ) -> list[tuple[int, ...]] | None:
    """One shape per input: the class's shape, or broadcasting shapes."""
    if shape_class == "broadcast":
        return broadcast_shapes_for(count, rng) if count > 1 else None
    shape = shape_for(shape_class, rng)
    return None if shape is None else [shape] * count


def elementwise(count: int | Callable[[str], int] = 1,
                domains: Sequence[ValueFn] | ValueFn = values,
                attrs: AttrFn | None = None,
                dtype_of: Callable[[int, DType, str], DType] | None = None,
                special: bool = True) -> Callable[..., Any]:
    """A recipe for an elementwise op of ``count`` inputs (a function of the class for
    variadic ops) whose input ``i`` takes values from ``domains[i]``.

    ``dtype_of(i, primary, shape_class)`` picks an input's dtype (default: primary);
    ``special=False`` skips the ``special`` class (it is skipped for bool anyway).
    """

    def make(op: OpDef, dtype: DType, shape_class: str,
             rng: np.random.Generator) -> OpSample | None:
        n = count(shape_class) if callable(count) else count
        shapes = _shapes(shape_class, n, rng)
        if shapes is None:
            return None
        dtypes = [dtype_of(i, dtype, shape_class) if dtype_of else dtype for i in range(n)]
        if shape_class == "special":
            if not special or not has_specials(dtype):
                return None
            fns = [specials] * n
        else:
            fns = list(domains) if isinstance(domains, Sequence) else [domains] * n
            fns = [fns[min(i, len(fns) - 1)] for i in range(n)]
        inputs = [fn(d, s, rng) for fn, d, s in zip(fns, dtypes, shapes, strict=True)]
        sample = OpSample(inputs, attrs(shape_class, dtype, rng) if attrs else {})
        if shape_class == "symbolic":
            declare(sample, indices=range(n))
        return sample

    return make


# --------------------------------------------------------------------------- unary

recipe("core.Abs", "core.Neg", "core.Sign", "core.Relu", "core.Exp", "core.Tanh",
       "core.Sigmoid", "core.Erf", "core.Sin", "core.Cos")(elementwise())
recipe("core.IsNaN")(elementwise(domains=with_nans))
recipe("core.Log", "core.Sqrt")(elementwise(domains=positive(0.1, 4.0)))
recipe("core.Reciprocal")(elementwise(domains=nonzero(0.25, 4.0)))
recipe("core.Floor", "core.Ceil")(elementwise(domains=off_half))
recipe("core.Softplus")(elementwise(domains=uniform(-6.0, 6.0)))
recipe("core.Not")(elementwise())


def _round_values(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values away from ties, with a few exact halves (ties go to even) mixed in."""
    x = off_half(dtype, shape, rng)
    flat = x.reshape(-1)
    ties = np.array([0.5, -0.5, 1.5, 2.5, -2.5], dtype=np.float64).astype(dtype.numpy)
    count = min(flat.size // 3, len(ties))
    if count:
        flat[rng.choice(flat.size, size=count, replace=False)] = ties[:count]
    return flat.reshape(x.shape)


recipe("core.Round")(elementwise(domains=_round_values))


def _alpha(options: Sequence[float]) -> AttrFn:
    def attrs(shape_class: str, dtype: DType, rng: np.random.Generator) -> dict[str, Any]:
        choice = variant(shape_class, len(options) + 1)
        return {} if choice == len(options) else {"alpha": options[choice]}
    return attrs


recipe("core.LeakyRelu")(elementwise(attrs=_alpha((0.2, 0.01, 1.5))))
recipe("core.Elu")(elementwise(attrs=_alpha((0.5, 2.0))))


def _gelu_attrs(shape_class: str, dtype: DType, rng: np.random.Generator) -> dict[str, Any]:
    return [{}, {"approximate": "tanh"}, {"approximate": "none"}][variant(shape_class, 3)]


recipe("core.Gelu")(elementwise(attrs=_gelu_attrs))


# --------------------------------------------------------------------------- binary

recipe("core.Add", "core.Sub", "core.Mul")(elementwise(2))
recipe("core.Div")(elementwise(2, domains=[uniform(), nonzero(0.5, 3.0)]))
recipe("core.And", "core.Or", "core.Xor")(elementwise(2))
recipe("core.Equal", "core.Less", "core.Greater", "core.LessOrEqual",
       "core.GreaterOrEqual")(elementwise(2, domains=grid))


def _mod_attrs(shape_class: str, dtype: DType, rng: np.random.Generator) -> dict[str, Any]:
    return [{}, {"fmod": 1}, {"fmod": 0}][variant(shape_class, 3)]


def _mod_dividend(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return values(dtype, shape, rng, -7.0, 7.0)


recipe("core.Mod")(elementwise(2, domains=[_mod_dividend, nonzero(1.0, 3.0)],
                               attrs=_mod_attrs))


def _pow_exponent_dtype(index: int, dtype: DType, shape_class: str) -> DType:
    """Pow's exponent has the base's dtype, except int64 for a float base in rank3
    and for an int32 base in rank4 (T1 is independent of T)."""
    if index == 0:
        return dtype
    if shape_class == "rank3" and dtype.is_float:
        return DType.INT64
    if shape_class == "rank4" and dtype is DType.INT32:
        return DType.INT64
    return dtype


def _pow_base(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype.is_int:
        return values(dtype, shape, rng, -3, 3)
    return values(dtype, shape, rng, 0.5, 2.0)


def _pow_exponent(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype.is_int:
        return values(dtype, shape, rng, 0, 4)
    return values(dtype, shape, rng, -2.0, 2.0)


recipe("core.Pow")(elementwise(2, domains=[_pow_base, _pow_exponent],
                               dtype_of=_pow_exponent_dtype))


# --------------------------------------------------------------------------- Where, Clip

# X/Y dtype by class: every dtype once, the common ones in the classes of the ci profile
_WHERE_DTYPES = {"scalar": DType.FLOAT32, "rank1": DType.INT64, "rank2": DType.FLOAT16,
                 "rank3": DType.INT16, "rank4": BOOL, "rank5": DType.INT32,
                 "broadcast": DType.BFLOAT16, "empty": DType.UINT8, "symbolic": DType.INT8,
                 "special": DType.FLOAT64}


def _where_dtype(index: int, dtype: DType, shape_class: str) -> DType:
    """The condition is bool; X and Y take a dtype that changes with the class."""
    return BOOL if index == 0 else _WHERE_DTYPES[shape_class]


_where = elementwise(3, dtype_of=_where_dtype)


@recipe("core.Where")
def where(op: OpDef, dtype: DType, shape_class: str,
          rng: np.random.Generator) -> OpSample | None:
    """condition (bool) with X and Y of a class-dependent dtype; specials in X and Y."""
    if shape_class == "special":  # bool primary: the specials live in X and Y
        shapes = _shapes("special", 3, rng)
        assert shapes is not None
        x_dtype = _where_dtype(1, dtype, shape_class)
        return OpSample([values(BOOL, shapes[0], rng), specials(x_dtype, shapes[1], rng),
                         specials(x_dtype, shapes[2], rng)])
    return _where(op, dtype, shape_class, rng)


def _bounds(dtype: DType, rng: np.random.Generator, crossed: bool = False
            ) -> tuple[np.ndarray, np.ndarray]:
    if dtype.is_int:
        lo, hi = (1, 2) if dtype is DType.UINT8 else (-1, 2)
    else:
        lo, hi = float(rng.uniform(-1.5, -0.5)), float(rng.uniform(0.5, 1.5))
    if crossed:
        lo, hi = hi, lo
    return (np.asarray(lo).astype(dtype.numpy), np.asarray(hi).astype(dtype.numpy))


@recipe("core.Clip")
def clip(op: OpDef, dtype: DType, shape_class: str,
         rng: np.random.Generator) -> OpSample | None:
    """Both bounds, one (min alone; max alone with min omitted), none, or min > max
    (every element becomes max); bounds are rank-0, constants in rank4."""
    shape = shape_for(shape_class, rng)
    if shape is None:
        return None
    if shape_class == "special":
        if not has_specials(dtype):
            return None
        x = specials(dtype, shape, rng)
    else:
        x = values(dtype, shape, rng)
    lo, hi = _bounds(dtype, rng, crossed=shape_class == "rank5")
    inputs: list[np.ndarray | None] = {
        "rank1": [x, lo],
        "rank2": [x, None, hi],
        "rank3": [x],
    }.get(shape_class, [x, lo, hi])
    const = frozenset({1, 2}) if shape_class == "rank4" else frozenset()
    sample = OpSample(inputs, const_inputs=const)
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- variadic

_VARIADIC_COUNT = {"scalar": 1, "rank1": 2, "rank2": 3, "rank3": 1, "rank4": 2, "rank5": 2,
                   "broadcast": 3, "empty": 2, "symbolic": 2, "special": 2}


def _variadic_count(shape_class: str) -> int:
    return _VARIADIC_COUNT[shape_class]


recipe("core.Sum", "core.Mean", "core.Max", "core.Min")(elementwise(_variadic_count))


# --------------------------------------------------------------------------- Cast

@recipe("core.Cast")
def cast(op: OpDef, dtype: DType, shape_class: str,
         rng: np.random.Generator) -> OpSample | None:
    """A target dtype that changes with the class and the source dtype. Normal
    classes stay inside the target's range (non-negative for uint8 targets);
    ``special`` casts NaN, infinities and extremes (saturation, NaN -> 0)."""
    shape = shape_for(shape_class, rng)
    if shape is None:
        return None
    to = ALL_DTYPES[(variant(shape_class, len(ALL_DTYPES)) + 3 * ALL_DTYPES.index(dtype) + 1)
                    % len(ALL_DTYPES)]
    if shape_class == "special":
        if not has_specials(dtype):
            return None
        x = specials(dtype, shape, rng)
    elif to is DType.UINT8:  # in range: no float saturation, no int wrap-around
        x = values(dtype, shape, rng, 0.0, 3.0)
    else:
        x = values(dtype, shape, rng)
    sample = OpSample([x], {"to": to})
    if shape_class == "symbolic":
        declare(sample)
    return sample
