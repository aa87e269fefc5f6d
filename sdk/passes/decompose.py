"""Decomposition of composite ops into primitives."""

from __future__ import annotations

from collections.abc import Callable

from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.graph import Graph, Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op
from polyhal.passes.rebuild import rebuild


def decompose_node(builder: GraphBuilder, node: Node, args: list[Var | None]
                   ) -> tuple[Var, ...] | None:
    """The primitives standing for ``node``, or ``None`` if it cannot be decomposed.

    A node that asks for optional outputs its decomposition does not give is
    kept whole.
    """
    op = get_op(node.op, node.domain)
    if op.decompose is None:
        return None
    attrs = resolve_attrs(op, node.attrs, f"node {node.name!r}")
    outs = op.decompose(*args, **attrs)
    if outs is None:  # the op has no decomposition for these attributes
        return None
    outs = outs if isinstance(outs, tuple) else (outs,)
    if len(outs) < len(node.outputs):
        return None
    return outs


def decompose(graph: Graph, select: Callable[[Node], bool] = lambda node: True,
              max_rounds: int = 8) -> Graph:
    """``graph`` with every selected composite node replaced by primitives.

    Repeats until no selected composite is left (decompositions may use other
    composites), at most ``max_rounds`` times.
    """
    for _ in range(max_rounds):
        pending = [n for n in graph.nodes if select(n) and get_op(n.op, n.domain).decompose]
        if not pending:
            break
        chosen = {n.name for n in pending}
        done: list[str] = []

        def rewrite(builder: GraphBuilder, node: Node, args: list[Var | None],
                    chosen: set[str] = chosen, done: list[str] = done
                    ) -> tuple[Var, ...] | None:
            outs = decompose_node(builder, node, args) if node.name in chosen else None
            if outs is not None:
                done.append(node.name)
            return outs

        rebuilt = rebuild(graph, rewrite)
        if not done:
            break
        graph = rebuilt
    return graph
