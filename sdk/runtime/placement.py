"""Placement: which device runs each node, and the partitions that follow.

Each node goes to the first listed device whose capabilities cover it.
Composite ops the first device lacks are decomposed first when it covers
their primitives. Contiguous runs of nodes on one device form a partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from polyhal.errors import UnsupportedError
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.builder import GraphBuilder
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ops.registry import get_op
from polyhal.passes.decompose import decompose, decompose_node


def node_reason(caps: Capabilities, graph: Graph, node: Node) -> str | None:
    """Why ``caps`` does not cover ``node`` of ``graph`` (``None`` when it does)."""
    inputs = [graph.value_type(i) if i else None for i in node.inputs]
    outputs = [graph.value_type(o.name) for o in node.outputs]
    return caps.uncovered_reason(node, inputs, outputs)


def covers(caps: Capabilities, graph: Graph) -> bool:
    """True when ``caps`` covers every node of ``graph``."""
    return all(node_reason(caps, graph, n) is None for n in graph.nodes)


def _decomposition_covered(caps: Capabilities, graph: Graph, node: Node) -> bool:
    g = GraphBuilder("probe")
    args = [g.input(f"in{i}", graph.value_type(name)) if name else None
            for i, name in enumerate(node.inputs)]
    outs = decompose_node(g, node, args)
    if outs is None:
        return False
    g.output(*outs)
    probe = decompose(g.build())
    return all(node_reason(caps, probe, n) is None for n in probe.nodes)


def decompose_for(graph: Graph, caps: Capabilities) -> Graph:
    """Decompose the composites ``caps`` lacks but whose primitives it covers."""
    def wanted(node: Node) -> bool:
        return (get_op(node.op, node.domain).decompose is not None
                and node_reason(caps, graph, node) is not None
                and _decomposition_covered(caps, graph, node))

    return decompose(graph, wanted, max_rounds=1)


@dataclass(frozen=True)
class Partition:
    """Contiguous nodes placed on one device, as a graph of their own."""

    device: str
    graph: Graph
    fallback: bool


@dataclass
class Placement:
    """Where each node runs, and why it did not run on the first device."""

    devices: list[str]
    assignment: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    partitions: list[Partition] = field(default_factory=list)

    @property
    def fallback_count(self) -> int:
        """Nodes that run on a device other than the first."""
        return sum(1 for d in self.assignment.values() if d != self.devices[0])

    def nodes_on(self, device: str) -> list[str]:
        """Names of the nodes placed on ``device``."""
        return [n for n, d in self.assignment.items() if d == device]

    def __str__(self) -> str:
        lines = [f"placement over {', '.join(self.devices)}: {len(self.assignment)} nodes, "
                 f"{len(self.partitions)} partitions, {self.fallback_count} fallbacks"]
        for node, device in self.assignment.items():
            why = f"  ({self.reasons[node]})" if node in self.reasons else ""
            lines.append(f"  {node} -> {device}{why}")
        return "\n".join(lines)


def place(graph: Graph, devices: Sequence[str], caps: Sequence[Capabilities],
          unusable: Mapping[str, str] | None = None) -> Placement:
    """Assign every node to the first device that covers it; a device in ``unusable``
    covers none, for the reason given there (the precision it lacks, say).

    Raises :class:`UnsupportedError` listing every node no device covers.
    """
    placement = Placement(list(devices))
    unusable = unusable or {}
    uncovered = []
    for node in graph.nodes:
        reasons = []
        for device, cap in zip(devices, caps, strict=True):
            reason = unusable.get(device) or node_reason(cap, graph, node)
            if reason is None:
                placement.assignment[node.name] = device
                break
            reasons.append(f"{device}: {reason}")
        else:
            uncovered.append(f"{node.name} ({node.qualified_op}): {'; '.join(reasons)}")
            continue
        if reasons:
            placement.reasons[node.name] = reasons[0]
    if uncovered:
        raise UnsupportedError(f"graph {graph.name!r}: no device covers {len(uncovered)} "
                               f"node(s):\n  " + "\n  ".join(uncovered))
    placement.partitions = partition(graph, placement)
    return placement


def partition(graph: Graph, placement: Placement) -> list[Partition]:
    """Split ``graph`` into contiguous single-device subgraphs."""
    groups: list[tuple[str, list[Node]]] = []
    for node in graph.nodes:
        device = placement.assignment[node.name]
        if groups and groups[-1][0] == device:
            groups[-1][1].append(node)
        else:
            groups.append((device, [node]))
    needed_later: dict[int, set[str]] = {}
    outputs = {v.name for v in graph.outputs}
    for index in range(len(groups)):
        later = {i for _, nodes in groups[index + 1:] for n in nodes for i in n.inputs if i}
        needed_later[index] = later | outputs
    parts = []
    for index, (device, nodes) in enumerate(groups):
        defined = {o.name for n in nodes for o in n.outputs}
        used = list(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in defined))
        constants = {name: graph.constants[name] for name in used if name in graph.constants}
        inputs = [Value(name, graph.value_type(name)) for name in used if name not in constants]
        outs = [o for n in nodes for o in n.outputs if o.name in needed_later[index]]
        sub = Graph(f"{graph.name}/{index}@{device}", tuple(inputs), tuple(outs), tuple(nodes),
                    constants)
        parts.append(Partition(device, sub, device != placement.devices[0]))
    return parts
