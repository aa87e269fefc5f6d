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
from polyhal.conformance.recipes import OpSample
from polyhal.errors import PolyhalError
from polyhal.ops.registry import AttrKind, OpDef, all_ops
from polyhal.reference import run
from tests.op_samples import samples, shape_variants

ODD_VALUES = {
    AttrKind.INT: [-2, -1, 2, 7, 2**62, -(2**62)],
    AttrKind.FLOAT: [float("nan"), float("inf"), -1.0, 1e30],
    AttrKind.STRING: ["bogus", ""],
    AttrKind.INTS: [[], [99], [-99], [0, 0]],
}
BUILDER_KEYWORDS = {"num_outputs"}  # GraphBuilder.op's own keyword, also Split's attribute


def _first_sample(op: OpDef) -> OpSample | None:
    return next(samples(op), None)


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


OPS_WITH_INPUTS = [op for op in all_ops() if op.inputs and _first_sample(op) is not None]


@pytest.mark.parametrize("op", OPS_WITH_INPUTS, ids=lambda op: op.qualified_name)
def test_an_input_shape_the_kernel_refuses_is_refused_by_the_verifier(op):
    rng = np.random.default_rng(0)
    failed = []
    for base in samples(op):
        for index, shape, changed in shape_variants(base, rng):
            try:
                graph, feeds = op_graph(op, changed)
            except PolyhalError:
                continue  # refused when the graph was verified
            try:
                run(graph, *feeds)
            except PolyhalError as error:
                if KERNEL_FAILURE.search(str(error)):
                    failed.append(f"input {index} {shape}: {error}")
    assert not failed, "verified, then failed in the kernel:\n" + "\n".join(failed)
