"""Elementwise fusion groups, shared by the adapters that generate loops.

A fusion group is a tree of float elementwise nodes of one dtype, joined by
values that have exactly one consumer (so no intermediate is needed
elsewhere), of at most :data:`MAX_GROUP_SIZE` nodes. :func:`find_groups`
finds them and :func:`group_body` writes a group as straight-line Python over
scalars: ``t0 = ...; t1 = ...``, reading its inputs as ``a0, a1, ...``. The
body is dialect-neutral; the backend that compiles it (``cpu``: a
``numba.vectorize`` ufunc; ``gpu``: a numba.cuda kernel) supplies these names:

- ``K``: the compute type, called on every literal (``K(0.5)``);
- ``math``: ``exp``, ``log1p``, ``expm1``, ``tanh``, ``sin``, ``cos``, ``erf``;
- helpers that carry the IEEE edge cases of the reference: ``_relu``,
  ``_max``, ``_min`` (NaN propagates), ``_log`` (``-inf`` at 0, NaN below),
  ``_sqrt`` (NaN below 0), ``_pow``, ``_floor``, ``_ceil`` and ``_erf32`` (a
  float32 erf).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from polyhal.ir.graph import Graph, Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op

UNARY = {
    "Neg": "-{0}", "Abs": "abs({0})", "Exp": "math.exp({0})", "Log": "_log({0})",
    "Sqrt": "_sqrt({0})", "Tanh": "math.tanh({0})",
    "Sigmoid": "K(1.0) / (K(1.0) + math.exp(-{0}))", "Relu": "_relu({0}, K(0.0))",
    "Reciprocal": "K(1.0) / {0}", "Sin": "math.sin({0})", "Cos": "math.cos({0})",
    "Floor": "_floor({0})", "Ceil": "_ceil({0})",
    "Softplus": "(_relu({0}, K(0.0)) + math.log1p(math.exp(-abs({0}))))", "Identity": "{0}",
}
BINARY = {"Add": "({0} + {1})", "Sub": "({0} - {1})", "Mul": "({0} * {1})",
          "Div": "({0} / {1})", "Pow": "_pow({0}, {1})"}
VARIADIC = {"Max": "_max", "Min": "_min"}
WITH_ATTRS = ("Erf", "LeakyRelu", "Elu", "Gelu")
ELEMENTWISE_OPS = frozenset(UNARY) | frozenset(BINARY) | frozenset(VARIADIC) | frozenset(
    WITH_ATTRS)
"""The core ops a fusion group may hold."""


def fusable(node: Node, graph: Graph, dtypes: Sequence[str]) -> bool:
    """True when ``node`` can join a fusion group of one of ``dtypes``."""
    if node.domain != "core" or len(node.outputs) != 1 or node.op not in ELEMENTWISE_OPS:
        return False
    if not node.inputs or any(not i for i in node.inputs):
        return False
    dtype = node.outputs[0].type.dtype.value
    return dtype in dtypes and all(graph.value_type(i).dtype.value == dtype
                                   for i in node.inputs)


def literal(value: float) -> str:
    """``value`` as Python source: ``repr`` of a finite float, else ``math.inf``,
    ``-math.inf`` or ``math.nan`` (``repr`` gives ``inf`` and ``nan``, which are no
    names in the generated code)."""
    number = float(value)
    if math.isnan(number):
        return "math.nan"
    if math.isinf(number):
        return "math.inf" if number > 0 else "-math.inf"
    return repr(number)


def expression(node: Node, args: Sequence[str]) -> str:
    """The expression of one node over argument expressions ``args``."""
    op = get_op(node.op, node.domain)
    attrs = resolve_attrs(op, node.attrs, node.name)
    erf = "_erf32" if node.outputs[0].type.dtype.value != "float64" else "math.erf"
    if node.op == "Erf":
        return f"{erf}({args[0]})"
    if node.op in UNARY:
        return UNARY[node.op].format(*args)
    if node.op in BINARY:
        return BINARY[node.op].format(*args)
    if node.op in VARIADIC:
        result = args[0]
        for arg in args[1:]:
            result = f"{VARIADIC[node.op]}({result}, {arg})"
        return result
    x = args[0]
    if node.op == "LeakyRelu":
        return f"({x} if {x} >= 0 or {x} != {x} else K({literal(attrs['alpha'])}) * {x})"
    if node.op == "Elu":
        return (f"({x} if {x} >= 0 or {x} != {x} else K({literal(attrs['alpha'])}) "
                f"* math.expm1({x}))")
    if attrs["approximate"] == "tanh":
        return (f"(K(0.5) * {x} * (K(1.0) + math.tanh(K(0.7978845608028654) * ({x} "
                f"+ K(0.044715) * {x} * {x} * {x}))))")
    return f"(K(0.5) * {x} * (K(1.0) + {erf}({x} * K(0.7071067811865476))))"


@dataclass
class FusionGroup:
    """Nodes fused into one loop: ``inputs`` are the values it reads, ``output`` the
    value it writes; ``source`` is the backend's generated code."""

    nodes: list[Node]
    output: str
    inputs: list[str] = field(default_factory=list)
    source: str = ""


