"""2:4 structured sparsity: the pruning pass and the compressed weight form.

A weight ``W`` of a MatMul ``x @ W`` (shape ``[..., K, N]``) is *2:4 sparse*
when, in every column, each group of four consecutive elements along the
reduction axis ``K`` holds at most two non-zeros. Sparse tensor hardware
stores such a weight compressed, half its values plus a 2-bit position each,
and does half the multiply-accumulates.

>>> import numpy as np
>>> w = np.array([[1.0], [-3.0], [0.5], [2.0]], np.float32)
>>> pruned = prune_2_4_array(w)              # keeps the two largest magnitudes
>>> pruned.ravel().tolist()
[0.0, -3.0, 0.0, 2.0]
>>> packed = compress_2_4(pruned)
>>> packed.values.ravel().tolist(), packed.indices.ravel().tolist()
([-3.0, 2.0], [1, 3])
>>> bool(np.array_equal(decompress_2_4(packed), pruned))
True

:func:`prune_2_4` applies the pruning to a graph: every float constant that
is only ever the right operand of ``core.MatMul`` and whose ``K`` is a
multiple of 4 is replaced by its pruned form. The graph stays a dense graph
with the same semantics for every executor; an adapter with sparse units
recognises 2:4-sparse constants (:func:`is_2_4_sparse`) and compresses them
when it compiles.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from polyhal.errors import PolyhalError
from polyhal.ir.graph import Graph

GROUP, KEEP = 4, 2
"""Four consecutive elements along K, at most two of them non-zero."""


@dataclass(frozen=True)
class Sparse24:
    """A 2:4-sparse weight of shape ``[..., K, N]``, compressed.

    ``values[..., r, n]`` is the element at row ``4 * (r // 2) + indices[..., r, n]``
    of column ``n``: two entries per group of four rows, in increasing row order
    (a group with fewer than two non-zeros stores zeros)."""

    values: np.ndarray
    """``[..., K // 2, N]``, the weight's dtype."""
    indices: np.ndarray
    """``[..., K // 2, N]`` uint8 positions within the group, each 0-3."""
    shape: tuple[int, ...]
    """The dense shape."""

    @property
    def nbytes(self) -> int:
        """Storage with 2-bit indices, as the hardware keeps them."""
        return int(self.values.nbytes + (self.indices.size * 2 + 7) // 8)

    def rows(self) -> np.ndarray:
        """``[..., K // 2, N]``: the dense row index of each stored value."""
        base = (np.arange(self.values.shape[-2]) // KEEP * GROUP)[:, None]
        return base + self.indices.astype(np.intp)


def _groups(w: np.ndarray, what: str) -> np.ndarray:
    """``w`` viewed as ``[..., K // 4, 4, N]``; a shape without such groups is an error."""
    if w.ndim < 2 or w.shape[-2] % GROUP:
        raise PolyhalError(f"{what}: 2:4 sparsity needs a [..., K, N] weight with K a "
                           f"multiple of 4, got shape {list(w.shape)}")
    return w.reshape(*w.shape[:-2], w.shape[-2] // GROUP, GROUP, w.shape[-1])


def is_2_4_sparse(w: np.ndarray) -> bool:
    """True when ``w`` (``[..., K, N]``, K a multiple of 4) is 2:4 sparse along K."""
    w = np.asarray(w)
    if w.ndim < 2 or w.shape[-2] % GROUP or w.shape[-2] == 0:
        return False
    return bool(((_groups(w, "weight") != 0).sum(axis=-2) <= KEEP).all())


def prune_2_4_array(w: np.ndarray) -> np.ndarray:
    """``w`` with the two smallest magnitudes of every group of four along K set to 0.

    Ties keep the earlier row; NaN counts as the largest magnitude (it is kept,
    so pruning never hides one)."""
    w = np.asarray(w)
    groups = _groups(w, "prune_2_4")
    magnitude = np.abs(groups.astype(np.float64))
    # stable sort of -|w|: largest first, earlier row first among equals; NaN sorts last
    # under argsort, so it is mapped to +inf before negating
    order = np.argsort(-np.where(np.isnan(magnitude), np.inf, magnitude), axis=-2,
                       kind="stable")
    dropped = order[..., KEEP:, :]
    pruned = groups.copy()
    np.put_along_axis(pruned, dropped, 0, axis=-2)
    return pruned.reshape(w.shape)


def compress_2_4(w: np.ndarray) -> Sparse24:
    """The compressed form of a 2:4-sparse ``w``; a dense ``w`` is a :class:`PolyhalError`."""
    w = np.asarray(w)
    groups = _groups(w, "compress_2_4")
    nonzero = groups != 0
    if (nonzero.sum(axis=-2) > KEEP).any():
        raise PolyhalError("compress_2_4: the weight is not 2:4 sparse (a group of four "
                           "along K holds more than two non-zeros): prune it first")
    # non-zeros first (stable: in row order), then zeros to fill; the two kept in row order
    chosen = np.sort(np.argsort(~nonzero, axis=-2, kind="stable")[..., :KEEP, :], axis=-2)
    values = np.take_along_axis(groups, chosen, axis=-2)
    half = (*w.shape[:-2], w.shape[-2] // 2, w.shape[-1])
    return Sparse24(np.ascontiguousarray(values.reshape(half)),
                    chosen.astype(np.uint8).reshape(half), tuple(w.shape))


def decompress_2_4(sparse: Sparse24) -> np.ndarray:
    """The dense weight a :class:`Sparse24` stands for."""
    dense = np.zeros(sparse.shape, sparse.values.dtype)
    np.put_along_axis(dense, sparse.rows(), sparse.values, axis=-2)
    return dense


def prune_2_4(graph: Graph, names: Collection[str] | None = None) -> Graph:
    """``graph`` with its MatMul weights pruned to 2:4 sparsity (a new graph).

    A constant is pruned when it is a float tensor of rank 2 or more whose ``K``
    (second-to-last axis) is a positive multiple of 4 and every node reading it
    is a ``core.MatMul`` taking it as its right operand, so that no other
    computation sees the change. ``names`` restricts the pass to those constants;
    naming one that cannot be pruned is a :class:`PolyhalError` saying why.
    """
    readers: dict[str, list[tuple[str, int]]] = {}
    for node in graph.nodes:
        for position, name in enumerate(node.inputs):
            if name in graph.constants:
                readers.setdefault(name, []).append((node.qualified_op, position))
    output_names = {v.name for v in graph.outputs}
    unknown = sorted(set(names or ()) - set(graph.constants))
    if unknown:
        raise PolyhalError(f"prune_2_4: graph {graph.name!r} has no constant "
                           f"{', '.join(map(repr, unknown))}")
    constants = dict(graph.constants)
    for name, array in graph.constants.items():
        if names is not None and name not in names:
            continue
        why = _why_not_prunable(array, readers.get(name, []), name in output_names)
        if why is None:
            constants[name] = prune_2_4_array(array)
        elif names is not None:
            raise PolyhalError(f"prune_2_4: constant {name!r} of graph {graph.name!r} "
                               f"cannot be pruned: {why}")
    return Graph(graph.name, graph.inputs, graph.outputs, graph.nodes, constants, graph.doc)


def _why_not_prunable(array: np.ndarray, readers: list[tuple[str, int]],
                      is_output: bool) -> str | None:
    if not np.issubdtype(array.dtype, np.floating) and array.dtype.name != "bfloat16":
        return f"it is {array.dtype}, not a float tensor"
    if array.ndim < 2 or array.shape[-2] == 0 or array.shape[-2] % GROUP:
        return f"its shape {list(array.shape)} has no K (axis -2) that is a multiple of 4"
    if is_output or not readers or any(r != ("core.MatMul", 1) for r in readers):
        return "something other than a MatMul's right operand reads it"
    return None


__all__ = ["Sparse24", "compress_2_4", "decompress_2_4", "is_2_4_sparse", "prune_2_4",
           "prune_2_4_array"]
