"""An attribute value an op's kernel refuses is refused when the graph is verified.

For every registered op with attributes: take its conformance sample, make every
input a graph input (so that nothing is known before run time), set one attribute
to an odd value, and build the graph. A graph that verifies must not be refused at
run time for that attribute: the verifier sees every attribute, whatever the inputs.
"""

from __future__ import annotations

import dataclasses

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


def _first_sample(op: OpDef):
    dtypes = op.type_vars[op.inputs[0].type_var] if op.inputs else {DType.FLOAT32}
    dtype = DType.FLOAT32 if DType.FLOAT32 in dtypes else min(dtypes, key=lambda d: d.value)
    for shape_class in ("rank2", "rank4", "rank1"):
        found = sample(op, dtype, shape_class)
        if found is not None:
            return found
    return None


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
