"""Clean-up passes: constant folding, dead-code elimination, common-subexpression
elimination. Each leaves its input untouched and returns a new graph, or the
input itself when it has nothing to change (graphs are immutable): a pipeline
run again on an optimized graph costs a scan, not a rebuild."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.graph import Graph, Node
from polyhal.ir.limits import current_limits
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op
from polyhal.passes.rebuild import rebuild
from polyhal.reference.executor import run_node

FOLD_MAX_ELEMENTS = 1 << 20
"""Constant folding leaves results larger than this in the graph (they would
bloat it more than they save)."""


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes whose outputs nothing uses, and constants nothing reads."""
    live = {v.name for v in graph.outputs}
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o.name in live for o in node.outputs):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    constants = {k: v for k, v in graph.constants.items() if k in live}
    if len(kept) == len(graph.nodes) and len(constants) == len(graph.constants):
        return graph
    return Graph(graph.name, graph.inputs, graph.outputs, tuple(reversed(kept)), constants,
                 graph.doc)


def fold_constants(graph: Graph, max_elements: int = FOLD_MAX_ELEMENTS) -> Graph:
    """Evaluate, with the reference kernels, every node whose inputs are all constant.

    Results become graph constants under the node's output names, and every
    type downstream is inferred afresh (a folded shape makes a reshape
    concrete). Nodes whose results would exceed ``max_elements`` elements,
    and nodes whose kernels fail, stay in the graph.
    """
    limit = min(max_elements, current_limits().max_elements)
    if not any(_foldable(node, graph.constants, limit) for node in graph.nodes):
        return graph
    known: dict[str, np.ndarray] = dict(graph.constants)

    def fold(builder: GraphBuilder, node: Node, args: list[Var | None]
             ) -> tuple[Var, ...] | None:
        if not _foldable(node, known, limit):
            return None
        op = get_op(node.op, node.domain)
        attrs = resolve_attrs(op, node.attrs, f"node {node.name!r}")
        try:
            outputs = run_node(node, op, attrs, [known[i] if i else None for i in node.inputs],
                               {})
        except Exception:  # leave it to run time, where the error will name the node
            return None
        for value, array in zip(node.outputs, outputs, strict=True):
            known[value.name] = array
        return tuple(builder.constant(array, name=value.name)
                     for value, array in zip(node.outputs, outputs, strict=True))

    return eliminate_dead_code(rebuild(graph, fold))


def _foldable(node: Node, known: Mapping[str, np.ndarray], limit: int) -> bool:
    """True when ``node`` reads only ``known`` values (or nothing) and its results have
    known sizes of at most ``limit`` elements."""
    if not all((not i) or i in known for i in node.inputs):
        return False
    for value in node.outputs:
        count = value.type.num_elements
        if count is None or count > limit:
            return False
    return True


def _key(node: Node, rename: dict[str, str]) -> tuple[Any, ...]:
    attrs = tuple(sorted((k, _hashable(v)) for k, v in node.attrs.items()))
    inputs = tuple(rename.get(i, i) for i in node.inputs)
    return (node.domain, node.op, inputs, attrs, len(node.outputs))


def _hashable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _content(value)
    return value


def _content(array: np.ndarray) -> tuple[Any, ...]:
    """A key equal for arrays of equal dtype, shape and bytes: a digest of the bytes,
    so that CSE holds no copy of a model's weights (``tobytes`` would copy them)."""
    return ("array", str(array.dtype), array.shape,
            hashlib.blake2b(_bytes(array), digest_size=32).digest())


def _bytes(array: np.ndarray) -> np.ndarray:
    """``array``'s bytes as a flat uint8 view (a copy only when it is not contiguous)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(_bytes(a), _bytes(b)))


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge nodes that apply the same op, with the same attributes, to the same inputs.

    Identical constants are merged too. Graph outputs keep their names.
    """
    protected = {v.name for v in graph.outputs}
    rename = _duplicate_constants(graph.constants, protected)
    constants = {k: v for k, v in graph.constants.items() if k not in rename}
    seen: dict[tuple[Any, ...], Node] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        key = _key(node, rename)
        first = seen.get(key)
        if first is not None and not protected & set(node.output_names):
            for mine, theirs in zip(node.outputs, first.outputs, strict=True):
                rename[mine.name] = theirs.name
            continue
        if first is None:
            seen[key] = node
        inputs = tuple(rename.get(i, i) for i in node.inputs)
        nodes.append(node if inputs == node.inputs else
                     Node(node.op, node.name, inputs, node.outputs, node.attrs, node.domain))
    if not rename:
        return graph
    return Graph(graph.name, graph.inputs, graph.outputs, tuple(nodes), constants, graph.doc)


def _duplicate_constants(constants: Mapping[str, np.ndarray],
                         keep: set[str]) -> dict[str, str]:
    """Each constant whose dtype, shape and bytes equal an earlier one's -> that one's
    name, except those named in ``keep`` (graph outputs). Only constants that share their
    dtype, shape and first and last bytes with another are hashed (a model's weight
    matrices of one shape differ there)."""
    by_look: dict[tuple[Any, ...], list[str]] = {}
    for name, array in constants.items():
        flat = _bytes(array)
        look = (str(array.dtype), array.shape, flat[:64].tobytes(), flat[-64:].tobytes())
        by_look.setdefault(look, []).append(name)
    rename: dict[str, str] = {}
    for names in by_look.values():
        if len(names) < 2:
            continue
        by_content: dict[tuple[Any, ...], str] = {}
        for name in names:
            array = constants[name]
            key = _content(array)
            if key not in by_content:
                by_content[key] = name
            elif name not in keep and _same_bytes(array, constants[by_content[key]]):
                rename[name] = by_content[key]
    return rename


def simplify(graph: Graph) -> Graph:
    """Constant folding, then CSE, then dead-code elimination."""
    return eliminate_dead_code(eliminate_common_subexpressions(fold_constants(graph)))
