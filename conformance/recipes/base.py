"""What a recipe is: how to make valid inputs for one op.

A recipe answers, for an op, a dtype and a shape class, with an
:class:`OpSample` (inputs, attributes, which inputs are constants, declared
input types) or ``None`` when the shape class does not apply to the op.
Samples are seeded: the same ``rng`` state gives the same sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.registry import OpDef

SHAPE_CLASSES = ("scalar", "rank1", "rank2", "rank3", "rank4", "rank5", "broadcast", "empty",
                 "symbolic", "special")
"""Every shape class a case can have.

- ``scalar``: rank-0 inputs where the op admits them;
- ``rankN``: inputs of rank N (N = 1..5);
- ``broadcast``: inputs of different shapes that broadcast (multidirectional ops);
- ``empty``: a zero-size dimension;
- ``symbolic``: inputs declared with symbolic dims (``batch``), bound at run time;
- ``special``: special values: NaN, +-inf, -0.0, the dtype's extremes.
"""


@dataclass
class OpSample:
    """One concrete use of an op."""

    inputs: list[np.ndarray | None]
    """Positional inputs; ``None`` omits an optional input."""
    attrs: dict[str, Any] = field(default_factory=dict)
    """Attributes (schema defaults fill the rest)."""
    const_inputs: frozenset[int] = frozenset()
    """Inputs baked into the graph as constants (shapes, axes, pads, ...)."""
    input_types: dict[int, TensorType] = field(default_factory=dict)
    """Declared types for graph inputs that differ from the arrays' static types
    (symbolic dims); the arrays must fit them."""
    num_outputs: int | None = None
    """How many outputs the node has (default: the op's required outputs)."""


Recipe = Callable[[OpDef, DType, str, np.random.Generator], "OpSample | None"]

RECIPES: dict[str, Recipe] = {}


def recipe(*qualified_names: str) -> Callable[[Recipe], Recipe]:
    """Register a recipe for ops (``"core.Gather"``)."""
    def decorate(fn: Recipe) -> Recipe:
        for name in qualified_names:
            RECIPES[name] = fn
        return fn
    return decorate


def values(dtype: DType, shape: Sequence[int], rng: np.random.Generator,
           low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Seeded random values of ``dtype`` in ``[low, high]`` (bool: random)."""
    shape = tuple(shape)
    if dtype is DType.BOOL:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        lo, hi = max(int(low), int(info.min)), min(int(high), int(info.max))
        return rng.integers(lo, hi + 1, size=shape).astype(dtype.numpy)
    return rng.uniform(low, high, size=shape).astype(dtype.numpy)


def special_values(dtype: DType, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Random values mixed with the dtype's special values (NaN, +-inf, -0, extremes)."""
    base = values(dtype, shape, rng)
    if dtype is DType.BOOL or base.size == 0:
        return base
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        specials = np.array([info.min, info.max, 0, -1 if info.min < 0 else 1], dtype.numpy)
    else:
        finfo = np.finfo(dtype.numpy)
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, float(finfo.max),
                             float(finfo.tiny)], dtype=np.float64).astype(dtype.numpy)
    flat = base.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, len(specials)), replace=False)
    flat[picks] = specials[: len(picks)]
    return flat.reshape(base.shape)
