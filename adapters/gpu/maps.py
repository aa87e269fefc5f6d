"""Index maps, built on the host once per shape: where each output element comes from.

The geometry of data movement (slices, transposes, windows with every
``auto_pad`` rule) is the reference's: a map is the reference kernel applied
to ``arange`` in place of the data, so the GPU's movement is the
specification's by construction and each op needs no kernel of its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from polyhal.errors import UnsupportedError
from polyhal.ir.graph import Node
from polyhal.ops.nn import _gather_windows
from polyhal.ops.reduce import _axes_to_reduce
from polyhal.ops.registry import get_op
from polyhal.ops.window import window_attrs

MOVEMENT_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
                          "Expand", "Tile", "Split", "Concat", "Identity", "Gather"})
"""Ops whose outputs are elements of their inputs, rearranged."""
EVERY_INPUT_IS_DATA = frozenset({"Concat"})
"""Movement ops whose every input is data (the others' data is input 0)."""


def _arange(shape: Sequence[int], start: int = 0) -> np.ndarray:
    return np.arange(start, start + math.prod(shape), dtype=np.int64).reshape(shape)


def movement_maps(node: Node, attrs: Mapping[str, Any], shapes: Sequence[tuple[int, ...]],
                  constants: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """One flat map per output of a movement ``node``: offsets into its data input
    (for Concat, into its inputs laid end to end). ``constants`` has the value of
    each non-data input, which must be known."""
    data = range(len(node.inputs)) if node.op in EVERY_INPUT_IS_DATA else (0,)
    args: list[Any] = []
    offset = 0
    for i, shape in enumerate(shapes):
        if i in data:
            args.append(_arange(shape, offset))
            offset += math.prod(shape)
        elif node.inputs[i] and constants[i] is None:
            raise UnsupportedError(f"gpu: node {node.name!r} ({node.op}): input {i} must be a "
                                   "constant")
        else:
            args.append(constants[i] if node.inputs[i] else None)
    result = get_op(node.op, node.domain).kernel(*args, **attrs)
    results = list(result) if isinstance(result, tuple | list) else [result]
    return [np.ascontiguousarray(r, dtype=np.int64).reshape(-1) for r in results]


def is_identity(index_map: np.ndarray) -> bool:
    """True when the map reads every element in place (the op is a view)."""
    return bool(np.array_equal(index_map, np.arange(index_map.size)))


def broadcast_map(shape: Sequence[int], out_shape: Sequence[int]) -> np.ndarray:
    """Offsets into an array of ``shape`` for each element of its broadcast to ``out_shape``."""
    return np.ascontiguousarray(np.broadcast_to(_arange(shape), tuple(out_shape))).reshape(-1)


def scatter_targets(index_map: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """For a map over inputs laid end to end, where each input's elements go."""
    inverse = np.empty(index_map.size, dtype=np.int64)
    inverse[index_map] = np.arange(index_map.size)
    bounds = np.cumsum([0, *sizes])
    return [inverse[a:b] for a, b in itertools.pairwise(bounds)]


def reduction_rows(shape: Sequence[int], axes: np.ndarray | None, noop: int
                   ) -> tuple[np.ndarray | None, int, int] | None:
    """``(map, rows, width)``: the reduced axes moved last; ``map`` None when every row
    is contiguous; None when nothing is reduced (``noop_with_empty_axes``)."""
    picked = _axes_to_reduce(np.broadcast_to(np.float32(0), tuple(shape)), axes, noop)
    if picked is None:
        return None
    return rows_of(shape, picked)


def rows_of(shape: Sequence[int], axes: Sequence[int]) -> tuple[np.ndarray | None, int, int]:
    """``(map, rows, width)`` of rows along ``axes`` (normalized) of an array of ``shape``."""
    rank = len(shape)
    kept = [a for a in range(rank) if a not in axes]
    width = math.prod(shape[a] for a in axes)
    rows = math.prod(shape[a] for a in kept)
    order = [*kept, *sorted(axes)]
    if order == list(range(rank)):
        return None, rows, width
    return np.ascontiguousarray(_arange(shape).transpose(order)).reshape(-1), rows, width


def windows(x_shape: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any],
            pool: bool) -> tuple[np.ndarray, list[int]]:
    """Input offsets of every window, ``[N, C, O..., K...]`` (-1 outside the input),
    and the output's spatial shape."""
    win = window_attrs(kernel, attrs, pool=pool)
    gathered, _, geometry = _gather_windows(_arange(x_shape), win, -1, "gpu")
    return gathered, [g[2] for g in geometry]


def im2col(x_shape: Sequence[int], w_shape: Sequence[int], group: int,
           attrs: Mapping[str, Any]) -> tuple[np.ndarray, list[int]]:
    """Conv's columns as a flat map ``[N, group, C/group * K, P]`` and the output's
    spatial shape (``P`` = its size, ``K`` = the kernel's)."""
    gathered, out = windows(x_shape, w_shape[2:], attrs, pool=False)
    n, c = x_shape[0], x_shape[1]
    cols = gathered.reshape(n, group, c // group, math.prod(out), math.prod(w_shape[2:]))
    return np.ascontiguousarray(cols.transpose(0, 1, 2, 4, 3)).reshape(-1), out


def column_major_table(x_shape: Sequence[int]) -> np.ndarray:
    """For each (row-major) offset of ``[N, C, D...]``, MaxPool's column-major Indices."""
    nc, spatial = math.prod(x_shape[:2]), list(x_shape[2:])
    table = _arange([nc, *reversed(spatial)])
    return np.ascontiguousarray(table.transpose(0, *range(len(spatial), 0, -1))).reshape(-1)
