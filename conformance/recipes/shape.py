"""Recipes of the shape and data-movement ops: Reshape, Transpose, Squeeze,
Unsqueeze, Flatten, Expand, Shape, Identity, Constant, ConstantOfShape, Range,
Concat, Split, Slice, Gather, Pad and Tile.

Shapes, axes, pads, repeats, starts/ends/steps and split sizes are graph
constants, so inference sees them. These ops move data without arithmetic, so
``special`` samples carry NaN, infinities and -0.0 (which must arrive bit-exact)
for every dtype that has special values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe, values
from polyhal.conformance.recipes.generic import (
    ALL_DTYPES,
    FLOATS,
    cycle_dtype,
    declare,
    has_specials,
    shape_for,
    specials,
    variant,
)
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef

I64 = np.int64


def _i64(*items: int) -> np.ndarray:
    return np.asarray(items, dtype=I64).reshape(-1)


def _data(dtype: DType, shape: tuple[int, ...], shape_class: str,
          rng: np.random.Generator) -> np.ndarray | None:
    """Plain values, or specials in ``special`` (``None`` when the dtype has none)."""
    if shape_class == "special":
        return specials(dtype, shape, rng) if has_specials(dtype) else None
    return values(dtype, shape, rng)


def _symbolic_batch(shape: tuple[int, ...], shape_class: str,
                    rng: np.random.Generator) -> tuple[int, ...]:
    """``shape`` with a random leading size in ``symbolic`` (declared as ``batch``)."""
    if shape_class == "symbolic" and shape:
        return (int(rng.integers(2, 5)), *shape[1:])
    return shape


def planned(plans: dict[str, tuple[tuple[int, ...], list[np.ndarray | None], dict[str, Any]]],
            const: frozenset[int] = frozenset({1, 2, 3, 4})) -> Any:
    """A recipe from ``class -> (data shape, the other inputs, attributes)``: the data
    comes first, the other inputs are constants (unless ``const`` says otherwise)."""

    def make(op: OpDef, dtype: DType, shape_class: str,
             rng: np.random.Generator) -> OpSample | None:
        if shape_class not in plans:
            return None
        shape, rest, attrs = plans[shape_class]
        data = _data(dtype, _symbolic_batch(shape, shape_class, rng), shape_class, rng)
        if data is None:
            return None
        inputs = [data, *rest]
        while inputs and inputs[-1] is None:
            inputs.pop()
        sample = OpSample(inputs, dict(attrs),
                          const_inputs=frozenset(i for i in const if i < len(inputs)))
        if shape_class == "symbolic":
            declare(sample)
        return sample

    return make


recipe("core.Reshape")(planned({
    "scalar": ((), [_i64(1, 1)], {}),
    "rank1": ((6,), [_i64(2, -1)], {}),
    "rank2": ((3, 4), [_i64(-1)], {}),
    "rank3": ((2, 3, 4), [_i64(0, -1)], {}),
    "rank4": ((2, 1, 3, 2), [_i64(0, 3, -1, 1)], {}),
    "rank5": ((2, 1, 3, 1, 2), [_i64(3, 4)], {}),
    "empty": ((2, 0, 3), [_i64(3, 0, 2)], {"allowzero": 1}),
    "symbolic": ((3, 3, 4), [_i64(0, -1)], {}),
    "special": ((3, 4), [_i64(2, 6)], {}),
}))

recipe("core.Transpose")(planned({
    "scalar": ((), [], {}),
    "rank1": ((5,), [], {"perm": [0]}),
    "rank2": ((3, 4), [], {}),
    "rank3": ((2, 3, 4), [], {"perm": [1, 0, 2]}),
    "rank4": ((2, 1, 3, 2), [], {"perm": [0, 2, 3, 1]}),
    "rank5": ((2, 1, 3, 1, 2), [], {"perm": [4, 0, 3, 1, 2]}),
    "empty": ((2, 0, 3), [], {"perm": [2, 0, 1]}),
    "symbolic": ((3, 3, 4), [], {"perm": [2, 0, 1]}),
    "special": ((3, 4), [], {}),
}))

recipe("core.Squeeze")(planned({
    "scalar": ((), [], {}),
    "rank1": ((1,), [], {}),
    "rank2": ((3, 1), [_i64(-1)], {}),
    "rank3": ((1, 3, 1), [], {}),
    "rank4": ((2, 1, 3, 1), [_i64(1, -1)], {}),
    "rank5": ((1, 2, 1, 3, 1), [_i64(0, 2)], {}),
    "empty": ((2, 0, 1), [_i64(2)], {}),
    "symbolic": ((3, 1, 3), [_i64(1)], {}),
    "special": ((3, 1, 4), [_i64(1)], {}),
}))

recipe("core.Unsqueeze")(planned({
    "scalar": ((), [_i64(0)], {}),
    "rank1": ((4,), [_i64(0, -1)], {}),
    "rank2": ((3, 4), [_i64(1)], {}),
    "rank3": ((2, 3, 4), [_i64(-1)], {}),
    "rank4": ((2, 1, 3, 2), [_i64(0)], {}),
    "rank5": ((2, 1, 3, 1, 2), [_i64(5)], {}),
    "empty": ((2, 0, 3), [_i64(1)], {}),
    "symbolic": ((3, 3), [_i64(1, 3)], {}),
    "special": ((3, 4), [_i64(2)], {}),
}))

recipe("core.Flatten")(planned({
    "scalar": ((), [], {"axis": 0}),
    "rank1": ((4,), [], {"axis": 1}),
    "rank2": ((3, 4), [], {}),
    "rank3": ((2, 3, 4), [], {"axis": -1}),
    "rank4": ((2, 1, 3, 2), [], {"axis": 0}),
    "rank5": ((2, 1, 3, 1, 2), [], {"axis": 3}),
    "empty": ((2, 0, 3), [], {"axis": 2}),
    "symbolic": ((3, 3, 4), [], {"axis": 1}),
    "special": ((3, 4), [], {"axis": -2}),
}))

recipe("core.Expand")(planned({
    "scalar": ((), [_i64(2, 3)], {}),
    "rank1": ((3,), [_i64(2, 3)], {}),
    "rank2": ((3, 1), [_i64(3, 4)], {}),
    "rank3": ((2, 1, 4), [_i64(1, 3, 1)], {}),
    "rank4": ((2, 1, 3, 1), [_i64(2, 2, 3, 2)], {}),
    "rank5": ((1, 2, 1, 1, 2), [_i64(2, 1, 3, 1, 1)], {}),
    "broadcast": ((3, 1), [_i64(2, 1, 4)], {}),
    "empty": ((2, 1, 3), [_i64(2, 0, 3)], {}),
    "symbolic": ((3, 1), [_i64(1, 3)], {}),
    "special": ((3, 1), [_i64(3, 2)], {}),
}))

recipe("core.Shape")(planned({
    "scalar": ((), [], {}),
    "rank1": ((5,), [], {}),
    "rank2": ((3, 4), [], {"start": 1}),
    "rank3": ((2, 3, 4), [], {"start": -2, "end": -1}),
    "rank4": ((2, 1, 3, 2), [], {"end": 2}),
    "rank5": ((2, 1, 3, 1, 2), [], {"start": -10, "end": 10}),
    "empty": ((2, 0, 3), [], {}),
    "symbolic": ((3, 3, 4), [], {"end": -1}),
    "special": ((3, 4), [], {"start": 3, "end": 1}),
}))

recipe("core.Identity")(planned({
    "scalar": ((), [], {}),
    "rank1": ((5,), [], {}),
    "rank2": ((3, 4), [], {}),
    "rank3": ((2, 3, 4), [], {}),
    "rank4": ((2, 1, 3, 2), [], {}),
    "rank5": ((2, 1, 3, 1, 2), [], {}),
    "empty": ((2, 0, 3), [], {}),
    "symbolic": ((3, 3), [], {}),
    "special": ((3, 4), [], {}),
}))

recipe("core.Tile")(planned({
    "scalar": ((), [_i64()], {}),
    "rank1": ((3,), [_i64(2)], {}),
    "rank2": ((2, 3), [_i64(1, 2)], {}),
    "rank3": ((2, 1, 3), [_i64(2, 3, 1)], {}),
    "rank4": ((1, 2, 1, 2), [_i64(2, 1, 2, 1)], {}),
    "rank5": ((1, 1, 2, 1, 2), [_i64(1, 2, 1, 2, 1)], {}),
    "empty": ((2, 0, 3), [_i64(1, 2, 1)], {}),
    "symbolic": ((3, 3), [_i64(2, 1)], {}),
    "special": ((2, 3), [_i64(2, 1)], {}),
}))


# --------------------------------------------------------------------------- Constant


@recipe("core.Constant")
def constant(op: OpDef, dtype: DType, shape_class: str,
             rng: np.random.Generator) -> OpSample | None:
    """A constant tensor of ``dtype``; float32 and int64 also use the scalar and list
    attributes (value_float(s), value_int(s))."""
    shape = shape_for(shape_class, rng)
    if shape is None or shape_class == "symbolic":
        return None
    tensor = _data(dtype, shape, shape_class, rng)
    if tensor is None:
        return None
    if shape_class in ("scalar", "rank1") and dtype in (DType.FLOAT32, DType.INT64):
        kind = "float" if dtype is DType.FLOAT32 else "int"
        if shape_class == "scalar":
            return OpSample([], {f"value_{kind}": tensor.item()})
        return OpSample([], {f"value_{kind}s": tensor.tolist()})
    return OpSample([], {"value": tensor})


@recipe("core.ConstantOfShape")
def constant_of_shape(op: OpDef, dtype: DType, shape_class: str,
                      rng: np.random.Generator) -> OpSample | None:
    """A constant shape input and a fill whose dtype changes with the class (absent,
    hence float32 0, in rank3); ``special`` fills with NaN, inf or -0.0."""
    shape = shape_for(shape_class, rng)
    if shape is None or shape_class == "symbolic":
        return None
    fill_dtype = cycle_dtype(ALL_DTYPES, shape_class, 5)
    attrs: dict[str, Any] = {}
    if shape_class == "special":
        fill_dtype = cycle_dtype(FLOATS, shape_class)
        attrs["value"] = np.asarray([rng.choice([np.nan, np.inf, -np.inf, -0.0])],
                                    dtype=np.float64).astype(fill_dtype.numpy)
    elif shape_class != "rank3":
        attrs["value"] = values(fill_dtype, (1,), rng)
    return OpSample([np.asarray(shape, dtype=I64).reshape(-1)], attrs,
                    const_inputs=frozenset({0}))


# --------------------------------------------------------------------------- Range


def _range_args(dtype: DType, shape_class: str) -> tuple[float, float, float] | None:
    if dtype.is_int:
        if shape_class == "special":  # near the top of the dtype
            top = int(np.iinfo(dtype.numpy).max)
            return top - 6, top, 2
        return {"scalar": (-3, 7, 2), "rank1": (5, -4, -3), "empty": (4, 1, 1),
                "symbolic": (0, 5, 1)}.get(shape_class)
    return {"scalar": (0.5, 3.25, 0.5), "rank1": (2.0, -1.5, -0.75), "empty": (1.0, 1.0, 0.25),
            "symbolic": (-1.0, 1.5, 0.5)}.get(shape_class)


@recipe("core.Range")
def range_(op: OpDef, dtype: DType, shape_class: str,
           rng: np.random.Generator) -> OpSample | None:
    """Rising, falling and empty ranges whose counts are not rounding accidents;
    constant inputs (length known) or graph inputs (length bound at run time)."""
    args = _range_args(dtype, shape_class)
    if args is None:
        return None
    inputs = [np.asarray(a).astype(dtype.numpy) for a in args]
    runtime = shape_class in ("rank1", "symbolic")
    attrs = {"stash_type": 11} if shape_class == "rank1" else {}
    return OpSample(inputs, attrs,  # type: ignore[arg-type]
                    const_inputs=frozenset() if runtime else frozenset({0, 1, 2}))


# --------------------------------------------------------------------------- Concat, Split


def _concat_plan(shape_class: str) -> tuple[list[tuple[int, ...]], int] | None:
    return {
        "rank1": ([(2,), (3,)], 0),
        "rank2": ([(2, 3), (2, 1), (2, 2)], -1),
        "rank3": ([(2, 3, 4)], 1),
        "rank4": ([(2, 1, 3, 2), (2, 1, 1, 2)], 2),
        "rank5": ([(1, 1, 2, 1, 2), (2, 1, 2, 1, 2)], -5),
        "empty": ([(2, 0, 3), (2, 2, 3)], 1),
        "symbolic": ([(3, 3), (3, 2)], 1),
        "special": ([(2, 4), (1, 4)], 0),
    }.get(shape_class)


@recipe("core.Concat")
def concat(op: OpDef, dtype: DType, shape_class: str,
           rng: np.random.Generator) -> OpSample | None:
    """One to three inputs along varied (negative too) axes; ``empty`` joins a
    zero-size input; ``symbolic`` joins along a static axis."""
    plan = _concat_plan(shape_class)
    if plan is None:
        return None
    shapes, axis = plan
    if shape_class == "symbolic":
        batch = int(rng.integers(2, 5))
        shapes = [(batch, *s[1:]) for s in shapes]
    inputs = [_data(dtype, s, shape_class, rng) for s in shapes]
    if any(x is None for x in inputs):
        return None
    sample = OpSample(inputs, {"axis": axis})  # type: ignore[arg-type]
    if shape_class == "symbolic":
        declare(sample, indices=range(len(inputs)))
    return sample


# class -> (data shape, split sizes or None, num_outputs, axis)
_SPLIT_PLAN: dict[str, tuple[tuple[int, ...], list[int] | None, int, int]] = {
    "rank1": ((6,), None, 3, 0),
    "rank2": ((3, 5), [2, 3], 2, -1),
    "rank3": ((2, 5, 2), None, 3, 1),
    "rank4": ((2, 1, 4, 2), [1, 3], 2, 2),
    "rank5": ((2, 1, 3, 1, 2), None, 2, 0),
    "empty": ((2, 0, 4), [3, 0, 1], 3, 2),
    "symbolic": ((3, 6), None, 2, 1),
    "special": ((4, 3), [1, 3], 2, 0),
}


@recipe("core.Split")
def split(op: OpDef, dtype: DType, shape_class: str,
          rng: np.random.Generator) -> OpSample | None:
    """Constant split sizes (a 0 among them in ``empty``) or num_outputs (uneven:
    5 into 3 is 2, 2, 1), along varied axes."""
    if shape_class not in _SPLIT_PLAN:
        return None
    shape, sizes, count, axis = _SPLIT_PLAN[shape_class]
    data = _data(dtype, _symbolic_batch(shape, shape_class, rng), shape_class, rng)
    if data is None:
        return None
    if sizes is None:
        # the builder sets attribute num_outputs from the node's output count
        sample = OpSample([data], {"axis": axis}, num_outputs=count)
    else:
        sample = OpSample([data, _i64(*sizes)], {"axis": axis}, const_inputs=frozenset({1}),
                          num_outputs=count)
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- Slice, Gather

_BIG = 2**40

# class -> (data shape, starts, ends, axes or None, steps or None, index dtype)
_SLICE_PLAN: dict[str, tuple[tuple[int, ...], list[int], list[int], list[int] | None,
                             list[int] | None, Any]] = {
    "rank1": ((6,), [1], [5], None, None, np.int64),
    "rank2": ((4, 5), [3, -1], [0, -100], [0, 1], [-1, -2], np.int64),
    "rank3": ((2, 3, 4), [0, 1], [1000, 3], [-1, 1], None, np.int32),
    "rank4": ((2, 1, 3, 2), [0], [3], [2], [2], np.int64),
    "rank5": ((2, 1, 3, 1, 2), [1, -5], [3, 9], None, [1, 1], np.int32),
    "empty": ((2, 0, 3), [1], [3], [2], None, np.int64),
    "symbolic": ((3, 5), [1], [4], [1], None, np.int64),
    "special": ((3, 4), [-1, 0], [-_BIG, -1], [1, 0], [-1, 1], np.int64),
}


@recipe("core.Slice")
def slice_(op: OpDef, dtype: DType, shape_class: str,
           rng: np.random.Generator) -> OpSample | None:
    """Constant starts/ends/axes/steps (int32 or int64): negative steps, ends far
    out (clamped), omitted axes with steps given; a symbolic dim is not sliced."""
    if shape_class not in _SLICE_PLAN:
        return None
    shape, starts, ends, axes, steps, index = _SLICE_PLAN[shape_class]
    data = _data(dtype, _symbolic_batch(shape, shape_class, rng), shape_class, rng)
    if data is None:
        return None
    def arr(v: list[int] | None) -> np.ndarray | None:
        return None if v is None else np.asarray(v, dtype=index)

    inputs = [data, arr(starts), arr(ends), arr(axes), arr(steps)]
    while inputs[-1] is None:
        inputs.pop()
    sample = OpSample(inputs, const_inputs=frozenset({1, 2, 3, 4}))
    if shape_class == "symbolic":
        declare(sample)
    return sample


# class -> (data shape, indices, axis, constant indices?)
_GATHER_PLAN: dict[str, tuple[tuple[int, ...], Any, int, bool]] = {
    "scalar": ((5,), -2, 0, False),
    "rank1": ((6,), [0, -1, 3], 0, False),
    "rank2": ((3, 4), [[0, 3], [-4, 1]], 1, False),
    "rank3": ((2, 3, 4), [2, 0], -1, False),
    "rank4": ((2, 1, 3, 2), [1, -3], 2, True),
    "rank5": ((2, 1, 3, 1, 2), 1, 0, False),
    "empty": ((2, 0, 3), [2, 0], 2, False),
    "symbolic": ((3, 4), [3, 1, 1], 1, False),
    "special": ((3, 4), [2, 0, 2], 0, False),
}


@recipe("core.Gather")
def gather(op: OpDef, dtype: DType, shape_class: str,
           rng: np.random.Generator) -> OpSample | None:
    """Indices (int64, or int32 in odd classes) of rank 0 to 2, negative ones too,
    along varied axes; constant indices in rank4."""
    if shape_class not in _GATHER_PLAN:
        return None
    shape, indices, axis, const = _GATHER_PLAN[shape_class]
    data = _data(dtype, _symbolic_batch(shape, shape_class, rng), shape_class, rng)
    if data is None:
        return None
    index_dtype = np.int32 if variant(shape_class, 2) else np.int64
    sample = OpSample([data, np.asarray(indices, dtype=index_dtype)], {"axis": axis},
                      const_inputs=frozenset({1}) if const else frozenset())
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- Pad

# class -> (data shape, pads, axes or None, mode or None, constant value?)
_PAD_PLAN: dict[str, tuple[tuple[int, ...], list[int], list[int] | None, str | None, bool]] = {
    "scalar": ((), [], None, None, True),
    "rank1": ((4,), [1, 2], None, "reflect", False),
    "rank2": ((3, 4), [1, 0, 0, 2], None, "constant", True),
    "rank3": ((2, 3, 4), [0, 1, 1, 0, 0, 2], None, "edge", False),
    "rank4": ((2, 1, 3, 2), [1, -1], [2], "wrap", False),
    "rank5": ((1, 1, 2, 1, 2), [0, 0, 1, 0, 1, 0, 0, 1, 0, 1], None, None, False),
    "empty": ((2, 0, 3), [0, 1, 0, 1, 2, 0], None, "constant", True),
    "symbolic": ((3, 4), [1, 2], [-1], "reflect", False),
    "special": ((3, 4), [1, 1, 1, 1], None, "edge", False),
}


@recipe("core.Pad")
def pad(op: OpDef, dtype: DType, shape_class: str,
        rng: np.random.Generator) -> OpSample | None:
    """Every mode, constant_value given (a graph input in rank2, a constant in
    scalar/empty) or not, axes (int32 in rank4) or not, negative pads (crop)."""
    if shape_class not in _PAD_PLAN:
        return None
    shape, pads, axes, mode, with_value = _PAD_PLAN[shape_class]
    data = _data(dtype, _symbolic_batch(shape, shape_class, rng), shape_class, rng)
    if data is None:
        return None
    fill = values(dtype, (), rng, 1, 5) if with_value else None
    axes_array = None if axes is None else np.asarray(
        axes, dtype=np.int32 if shape_class == "rank4" else np.int64)
    inputs = [data, _i64(*pads), fill, axes_array]
    while inputs[-1] is None:
        inputs.pop()
    const = {1, 3} if shape_class == "rank2" else {1, 2, 3}
    sample = OpSample(inputs, {} if mode is None else {"mode": mode},
                      const_inputs=frozenset(i for i in const if i < len(inputs)))
    if shape_class == "symbolic":
        declare(sample)
    return sample
