"""The shape of a NIR graph: subgraphs flattened, edges resolved, loops found.

Nested ``NIRGraph`` nodes are flattened: an inner node ``lif`` of subgraph
``block`` becomes ``block.lif``. An edge to a subgraph enters its one
``Input`` node and an edge from it leaves its one ``Output`` node (or names
the inner node, ``block.input``); inner ``Input``/``Output`` nodes pass
their value through. Several edges into one node sum, as NIR specifies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import nir

from polyhal.errors import SerializationError, UnsupportedError, VerificationError
from polyhal.interop.nir.primitives import STATEFUL_PRIMITIVES, check_supported

MAX_DEPTH = 64
"""Levels of nested subgraphs accepted (HDF5 hard links can even form cycles)."""


@dataclass
class FlatGraph:
    """Every non-graph node by its flattened name (in file order), with its sources."""

    nodes: dict[str, nir.NIRNode] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    preds: dict[str, list[str]] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    """Top-level Input nodes: the graph inputs."""
    outputs: list[str] = field(default_factory=list)
    """Top-level Output nodes: the graph outputs."""


def flatten(graph: nir.NIRGraph) -> FlatGraph:
    """``graph`` with its subgraphs inlined and every edge checked."""
    flat = FlatGraph()
    _add_graph(flat, graph, "", 0, set())
    successors = {name for preds in flat.preds.values() for name in preds}
    for name, kind in flat.kinds.items():
        if name in flat.inputs and flat.preds[name]:
            raise VerificationError(f"NIR Input node {name!r} has an incoming edge (from "
                                    f"{flat.preds[name][0]!r})")
        if name in flat.outputs and name in successors:
            raise VerificationError(f"NIR Output node {name!r} has an outgoing edge")
        if name not in flat.inputs and not flat.preds[name]:
            what = "subgraph Input" if kind == "Input" else kind
            raise VerificationError(f"NIR node {name!r} ({what}) receives no edge: nothing "
                                    "feeds it (a graph's data enters through nir.Input nodes)")
    if not flat.inputs:
        raise VerificationError("the NIR graph has no Input node")
    return flat


def _where(prefix: str) -> str:
    return f"subgraph {prefix[:-1]!r}" if prefix else "the top-level NIR graph"


def _add_graph(flat: FlatGraph, graph: nir.NIRGraph, prefix: str, depth: int,
               edges: set[tuple[str, str]]) -> None:
    if depth > MAX_DEPTH:
        raise SerializationError(f"{_where(prefix)}: subgraphs nest deeper than {MAX_DEPTH}")
    nodes = getattr(graph, "nodes", None)
    if not isinstance(nodes, dict) or not all(isinstance(k, str) and k for k in nodes):
        raise SerializationError(f"{_where(prefix)}: nodes must map non-empty names to nodes")
    for key, node in nodes.items():
        name = prefix + key
        if isinstance(node, nir.NIRGraph):
            _add_graph(flat, node, name + ".", depth + 1, edges)
            continue
        kind = type(node).__name__
        check_supported(kind, name)
        if name in flat.nodes:
            raise VerificationError(f"NIR node name {name!r} appears twice once subgraphs are "
                                    "flattened (inner names are joined with '.')")
        flat.nodes[name], flat.kinds[name], flat.preds[name] = node, kind, []
        if not prefix and kind == "Input":
            flat.inputs.append(name)
        elif not prefix and kind == "Output":
            flat.outputs.append(name)
    for edge in _edges(graph, prefix):
        label = f"edge ({edge[0]!r}, {edge[1]!r}) of {_where(prefix)}"
        resolved = (_endpoint(graph, prefix, edge[0], "source", label),
                    _endpoint(graph, prefix, edge[1], "destination", label))
        if resolved in edges:
            raise VerificationError(f"NIR {label} duplicates an edge {resolved[0]!r} -> "
                                    f"{resolved[1]!r}")
        edges.add(resolved)
        flat.preds[resolved[1]].append(resolved[0])


def _edges(graph: nir.NIRGraph, prefix: str) -> list[tuple[str, str]]:
    edges = getattr(graph, "edges", None)
    try:
        pairs = [(a, b) for a, b in edges]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or not all(isinstance(e, str) for pair in pairs for e in pair):
        raise SerializationError(f"{_where(prefix)}: edges must be (source, destination) pairs "
                                 "of node names")
    return pairs


def _endpoint(graph: nir.NIRGraph, prefix: str, name: str, end: str, label: str) -> str:
    node = graph.nodes.get(name)
    if node is None:
        head, dot, rest = name.partition(".")
        inner = graph.nodes.get(head) if dot else None
        if isinstance(inner, nir.NIRGraph):
            return _endpoint(inner, f"{prefix}{head}.", rest, end, label)
        raise VerificationError(f"NIR {label}: its {end} {name!r} is not a node of "
                                f"{_where(prefix)}")
    if not isinstance(node, nir.NIRGraph):
        return prefix + name
    port = nir.Output if end == "source" else nir.Input
    ports = [key for key, inner in node.nodes.items() if isinstance(inner, port)]
    if len(ports) != 1:
        direction = "from" if port is nir.Output else "to"
        raise VerificationError(f"NIR {label}: subgraph {prefix + name!r} has {len(ports)} "
                                f"{port.__name__} nodes; an edge {direction} a subgraph needs "
                                f"exactly one, or must name the node ('{name}.<node>')")
    return _endpoint(node, f"{prefix}{name}.", ports[0], end, label)


def topological_order(flat: FlatGraph) -> list[str]:
    """The nodes in an order where every node follows its sources.

    A cycle through no stateful node (an algebraic loop: each node would need
    its own output of the same step) is a :class:`VerificationError`; a cycle
    through a stateful node (a recurrent network) an :class:`UnsupportedError`.
    """
    algebraic = _cycle(flat, [n for n in flat.nodes if flat.kinds[n] not in STATEFUL_PRIMITIVES])
    if algebraic:
        raise VerificationError(f"the NIR graph has an algebraic loop (a cycle through no "
                                f"stateful node, so no step can be computed): {algebraic}")
    order, left = _kahn(flat, list(flat.nodes))
    if left:
        raise UnsupportedError(f"recurrent NIR graphs are not supported yet: cycle "
                               f"{_cycle(flat, list(flat.nodes))}")
    return order


def _kahn(flat: FlatGraph, members: Iterable[str]) -> tuple[list[str], list[str]]:
    """Kahn's sort restricted to ``members``: (the sorted part, the nodes left on loops)."""
    members = list(members)
    inside = set(members)
    waiting = {n: sum(p in inside for p in flat.preds[n]) for n in members}
    successors: dict[str, list[str]] = {n: [] for n in members}
    for n in members:
        for p in flat.preds[n]:
            if p in inside:
                successors[p].append(n)
    ready = deque(n for n in members if waiting[n] == 0)
    order = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for succ in successors[name]:
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready.append(succ)
    return order, [n for n in members if waiting[n] > 0]


def _cycle(flat: FlatGraph, members: list[str]) -> str | None:
    """One cycle among ``members``, as ``"a -> b -> a"``, or None."""
    _, left = _kahn(flat, members)
    if not left:
        return None
    remaining = set(left)  # each has a source among them: walking back must close a loop
    path: list[str] = []
    seen: dict[str, int] = {}
    name = left[0]
    while name not in seen:
        seen[name] = len(path)
        path.append(name)
        name = next(p for p in flat.preds[name] if p in remaining)
    loop = path[seen[name]:][::-1]
    first = min(range(len(loop)), key=lambda k: members.index(loop[k]))  # start in file order
    loop = loop[first:] + loop[:first]
    return " -> ".join(f"{n!r} ({flat.kinds[n]})" for n in [*loop, loop[0]])
