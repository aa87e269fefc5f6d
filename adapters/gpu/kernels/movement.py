"""Data movement: index-map gathers and scatters, runtime-index Gather, MaxPool.

Most movement ops (Transpose, Slice, Expand, Tile, Split, Concat, im2col, and
the views) are one gather ``out[i] = x[map[i]]`` with a map the host builds
once per shape from the reference kernels (see :mod:`..maps`); they copy
elements bit for bit, whatever the dtype.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from numba import cuda

from polyhal.adapters.gpu.storage import Storage
from polyhal.adapters.gpu.target import gmath


@cuda.jit
def gather_map(x, xmap, out, n):
    """``out[i] = x[map[i]]``."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = x[xmap[i]]


@cuda.jit
def gather_map_or_zero(x, xmap, out, n):
    """``out[i] = x[map[i]]``, or zero where ``map[i] < 0`` (padding)."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        at = xmap[i]
        out[i] = x[at] if at >= 0 else 0


@cuda.jit
def scatter_map(x, dst, out, n):
    """``out[dst[j]] = x[j]``."""
    for j in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[dst[j]] = x[j]


@cuda.jit
def gather_indices(x, indices, out, n, count, size, inner, error):
    """ONNX Gather: ``out[o, j, r] = x[o, indices[j], r]``; an index outside
    ``[-size, size)`` sets ``error[0]`` and leaves its elements unwritten."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        outer = i // (count * inner)
        j = (i // inner) % count
        r = i % inner
        t = indices[j]
        if t < 0:
            t += size
        if t < 0 or t >= size:
            error[0] = 1
        else:
            out[i] = x[(outer * size + t) * inner + r]


@cache
def max_pool_kernel(storage: Storage, with_indices: bool) -> Any:
    """``max_pool(x, windows, table, out, indices, n, size)``: the max over each row
    of ``windows`` (input offsets, -1 for padding), NaN first; ``indices`` gets
    ``table[offset]`` of the first position holding it, or -1 for an empty window."""
    compute, load, store = storage.compute, storage.load, storage.store

    @cuda.jit
    def max_pool(x, windows, table, out, indices, n, size):
        for r in range(cuda.grid(1), n, cuda.gridsize(1)):
            best = compute(-gmath.inf)
            at = -1
            for j in range(size):
                offset = windows[r * size + j]
                if offset >= 0:
                    v = compute(load(x[offset]))
                    if at < 0 or v != v or v > best:
                        best = v
                        at = offset
                        if v != v:
                            break
            out[r] = store(best)
            if with_indices:
                indices[r] = table[at] if at >= 0 else -1

    return max_pool
