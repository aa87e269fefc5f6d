"""Recipes: valid inputs for every op, by dtype and shape class.

Importing this package registers a recipe for every core and snn op (one module per op
family). :func:`recipe_for` finds an op's recipe; :func:`sample` runs it::

    from polyhal.conformance.recipes import sample
    s = sample("core.Conv", DType.FLOAT32, "rank4", seed=0)
"""

from __future__ import annotations

import numpy as np

from polyhal.conformance.recipes import (  # noqa: F401  (importing registers the recipes)
    elementwise,
    linalg,
    nn,
    quant,
    quantum,
    reduce,
    scatter,
    shape,
    snn,
)
from polyhal.conformance.recipes.base import (
    RECIPES,
    SHAPE_CLASSES,
    OpSample,
    Recipe,
    recipe,
    special_values,
    values,
)
from polyhal.conformance.recipes.generic import dtypes_for, generic
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef, get_op

__all__ = ["RECIPES", "SHAPE_CLASSES", "OpSample", "Recipe", "dtypes_for", "generic", "recipe",
           "recipe_for", "sample", "special_values", "values"]


def recipe_for(op: OpDef) -> Recipe:
    """The recipe registered for ``op``, else the schema-driven :func:`generic` one
    (which answers ``None`` for ops it cannot read off the schema)."""
    return RECIPES.get(op.qualified_name, generic)


def _resolve(op: OpDef | str) -> OpDef:
    if isinstance(op, OpDef):
        return op
    domain, _, name = op.rpartition(".")
    return get_op(name, domain or "core")


def sample(op: OpDef | str, dtype: DType | str, shape_class: str,
           seed: int = 0) -> OpSample | None:
    """``op``'s sample for ``dtype`` and ``shape_class`` from ``default_rng(seed)``;
    ``op`` may be an :class:`OpDef` or a name (``"core.Gemm"``, ``"Gemm"``)."""
    if shape_class not in SHAPE_CLASSES:
        raise ValueError(f"unknown shape class {shape_class!r} (known: "
                         f"{', '.join(SHAPE_CLASSES)})")
    opdef = _resolve(op)
    return recipe_for(opdef)(opdef, DType.parse(dtype), shape_class,
                             np.random.default_rng(seed))
