"""Recipes of the reductions: ReduceSum/Mean/Max/Min/Prod and ArgMax/ArgMin.

The classes walk through the options: omitted, empty and explicit ``axes``
(negative too), ``keepdims`` 0 and 1, ``noop_with_empty_axes``; ArgMax/ArgMin
vary ``axis``, ``keepdims`` and ``select_last_index``. ``empty`` puts the
zero-size dim where it is not reduced. Arg* data has no ties except in
``special`` (where ties and NaN meet ``select_last_index=1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe, values
from polyhal.conformance.recipes.generic import (
    declare,
    distinct,
    has_specials,
    nonzero,
    specials,
)
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef

# shape class -> (data shape, axes (None: omitted), attributes)
_REDUCE_PLAN: dict[str, tuple[tuple[int, ...], list[int] | None, dict[str, Any]]] = {
    "scalar": ((), None, {"noop_with_empty_axes": 1}),
    "rank1": ((5,), [], {"keepdims": 0}),
    "rank2": ((3, 4), [1], {}),
    "rank3": ((2, 3, 4), [0, 2], {"keepdims": 0}),
    "rank4": ((2, 1, 3, 2), None, {"keepdims": 1}),
    "rank5": ((2, 1, 3, 1, 2), [-1, 1], {"keepdims": 0}),
    "empty": ((2, 0, 3), [2], {"keepdims": 1}),
    "symbolic": ((3, 3, 4), [-1], {"keepdims": 0}),
    "special": ((3, 4), [0], {}),
}


def _reducer(data_values: Any = None) -> Any:
    def make(op: OpDef, dtype: DType, shape_class: str,
             rng: np.random.Generator) -> OpSample | None:
        if shape_class not in _REDUCE_PLAN:
            return None
        shape, axes, attrs = _REDUCE_PLAN[shape_class]
        if shape_class == "symbolic":
            shape = (int(rng.integers(2, 5)), *shape[1:])
        if shape_class == "special":
            if not has_specials(dtype):
                return None
            data = specials(dtype, shape, rng)
        elif data_values is not None:
            data = data_values(dtype, shape, rng)
        else:
            data = values(dtype, shape, rng)
        inputs: list[np.ndarray | None] = [data]
        if axes is not None:
            inputs.append(np.asarray(axes, dtype=np.int64).reshape(-1))
        sample = OpSample(inputs, dict(attrs), const_inputs=frozenset({1}))
        if shape_class == "symbolic":
            declare(sample)
        return sample

    return make


recipe("core.ReduceSum", "core.ReduceMean", "core.ReduceMax", "core.ReduceMin")(_reducer())
# Products of up to a dozen factors: magnitudes in [0.5, 1.5] (ints: +-1, +-2).
recipe("core.ReduceProd")(_reducer(nonzero(0.5, 1.5)))


# shape class -> (data shape, attributes)
_ARG_PLAN: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "rank1": ((6,), {"keepdims": 0}),
    "rank2": ((3, 4), {"axis": -1}),
    "rank3": ((2, 3, 4), {"axis": 1, "keepdims": 0, "select_last_index": 1}),
    "rank4": ((2, 1, 3, 2), {"axis": -2, "keepdims": 1}),
    "rank5": ((2, 1, 3, 1, 2), {"axis": 4, "keepdims": 0}),
    "empty": ((2, 0, 3), {"axis": 2}),
    "symbolic": ((3, 5), {"axis": 1, "keepdims": 0}),
    "special": ((3, 4), {"axis": 1, "select_last_index": 1}),
}


@recipe("core.ArgMax", "core.ArgMin")
def arg(op: OpDef, dtype: DType, shape_class: str,
        rng: np.random.Generator) -> OpSample | None:
    """Distinct values (no ties) along varied axes; ``special`` has ties and NaN."""
    if shape_class not in _ARG_PLAN:
        return None
    shape, attrs = _ARG_PLAN[shape_class]
    if shape_class == "symbolic":
        shape = (int(rng.integers(2, 5)), *shape[1:])
    if shape_class == "special":
        data = specials(dtype, shape, rng)
        # a repeated value in every row, so select_last_index matters
        data[:, -1] = data[:, 0]
    else:
        data = distinct(dtype, shape, rng)
    sample = OpSample([data], dict(attrs))
    if shape_class == "symbolic":
        declare(sample)
    return sample