MAX_GROUP_SIZE = 32
"""Nodes one group takes at most: numba's compile time grows faster than the size
of the generated function (a chain of 200 Add/Relu nodes took 8 s, of 2,000
over three minutes), while fusing more than a few dozen ops saves little."""


def find_groups(graph: Graph, dtypes: Sequence[str], min_size: int = 2,
                alone: frozenset[str] = frozenset(),
                max_size: int = MAX_GROUP_SIZE) -> list[FusionGroup]:
    """Fusion groups of ``dtypes`` with at least ``min_size`` nodes (or one node of
    an op in ``alone``) and at most ``max_size``, each in topological order (its
    last node writes the output); ``inputs`` is filled in by :func:`group_body`."""
    outputs = {v.name for v in graph.outputs}
    members = {node.name: node.name for node in graph.nodes if fusable(node, graph, dtypes)}
    # A node joins its consumer's group when its output has one consumer, also
    # fusable, and the group has room.
    groups: dict[str, list[Node]] = {}  # root -> nodes, last first
    for node in reversed(graph.nodes):
        if node.name not in members:
            continue
        out = node.outputs[0].name
        users = graph.consumers.get(out, ())
        if (out not in outputs and len(users) == 1 and users[0].name in members
                and users[0].outputs[0].type.dtype == node.outputs[0].type.dtype
                and users[0].inputs.count(out) == 1
                and len(groups[members[users[0].name]]) < max_size):
            members[node.name] = members[users[0].name]
        groups.setdefault(members[node.name], []).append(node)
    result = []
    for nodes in groups.values():
        if len(nodes) < min_size and nodes[0].op not in alone:
            continue
        result.append(FusionGroup(nodes[::-1], nodes[0].outputs[0].name))
    return result


def group_body(graph: Graph, group: FusionGroup) -> list[str]:
    """The group's statements ``t<i> = <expression>`` (the last one is its result).

    Fills ``group.inputs``. Scalar constants become literals ``K(<value>)``;
    other inputs are read as ``a<position in group.inputs>``.
    """
    inside = {n.outputs[0].name for n in group.nodes}
    names: dict[str, str] = {}
    lines = []
    group.inputs.clear()
    for index, node in enumerate(group.nodes):
        args = []
        for value in node.inputs:
            if value in inside:
                args.append(names[value])
            elif value in graph.constants and graph.constants[value].size == 1:
                args.append(f"K({literal(graph.constants[value].reshape(-1)[0])})")
            else:
                if value not in group.inputs:
                    group.inputs.append(value)
                args.append(f"a{group.inputs.index(value)}")
        names[node.outputs[0].name] = f"t{index}"
        lines.append(f"t{index} = {expression(node, args)}")
    return lines
