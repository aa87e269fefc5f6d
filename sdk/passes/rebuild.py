"""Rebuilding a graph node by node: the skeleton most passes share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.graph import Graph, Node
from polyhal.ir.types import TensorType

NodeRewrite = Callable[[GraphBuilder, Node, list[Var | None]], "tuple[Var, ...] | None"]


def replay(builder: GraphBuilder, node: Node, args: list[Var | None]) -> tuple[Var, ...]:
    """Re-apply ``node`` unchanged (same name, attributes and output names)."""
    outs: Any = builder.op(node.op, *args, domain=node.domain, name=node.name,
                           output_names=node.output_names, **dict(node.attrs))
    return outs if isinstance(outs, tuple) else (outs,)


def rebuild(graph: Graph, rewrite: NodeRewrite,
            input_types: Mapping[str, TensorType] | None = None,
            input_values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """A new graph where each node is replaced by what ``rewrite`` builds.

    ``rewrite(builder, node, args)`` returns the values standing for the
    node's outputs, or ``None`` to keep the node as it is. Value names of
    kept nodes, inputs, constants and outputs are preserved; every type is
    inferred afresh (from ``input_types`` where given). Inputs named in
    ``input_values`` become constants of those values.
    """
    reserved = [n.name for n in graph.nodes] + list(graph.value_types)
    g = GraphBuilder(graph.name, reserved=reserved, doc=graph.doc)
    types, values = input_types or {}, input_values or {}
    env: dict[str, Var] = {v.name: g.constant(values[v.name], name=v.name) if v.name in values
                           else g.input(v.name, types.get(v.name, v.type))
                           for v in graph.inputs}
    for name, array in graph.constants.items():
        env[name] = g.constant(array, name=name)
    for node in graph.nodes:
        args = [env.get(i) if i else None for i in node.inputs]  # None: swallowed by a rewrite
        outs = rewrite(g, node, args)
        if outs is None:
            outs = replay(g, node, args)
        for value, var in zip(node.outputs, outs, strict=False):
            env[value.name] = var
    for value in graph.outputs:
        g.output(env[value.name], name=value.name)
    return g.build()
