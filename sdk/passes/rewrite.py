"""Declarative rewrite rules: a source pattern, constraints, and a result pattern.

>>> from polyhal.passes.rewrite import P, R, Rule, V
>>> double_neg = Rule("double-negation", source=P("Neg", P("Neg", V("x"))), result="x")

A source pattern is a tree of :func:`P` nodes (an op, input sub-patterns,
required attribute values) whose leaves are :func:`V` captures (any value, or
only a constant with ``const=True``). A match needs every inner node's outputs
to be used only inside the match. Constraints are predicates on the
:class:`Match`. The result is a capture name, or a tree of :func:`R` nodes
whose inputs are capture names, nested ``R`` nodes or :class:`Computed`
constants, and whose attributes may be functions of the match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.graph import Graph, Node
from polyhal.ir.types import TensorType
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op
from polyhal.passes.rebuild import rebuild


@dataclass(frozen=True)
class Capture:
    """A pattern leaf: any value (or only a constant), bound to ``name``."""

    name: str
    const: bool = False


@dataclass(frozen=True)
class Pattern:
    """A pattern node: ``op`` applied to input patterns, with required attributes."""

    op: str
    inputs: tuple[Pattern | Capture, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None
    domain: str = "core"


def P(op: str, *inputs: Pattern | Capture, name: str | None = None, domain: str = "core",
      **attrs: Any) -> Pattern:
    """A source-pattern node (``name`` captures the matched node itself)."""
    return Pattern(op, tuple(inputs), attrs, name, domain)


def V(name: str, const: bool = False) -> Capture:
    """A capture of any value (``const=True``: only a constant)."""
    return Capture(name, const)


@dataclass(frozen=True)
class Computed:
    """A result input computed from the match as a new constant."""

    fn: Callable[[Match], np.ndarray]


@dataclass(frozen=True)
class Result:
    """A result-pattern node."""

    op: str
    inputs: tuple[Result | str | Computed | None, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    domain: str = "core"
    attrs_of: str | None = None
    """Start from the attributes of this captured node."""


def R(op: str, *inputs: Result | str | Computed | None, domain: str = "core",
      attrs_of: str | None = None, **attrs: Any) -> Result:
    """A result-pattern node; attribute values may be ``fn(match)`` callables, and
    ``attrs_of`` copies the attributes of a captured node first."""
    return Result(op, tuple(inputs), attrs, domain, attrs_of)


@dataclass
class Match:
    """What a source pattern bound: captured value names and nodes."""

    graph: Graph
    root: Node
    values: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    covered: list[Node] = field(default_factory=list)

    def type(self, capture: str) -> TensorType:
        """The type of a captured value."""
        return self.graph.value_type(self.values[capture])

    def const(self, capture: str) -> np.ndarray | None:
        """The value of a captured constant (``None`` when it is not one)."""
        return self.graph.constants.get(self.values[capture])

    def attrs(self, node: str) -> dict[str, Any]:
        """Every attribute of a captured node, defaults filled in."""
        found = self.nodes[node]
        return resolve_attrs(get_op(found.op, found.domain), found.attrs, found.name)


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``source`` -> ``result`` where every constraint holds."""

    name: str
    source: Pattern
    result: Result | str
    constraints: tuple[Callable[[Match], bool], ...] = ()


def _match(pattern: Pattern | Capture, value: str, graph: Graph, match: Match,
           root: bool) -> bool:
    if isinstance(pattern, Capture):
        if pattern.const and value not in graph.constants:
            return False
        bound = match.values.setdefault(pattern.name, value)
        return bound == value
    node = graph.producers.get(value)
    if node is None or node.op != pattern.op or node.domain != pattern.domain:
        return False
    if not root:
        users = graph.consumers.get(value, ())
        outputs = {v.name for v in graph.outputs}
        if len(users) != 1 or value in outputs or len(node.outputs) != 1:
            return False
    given = list(node.inputs)
    while given and given[-1] == "":  # trailing omitted optional inputs
        given.pop()
    if len(given) != len(pattern.inputs) or "" in given:
        return False
    attrs = resolve_attrs(get_op(node.op, node.domain), node.attrs, node.name)
    if any(attrs.get(k) != v for k, v in pattern.attrs.items()):
        return False
    if pattern.name:
        match.nodes[pattern.name] = node
    match.covered.append(node)
    return all(_match(p, i, graph, match, False) for p, i in zip(pattern.inputs, given,
                                                                  strict=True))


def find_match(rule: Rule, graph: Graph, node: Node) -> Match | None:
    """The match of ``rule`` rooted at ``node``, if any."""
    if node.op != rule.source.op or node.domain != rule.source.domain:
        return None
    match = Match(graph, node)
    if not _match(rule.source, node.outputs[0].name, graph, match, True):
        return None
    if not all(check(match) for check in rule.constraints):
        return None
    return match


def _emit(result: Result | str | Computed | None, match: Match, builder: GraphBuilder,
          env: Mapping[str, Var], names: Sequence[str] | None) -> Var | None:
    if result is None:
        return None
    if isinstance(result, str):
        return env[match.values[result]]
    if isinstance(result, Computed):
        return builder.constant(result.fn(match))
    args = [_emit(i, match, builder, env, None) for i in result.inputs]
    attrs = dict(match.nodes[result.attrs_of].attrs) if result.attrs_of else {}
    attrs.update({k: (v(match) if callable(v) else v) for k, v in result.attrs.items()})
    out = builder.op(result.op, *args, domain=result.domain, output_names=names, **attrs)
    return out if isinstance(out, Var) else out[0]


def apply_rules(graph: Graph, rules: Sequence[Rule], max_rounds: int = 16) -> Graph:
    """Apply ``rules`` until none matches (at most ``max_rounds`` passes over the graph),
    then drop what the rewrites left unused."""
    from polyhal.passes.cleanup import eliminate_dead_code

    for _ in range(max_rounds):
        matches: dict[str, tuple[Rule, Match]] = {}
        claimed: set[str] = set()
        for node in reversed(graph.nodes):
            if node.name in claimed:
                continue
            for rule in rules:
                match = find_match(rule, graph, node)
                if match is not None and not claimed & {n.name for n in match.covered}:
                    matches[node.name] = (rule, match)
                    claimed.update(n.name for n in match.covered)
                    break
        if not matches:
            break
        graph = _rewrite(graph, matches, claimed)
    return eliminate_dead_code(graph)


def _rewrite(graph: Graph, matches: dict[str, tuple[Rule, Match]], claimed: set[str]) -> Graph:
    env: dict[str, Var] = {}

    def rewrite(builder: GraphBuilder, node: Node, args: list[Var | None]
                ) -> tuple[Var, ...] | None:
        for name, var in zip(node.inputs, args, strict=True):
            if name and var is not None:
                env[name] = var
        if node.name in matches:
            rule, match = matches[node.name]
            if isinstance(rule.result, str):
                source = env[match.values[rule.result]]
                out = builder.op("Identity", source, output_names=node.output_names)
                return (out,)
            return (_emit(rule.result, match, builder, env, node.output_names),)
        if node.name in claimed:
            return ()  # swallowed by a match rooted further down
        return None

    return rebuild(graph, rewrite)
