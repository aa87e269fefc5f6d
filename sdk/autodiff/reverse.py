"""Reverse mode as a graph transform: the forward graph, replayed, followed by
the vector-Jacobian products of its nodes in reverse order.

Before differentiating, composites without a rule of their own are decomposed
into primitives (:func:`polyhal.passes.decompose`). Only the nodes on a path
from an input asked about to a seeded output are differentiated. A core op
that is not differentiable (comparisons, ``Floor``, ``Sign``, ``Shape`` ...)
is piecewise constant or integer-valued: it passes no cotangent. An op of
another domain without a rule is an error, as is a differentiable op without
one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from polyhal.autodiff.rules import RULES, VjpContext
from polyhal.errors import IRError, UnsupportedError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import FLOAT_TYPES
from polyhal.ir.graph import Graph, Node
from polyhal.ir.types import TensorType
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op
from polyhal.passes import decompose, replay


def prepare(graph: Graph) -> Graph:
    """``graph`` with every composite that has no rule of its own decomposed."""
    return decompose(graph, select=lambda node: node.qualified_op not in RULES)


def check_differentiable(graph: Graph, names: Sequence[str], what: str) -> None:
    """Every name is a float input (``what`` = "input") or output of ``graph``."""
    values = {v.name: v for v in (graph.inputs if what == "input" else graph.outputs)}
    for name in names:
        if name not in values:
            raise IRError(f"graph {graph.name!r} has no {what} {name!r} (its {what}s: "
                          f"{', '.join(values) or 'none'})")
        dtype = values[name].type.dtype
        if dtype not in FLOAT_TYPES:
            raise IRError(f"{what} {name!r} of graph {graph.name!r} is {dtype.name.lower()}: "
                          "only floating-point values have gradients")


def replay_forward(builder: GraphBuilder, graph: Graph,
                   input_types: Mapping[str, TensorType] | None = None) -> dict[str, Var]:
    """Rebuild ``graph``'s inputs, constants and nodes in ``builder``; returns every
    value by its name."""
    types = input_types or {}
    env: dict[str, Var] = {v.name: builder.input(v.name, types.get(v.name, v.type))
                           for v in graph.inputs}
    for name, array in graph.constants.items():
        env[name] = builder.constant(array, name=name)
    for node in graph.nodes:
        outs = replay(builder, node, [env[i] if i else None for i in node.inputs])
        for value, var in zip(node.outputs, outs, strict=True):
            env[value.name] = var
    return env


def _on_path(graph: Graph, sources: set[str], sinks: set[str]) -> tuple[list[Node], set[str]]:
    """Nodes reached from ``sources`` (through float values) that reach ``sinks``, in
    reverse order, and the values reached."""
    reached = set(sources)
    forward = []
    for node in graph.nodes:
        if any(i in reached for i in node.inputs if i):
            forward.append(node)
            reached.update(v.name for v in node.outputs if v.type.dtype in FLOAT_TYPES)
    needed = set(sinks)
    path = []
    for node in reversed(forward):
        if any(v.name in needed for v in node.outputs):
            path.append(node)
            needed.update(i for i in node.inputs if i in reached)
    return path, reached


def _accumulate(cotangents: dict[str, Var], name: str, value: Var) -> None:
    cotangents[name] = cotangents[name] + value if name in cotangents else value


def _check_cotangent(node: Node, index: int, expected: Var, got: object) -> Var:
    if not isinstance(got, Var) or got.dtype != expected.dtype or (
            all(isinstance(d, int) for d in expected.shape)
            and all(isinstance(d, int) for d in got.shape) and got.shape != expected.shape):
        raise UnsupportedError(
            f"the gradient rule of {node.qualified_op} gave input {index} of node "
            f"{node.name!r} a cotangent {got!r}, expected a value of type {expected.type}")
    return got


def backpropagate(builder: GraphBuilder, graph: Graph, env: Mapping[str, Var],
                  seeds: Mapping[str, Var], wrt: Sequence[str]) -> dict[str, Var | None]:
    """The cotangents of ``wrt`` (input names) given ``seeds`` (cotangents of values),
    built in ``builder`` after :func:`replay_forward` of ``graph`` gave ``env``.

    ``None`` for an input no seeded value depends on.
    """
    cotangents: dict[str, Var] = dict(seeds)
    path, reached = _on_path(graph, set(wrt), set(seeds))
    for node in path:
        out_cts = [cotangents.get(v.name) for v in node.outputs]
        if all(ct is None for ct in out_cts):
            continue
        opdef = get_op(node.op, node.domain)
        rule = RULES.get(node.qualified_op)
        if rule is None:
            if node.domain == "core" and not opdef.differentiable:
                continue  # piecewise constant or integer-valued: derivative zero
            raise UnsupportedError(f"no gradient rule for {node.qualified_op} (node "
                                   f"{node.name!r}): it cannot be differentiated")
        inputs = [env[i] if i else None for i in node.inputs]
        ctx = VjpContext(
            node=node, inputs=inputs, outputs=[env[v.name] for v in node.outputs],
            cotangents=out_cts, attrs=resolve_attrs(opdef, node.attrs, f"node {node.name!r}"),
            wanted=[i in reached for i in node.inputs],
            builder=builder)
        results = list(rule(ctx))  # may leave off trailing Nones, or list omitted inputs
        results += [None] * (len(inputs) - len(results))
        if any(ct is not None for ct in results[len(inputs):]):
            raise UnsupportedError(f"the gradient rule of {node.qualified_op} gave "
                                   f"{len(results)} cotangents for the {len(inputs)} inputs "
                                   f"of node {node.name!r}")
        results = results[:len(inputs)]
        for index, (name, value, ct) in enumerate(zip(node.inputs, inputs, results,
                                                      strict=True)):
            if ct is None or value is None or not ctx.wanted[index]:
                continue
            _accumulate(cotangents, name, _check_cotangent(node, index, value, ct))
    return {name: cotangents.get(name) for name in wrt}
