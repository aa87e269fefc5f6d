"""Specialization of symbolic shapes to a concrete binding."""

from __future__ import annotations

from collections.abc import Mapping

from polyhal.ir import dims as D
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ir.types import TensorType


def _bind(t: TensorType, bindings: Mapping[str, int]) -> TensorType:
    shape = tuple(v if (v := D.evaluate(d, bindings)) is not None else d for d in t.shape)
    return TensorType(t.dtype, shape)


def specialize(graph: Graph, bindings: Mapping[str, int]) -> Graph:
    """``graph`` with every symbol in ``bindings`` replaced by its value.

    Dimensions that depend on data (fresh ``_`` symbols) stay symbolic.
    """
    def value(v: Value) -> Value:
        return Value(v.name, _bind(v.type, bindings))

    nodes = [Node(n.op, n.name, n.inputs, tuple(value(o) for o in n.outputs), n.attrs, n.domain)
             for n in graph.nodes]
    return Graph(graph.name, tuple(value(v) for v in graph.inputs),
                 tuple(value(v) for v in graph.outputs), tuple(nodes), graph.constants, graph.doc)
