"""Op samples with one input's shape changed: shapes the conformance recipes do not make.

Shared by the tests that hold the verifier to the kernels
(tests/ops/test_verifier_covers_kernels.py) and an adapter to the reference on
them (tests/adapters/test_shape_variants.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from polyhal.conformance.cases import op_graph
from polyhal.conformance.recipes import OpSample, sample
from polyhal.errors import PolyhalError
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph
from polyhal.ops.registry import OpDef
from polyhal.reference import run

SHAPE_CLASSES = ("rank2", "rank4", "rank1", "broadcast", "scalar")
MAX_ELEMENTS = 4096


def samples(op: OpDef, dtype: DType | None = None) -> Iterator[OpSample]:
    """The op's conformance samples in ``dtype`` (default: float32, or its first dtype),
    one per shape class it has a sample for; none in a dtype it does not take."""
    dtypes = op.type_vars[op.inputs[0].type_var] if op.inputs else frozenset({DType.FLOAT32})
    if dtype is None:
        dtype = DType.FLOAT32 if DType.FLOAT32 in dtypes else min(dtypes, key=lambda d: d.value)
    if dtype not in dtypes:
        return
    for shape_class in SHAPE_CLASSES:
        found = sample(op, dtype, shape_class)
        if found is not None:
            yield found


def other_shapes(shape: Sequence[int]) -> list[list[int]]:
    """Each dimension set to 0, 1, 2, 3 or 5 in turn, one of 1 or 2 added in front, one
    of 2 at the end, the first dropped."""
    shape = list(shape)
    changed = [[*shape[:axis], size, *shape[axis + 1:]] for axis in range(len(shape))
               for size in (0, 1, 2, 3, 5) if size != shape[axis]]
    return [*changed, [1, *shape], [2, *shape], [*shape, 2], *([shape[1:]] if shape else [])]


def array_like(like: np.ndarray, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Values of ``like``'s dtype in ``shape``: random floats and bools, and zeros for
    integers (indices and counts, where 0 is valid wherever any value is)."""
    if like.dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if like.dtype.kind in "iu":
        return np.zeros(shape, like.dtype)
    return rng.standard_normal(shape).astype(like.dtype)


def shape_variants(base: OpSample, rng: np.random.Generator
                   ) -> Iterator[tuple[int, list[int], OpSample]]:
    """``(input index, its new shape, the changed sample)`` for every run-time input of
    ``base`` and each of its :func:`other_shapes` of at most ``MAX_ELEMENTS`` elements."""
    for index, array in enumerate(base.inputs):
        if array is None or index in base.const_inputs:
            continue
        for shape in other_shapes(array.shape):
            if int(np.prod(shape)) > MAX_ELEMENTS:
                continue
            inputs = list(base.inputs)
            inputs[index] = array_like(array, shape, rng)
            yield index, shape, dataclasses.replace(base, inputs=inputs, input_types={})


@dataclasses.dataclass(frozen=True)
class ReferenceCase:
    """A sample, changed or not, that the reference runs: its graph, inputs and results."""

    op: OpDef
    index: int | None
    """The input whose shape changed (``None``: the sample as the recipe made it)."""
    shape: list[int] | None
    graph: Graph
    feeds: list[np.ndarray]
    expected: list[np.ndarray]

    @property
    def where(self) -> str:
        """The op and the change, for a failure message."""
        return f"{self.op.qualified_name} input {self.index} {self.shape}"


def reference_cases(ops: Iterable[OpDef], dtype: DType | None, rng: np.random.Generator
                    ) -> Iterator[ReferenceCase]:
    """Every sample of ``ops`` in ``dtype`` and its :func:`shape_variants` that the
    reference runs (the others it refuses, which is the verifier's business)."""
    for op in ops:
        for base in samples(op, dtype):
            for index, shape, changed in [(None, None, base), *shape_variants(base, rng)]:
                try:
                    graph, feeds = op_graph(op, changed)
                    expected = list(run(graph, *feeds).values())
                except PolyhalError:
                    continue
                yield ReferenceCase(op, index, shape, graph, feeds, expected)
