"""A graph that verifies runs: what an op's kernel refuses, the verifier refuses first.

For every registered op, from its conformance samples: (1) each attribute set to odd
values, every input made a graph input (so that nothing is known before run time);
(2) one input's shape changed (a dimension set to 0, 1, 2, 3 or 5, one added or
dropped). A graph that verifies must not be refused at run time for that attribute,
nor fail in its kernel (an error quoting a Python exception such as numpy's).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from polyhal.conformance.cases import op_graph
from polyhal.conformance.recipes import sample
from polyhal.errors import PolyhalError
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import AttrKind, OpDef, all_ops
from polyhal.reference import run

ODD_VALUES = {
    AttrKind.INT: [-2, -1, 2, 7, 2**62, -(2**62)],
    AttrKind.FLOAT: [float("nan"), float("inf"), -1.0, 1e30],
    AttrKind.STRING: ["bogus", ""],
    AttrKind.INTS: [[], [99], [-99], [0, 0]],
}
BUILDER_KEYWORDS = {"num_outputs"}  # GraphBuilder.op's own keyword, also Split's attribute


def _samples(op: OpDef):
    """The op's conformance samples in float32 (or its first dtype), one per shape class."""
    dtypes = op.type_vars[op.inputs[0].type_var] if op.inputs else {DType.FLOAT32}
    dtype = DType.FLOAT32 if DType.FLOAT32 in dtypes else min(dtypes, key=lambda d: d.value)
    for shape_class in ("rank2", "rank4", "rank1", "broadcast", "scalar"):
        found = sample(op, dtype, shape_class)
        if found is not None:
            yield found


def _first_sample(op: OpDef):
    return next(_samples(op), None)


OPS_WITH_ATTRIBUTES = [op for op in all_ops() if op.attrs and _first_sample(op) is not None]


def test_the_check_covers_the_ops_with_attributes():
    assert len(OPS_WITH_ATTRIBUTES) > 50
    assert "core.Reshape" in {op.qualified_name for op in OPS_WITH_ATTRIBUTES}


@pytest.mark.parametrize("op", OPS_WITH_ATTRIBUTES, ids=lambda op: op.qualified_name)
def test_an_attribute_the_kernel_refuses_is_refused_by_the_verifier(op):
    base = _first_sample(op)
    runtime_inputs = dataclasses.replace(base, const_inputs=frozenset())
    refused_late = []
    for attr in op.attrs:
        if attr.name in BUILDER_KEYWORDS:
            continue
        for value in ODD_VALUES.get(attr.kind, []):
            for chosen in (base, runtime_inputs):
                odd = dataclasses.replace(chosen, attrs={**chosen.attrs, attr.name: value})
                try:
                    graph, feeds = op_graph(op, odd)
                except PolyhalError:
                    continue  # refused when the graph was verified: as it should be
                try:
                    run(graph, *feeds)
                except PolyhalError as error:
                    if f"attribute {attr.name}=" in str(error):
                        refused_late.append(f"{attr.name}={value!r}: {error}")
    assert not refused_late, "verified, then refused at run time:\n" + "\n".join(refused_late)


KERNEL_FAILURE = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception): ")
"""How the reference reports a kernel that raised something other than a PolyhalError."""


def _other_shapes(shape: tuple[int, ...]) -> list[list[int]]:
    shapes = [[*shape[:axis], size, *shape[axis + 1:]] for axis in range(len(shape))
              for size in (0, 1, 2, 3, 5) if size != shape[axis]]
    return [*shapes, [*shape, 2], [2, *shape], *([list(shape[1:])] if shape else [])]


def _array(like: np.ndarray, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    if like.dtype.kind == "f":
        return rng.standard_normal(shape).astype(like.dtype)
    if like.dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return np.zeros(shape, like.dtype)  # indices, counts: 0 is valid wherever any is


OPS_WITH_INPUTS = [op for op in all_ops() if op.inputs and _first_sample(op) is not None]


@pytest.mark.parametrize("op", OPS_WITH_INPUTS, ids=lambda op: op.qualified_name)
def test_an_input_shape_the_kernel_refuses_is_refused_by_the_verifier(op):
    rng = np.random.default_rng(0)
    failed = []
    for base in _samples(op):
        for index, array in enumerate(base.inputs):
            if array is None or index in base.const_inputs:
                continue
            for shape in _other_shapes(array.shape):
                if int(np.prod(shape)) > 4096:
                    continue
                inputs = list(base.inputs)
                inputs[index] = _array(array, shape, rng)
                try:
                    graph, feeds = op_graph(op, dataclasses.replace(base, inputs=inputs,
                                                                    input_types={}))
                except PolyhalError:
                    continue  # refused when the graph was verified
                try:
                    run(graph, *feeds)
                except PolyhalError as error:
                    if KERNEL_FAILURE.search(str(error)):
                        failed.append(f"input {index} {shape}: {error}")
    assert not failed, "verified, then failed in the kernel:\n" + "\n".join(failed)
