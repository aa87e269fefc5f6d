"""Fast Conv: im2col through strided views, then one BLAS matmul per group.

The input is padded once (:class:`~._windows.Windows`); its windows are read
through one ``as_strided`` view ``[G, C/G, K..., N, O...]`` that is copied,
several whole images at a time, into a reused buffer of at most
:data:`TILE_BYTES`, and multiplied by the filters ``[G, M/G, C/G * prod(K)]``
in one wide matmul per group (an image too large for a tile is split by
output rows). A 1x1 convolution with unit strides and no padding needs no
copy at all, and a depthwise convolution (one input channel per group)
accumulates one broadcast multiply per kernel position instead of many tiny
matmuls.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polyhal.adapters.cpu.kernels._windows import Windows
from polyhal.ir.limits import ensure_allocatable

TILE_BYTES = 16 << 20
"""At most how many bytes of im2col columns one matmul takes (unless one output row
needs more)."""
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
    """``y[N, G, M/G, P]`` = filters @ columns, over cache-sized tiles of columns.

    Whole images are batched into one matmul per group (``[M/G, depth] @ [depth,
    images * P]``): BLAS is far faster on one wide product than on one narrow
    product per image. An image whose columns exceed a tile is split by output rows.
    """
    n, c = x.shape[:2]
    m = w.shape[0]
    c_group, m_group = c // group, m // group
    depth = c_group * win.positions
    filters = w.reshape(group, m_group, depth)
    windows = win.all_windows(win.padded(x, 0, "Conv"), group)  # [N, G, C/G, K..., O...]
    lead = 3 + win.rank  # axes before the first output axis in ``windows``
    pixels = math.prod(win.out)
    per_item = group * depth * pixels * y.itemsize
    if per_item > TILE_BYTES:
        for item in range(n):
            _im2col_rows(windows[item], filters, win, y[item])
        return
    batch = max(1, min(n, TILE_BYTES // per_item))
    by_group = np.moveaxis(windows, 0, lead - 1)  # [G, C/G, K..., N, O...]
    buffers: dict[int, np.ndarray] = {}
    for n0 in range(0, n, batch):
        n1 = min(n, n0 + batch)
        count = n1 - n0
        if count not in buffers:  # at most two sizes: full tiles and the last one
            buffers[count] = np.empty((group, c_group, *win.kernel, count, *win.out),
                                      dtype=y.dtype)
        cols = buffers[count]
        np.copyto(cols, by_group[(*[slice(None)] * (lead - 1), slice(n0, n1))])
        product = np.matmul(filters, cols.reshape(group, depth, count * pixels))
        y[n0:n1] = product.reshape(group, m_group, count, pixels).transpose(2, 0, 1, 3)


def _im2col_rows(windows: np.ndarray, filters: np.ndarray, win: Windows, y: np.ndarray
                 ) -> None:
    """One image, ``y[G, M/G, P]``, a tile of output rows at a time."""
    group, m_group, depth = filters.shape
    rows, rest = win.out[0], math.prod(win.out[1:])
    per_row = group * depth * rest * y.itemsize
    step = max(1, TILE_BYTES // per_row)
    if step * per_row > TILE_BYTES:  # one output row's columns exceed a tile
        ensure_allocatable((group, depth, step * rest), "Conv: columns")
    buffer = np.empty((group, depth // win.positions, *win.kernel, step, *win.out[1:]),
                      dtype=y.dtype)
    out = y.reshape(group, m_group, rows, rest)
    lead = 2 + win.rank  # axes before the first output axis in ``windows``
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        cols = buffer[(*[slice(None)] * lead, slice(r1 - r0))]
        np.copyto(cols, windows[(*[slice(None)] * lead, slice(r0, r1))])
        product = np.matmul(filters, cols.reshape(group, depth, (r1 - r0) * rest))
        out[:, :, r0:r1] = product.reshape(group, m_group, r1 - r0, rest)


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
