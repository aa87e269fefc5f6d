"""Specialization of symbolic shapes to a concrete binding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.passes.rebuild import rebuild


def _bind(t: TensorType, bindings: Mapping[str, int]) -> TensorType:
    shape = tuple(v if (v := D.evaluate(d, bindings)) is not None else d for d in t.shape)
    return TensorType(t.dtype, shape)


def specialize(graph: Graph, bindings: Mapping[str, int]) -> Graph:
    """``graph`` with every symbol in ``bindings`` replaced by its value.

    Types are inferred afresh from the bound inputs, so every dimension that
    follows from them becomes concrete; dimensions that depend on data stay
    symbolic.
    """
    return rebuild(graph, lambda builder, node, args: None,
                   {v.name: _bind(v.type, bindings) for v in graph.inputs})


def specialize_to(graph: Graph, shapes: Sequence[tuple[int, ...]],
                  values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """:func:`specialize` with the symbolic dimensions bound by concrete input ``shapes``
    (in graph-input order; the first occurrence of a name binds it), and the inputs
    named in ``values`` turned into those constants (their shapes come from the values)."""
    values = values or {}
    bindings: dict[str, int] = {}
    for value, shape in zip(graph.inputs, shapes, strict=True):
        for dim, size in zip(value.type.shape, shape, strict=True):
            if isinstance(dim, str):
                bindings.setdefault(dim, size)
    return rebuild(graph, lambda builder, node, args: None,
                   {v.name: _bind(v.type, bindings) for v in graph.inputs}, values)
