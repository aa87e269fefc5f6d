"""Fast Conv: im2col through strided views, then one BLAS matmul per group.

The input is padded once (:class:`~._windows.Windows`); its windows are read
through one ``as_strided`` view ``[N, G, C/G, K..., O...]`` that is copied,
a tile at a time, into a reused buffer sized to stay in cache, and multiplied
by the filters ``[G, M/G, C/G * prod(K)]`` with ``np.matmul`` straight into
the output (``[N, G, M/G, O...]`` is already ``[N, M, O...]``). A 1x1
convolution with unit strides and no padding needs no copy at all, and a
depthwise convolution (one input channel per group) accumulates one
broadcast multiply per kernel position instead of many tiny matmuls.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polyhal.adapters.cpu.kernels._windows import Windows
from polyhal.ir.limits import ensure_allocatable

TILE_BYTES = 4 << 20
"""About how many bytes of im2col columns one matmul takes (cache-sized tiles)."""
DEPTHWISE_BYTES = 256 << 10
"""About how many bytes of output one depthwise block accumulates."""


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *, auto_pad: str,
         dilations: Any, group: int, kernel_shape: Any, pads: Any, strides: Any
         ) -> np.ndarray:
    """``core.Conv``: the reference's semantics (see :mod:`polyhal.ops.nn`)."""
    attrs = {"auto_pad": auto_pad, "dilations": dilations, "pads": pads, "strides": strides}
    win = Windows(x.shape[2:], w.shape[2:], attrs, pool=False)
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    out, dtype = win.out, np.result_type(x.dtype, w.dtype)
    c_group, m_group = c // group, m // group
    positions, pixels = win.positions, math.prod(out)
    ensure_allocatable((n, m, *out), "Conv: output")
    y = np.empty((n, group, m_group, pixels), dtype=dtype)
    if y.size == 0:
        pass
    elif c_group * positions == 0:
        y.fill(0)
    elif c_group == 1:
        _depthwise(x, w, win, group, y)
    elif (all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides)
          and not any(win.begin) and not any(win.end)):
        cols = x.reshape(n, group, c_group, pixels)
        np.matmul(w.reshape(group, m_group, c_group), cols, out=y)
    else:
        _im2col(x, w, win, group, y)
    y = y.reshape(n, m, *out)
    if b is not None:
        y += b.reshape(1, m, *[1] * len(out))
    return y.astype(x.dtype, copy=False)


def _im2col(x: np.ndarray, w: np.ndarray, win: Windows, group: int, y: np.ndarray) -> None:
    """``y[N, G, M/G, P]`` = filters @ columns, a cache-sized tile of columns at a time."""
    n, c = x.shape[:2]
    m = w.shape[0]
    c_group, m_group = c // group, m // group
    depth = c_group * win.positions
    filters = w.reshape(group, m_group, depth)
    windows = win.all_windows(win.padded(x, 0, "Conv"), group)
    rows = win.out[0]
    rest = math.prod(win.out[1:])
    per_row = group * depth * rest * y.itemsize
    per_item = per_row * rows
    if per_item <= TILE_BYTES:
        batch, step = max(1, min(n, TILE_BYTES // per_item)), rows
    else:
        batch, step = 1, max(1, TILE_BYTES // per_row)
    if batch * step * per_row > TILE_BYTES:  # one output row's columns exceed a tile
        ensure_allocatable((batch, group, depth, step * rest), "Conv: columns")
    buffer = np.empty((batch, group, c_group, *win.kernel, step, *win.out[1:]), dtype=y.dtype)
    out = y.reshape(n, group, m_group, rows, rest)
    lead = 3 + win.rank  # axes before the first output axis in ``windows``
    for n0 in range(0, n, batch):
        n1 = min(n, n0 + batch)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            index = (slice(n0, n1), *[slice(None)] * (lead - 1), slice(r0, r1))
            cols = buffer[(slice(n1 - n0), *[slice(None)] * (lead - 1), slice(r1 - r0))]
            np.copyto(cols, windows[index])
            cols = cols.reshape(n1 - n0, group, depth, (r1 - r0) * rest)
            target = out[n0:n1, :, :, r0:r1].reshape(n1 - n0, group, m_group, (r1 - r0) * rest)
            if np.may_share_memory(target, out):
                np.matmul(filters, cols, out=target)
            else:  # the tile is not viewable as a matrix: compute, then store
                out[n0:n1, :, :, r0:r1] = np.matmul(filters, cols).reshape(
                    n1 - n0, group, m_group, r1 - r0, rest)


def _depthwise(x: np.ndarray, w: np.ndarray, win: Windows, group: int, y: np.ndarray) -> None:
    """One input channel per group: ``y[n, g, j] = sum_k w[g*M/G + j, 0, k] * x_k[n, g]``,
    one broadcast multiply-add per kernel position, over cache-sized channel blocks."""
    n = x.shape[0]
    m_group = w.shape[0] // group
    padded = np.ascontiguousarray(win.padded(x, 0, "Conv"))  # [N, C] flattens as a view
    filters = w.reshape(group, m_group, win.positions)
    out = y.reshape(n * group, m_group, *win.out)
    per_group = m_group * math.prod(win.out) * y.itemsize
    block = max(1, min(n * group, DEPTHWISE_BYTES // max(1, per_group)))
    term = np.empty((block, m_group, *win.out), dtype=y.dtype)
    views = [win.at(padded, offset).reshape(n * group, 1, *win.out)
             for offset in win.offsets()]
    weights = filters.reshape(1, group, m_group, win.positions)
    for start in range(0, n * group, block):
        stop = min(n * group, start + block)
        target, scratch = out[start:stop], term[:stop - start]
        rows = np.arange(start, stop) % group
        spread = (stop - start, m_group, *[1] * win.rank)
        for index, view in enumerate(views):
            weight = weights[0, rows, :, index].reshape(spread)
            if index == 0:
                np.multiply(view[start:stop], weight, out=target)
            else:
                np.multiply(view[start:stop], weight, out=scratch)
                target += scratch
