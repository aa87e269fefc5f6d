"""Fast pools: MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool.

MaxPool and AveragePool work on cache-sized blocks of the ``N * C`` planes,
each padded into a reused buffer, and combine strided views of it
(``np.maximum`` / ``+=`` into the output), so nothing of the size of all
windows is ever built. The max is separable and taken one spatial axis at a
time (``k1 + k2`` views instead of ``k1 * k2``); the average adds one view
per kernel position (only the positions that reach the input, see
:attr:`Windows.taps`). MaxPool's Indices output takes a second pass over the
kernel positions of each block that keeps, per output, the first in-bounds
position holding the max (:func:`max_pool`); :func:`max_pool_values` skips it
for nodes that do not ask for Indices.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polyhal.adapters.cpu.kernels._windows import Windows

BLOCK_BYTES = 2 << 20
"""About how many bytes of padded input one block of planes takes (cache-sized)."""


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _window_max(win: Windows, padded: np.ndarray, y: np.ndarray) -> None:
    """``y`` = the max over the windows of ``padded``, one spatial axis at a time (max is
    separable: the maxes of the rows of a window are maxed over; NaN propagates)."""
    current = padded
    # the axes are reduced last to first; the first one that needs it writes ``y``
    last = min((axis for axis in range(win.rank)
                if win.kernel[axis] > 1 or win.strides[axis] > 1), default=0)
    for axis in reversed(range(win.rank)):  # the contiguous axis first
        k, d, s, out = win.kernel[axis], win.dilations[axis], win.strides[axis], win.out[axis]
        if k == 1 and s == 1 and axis != last:
            continue
        lead = (slice(None),) * (current.ndim - win.rank + axis)
        shift = win.lead[axis] - win.begin[axis]  # padded index of coordinate 0, minus begin
        taps = [current[(*lead, slice(j * d + shift, j * d + shift + (out - 1) * s + 1, s))]
                for j in win.taps[axis]]
        target = y if axis == last else np.empty(taps[0].shape, dtype=y.dtype)
        np.copyto(target, taps[0])
        for tap in taps[1:]:
            np.maximum(target, tap, out=target)
        current = target


def max_pool_values(x: np.ndarray, *, auto_pad: str, ceil_mode: int, dilations: Any,
                    kernel_shape: Any, pads: Any, storage_order: int, strides: Any
                    ) -> np.ndarray:
    """``core.MaxPool``'s Y alone (for nodes without the Indices output)."""
    attrs = {"auto_pad": auto_pad, "ceil_mode": ceil_mode, "dilations": dilations,
             "pads": pads, "strides": strides}
    win = Windows(x.shape[2:], kernel_shape, attrs, pool=True)
    y = np.empty((*x.shape[:2], *win.out), dtype=x.dtype)
    planes = y.reshape(x.shape[0] * x.shape[1], *win.out)
    for start, stop, padded in win.blocks(x, _lowest(x.dtype), BLOCK_BYTES):
        _window_max(win, padded, planes[start:stop])
    return y


def max_pool(x: np.ndarray, *, auto_pad: str, ceil_mode: int, dilations: Any,
             kernel_shape: Any, pads: Any, storage_order: int, strides: Any
             ) -> tuple[np.ndarray, np.ndarray]:
    """``core.MaxPool``: Y and Indices (see :mod:`polyhal.ops.nn`)."""
    attrs = {"auto_pad": auto_pad, "ceil_mode": ceil_mode, "dilations": dilations,
             "pads": pads, "strides": strides}
    win = Windows(x.shape[2:], kernel_shape, attrs, pool=True)
    shape = (*x.shape[:2], *win.out)
    y = np.empty(shape, dtype=x.dtype)
    indices = np.empty(shape, dtype=np.int64)
    count = x.shape[0] * x.shape[1]
    y_planes = y.reshape(count, *win.out)
    i_planes = indices.reshape(count, *win.out)
    # the flat spatial index: row-major (storage_order 0) or column-major (1) strides
    order = range(win.rank) if storage_order == 0 else reversed(range(win.rank))
    flat_stride = [0] * win.rank
    stride = 1
    for i in reversed(list(order)):
        flat_stride[i] = stride
        stride *= win.spatial[i]
    # per kernel position read (row-major, so the first in order is the first in the
    # kernel): the flat index it reads from the first window (added to ``base``), and
    # where its input coordinate is outside the input (padding is never the max's
    # position)
    zeros = [0] * win.rank
    taps, moves = [], []
    for offset in win.offsets():
        inside = win.in_bounds(offset, zeros, win.spatial)
        taps.append((offset, None if inside is None else ~inside))
        moves.append(sum((k * d - b) * f for k, d, b, f in zip(  # Python ints: exact
            offset, win.dilations, win.begin, flat_stride, strict=True)))
    move = np.array([*moves, 0], dtype=np.int64)  # the last entry: no position (-1 below)
    count_taps = len(taps)
    small = np.int16 if 2 * count_taps < np.iinfo(np.int16).max else np.int32
    base = np.zeros(win.out, dtype=np.int64)  # each window's start, less the begin pads
    for i in range(win.rank):
        spread = [1] * win.rank
        spread[i] = win.out[i]
        base = base + (np.arange(win.out[i], dtype=np.int64) * (win.strides[i]
                                                                * flat_stride[i])).reshape(spread)
    plane_size = math.prod(win.spatial)
    for start, stop, padded in win.blocks(x, _lowest(x.dtype), BLOCK_BYTES):
        yb = y_planes[start:stop]
        _window_max(win, padded, yb)
        nan = x.dtype.kind == "f" and bool(np.isnan(yb).any())
        # first[...]: the first position read, in order, that is in bounds and holds
        # the max (a NaN counts as the max); count_taps where there is none. Position t
        # offers t where it holds the max, count_taps + t elsewhere.
        first = np.full(yb.shape, count_taps, dtype=small)
        miss = np.empty(yb.shape, dtype=bool)
        offer = np.empty(yb.shape, dtype=small)
        scratch = np.empty(yb.shape, dtype=bool) if nan else None
        for t, (offset, outside) in enumerate(taps):
            view = win.at(padded, offset)
            np.not_equal(view, yb, out=miss)
            if scratch is not None:
                np.isnan(view, out=scratch)
                np.greater(miss, scratch, out=miss)  # miss and not NaN
            if outside is not None:
                miss |= outside
            np.multiply(miss, small(count_taps), out=offer)
            offer += small(t)
            np.minimum(first, offer, out=first)
        np.minimum(first, small(count_taps), out=first)
        ib = i_planes[start:stop]
        np.add(base, (np.arange(start, stop, dtype=np.int64) * plane_size).reshape(
            -1, *[1] * win.rank), out=ib)
        ib += move[first]
        none = first == count_taps
        if none.any():
            ib[none] = -1
    return y, indices


def average_pool(x: np.ndarray, *, auto_pad: str, ceil_mode: int, count_include_pad: int,
                 dilations: Any, kernel_shape: Any, pads: Any, strides: Any) -> np.ndarray:
    """``core.AveragePool`` (see :mod:`polyhal.ops.nn`)."""
    attrs = {"auto_pad": auto_pad, "ceil_mode": ceil_mode, "dilations": dilations,
             "pads": pads, "strides": strides}
    win = Windows(x.shape[2:], kernel_shape, attrs, pool=True)
    if count_include_pad:
        # pads count, but not the positions ceil_mode adds past the end padding
        count = win.counts([-b for b in win.begin],
                           [size + end for size, end in zip(win.spatial, win.end, strict=True)])
    else:
        count = win.counts([0] * win.rank, win.spatial)
    divisor = count.astype(x.dtype)  # an empty window: 0 / 0 = NaN (documented)
    y = np.empty((*x.shape[:2], *win.out), dtype=x.dtype)
    planes = y.reshape(x.shape[0] * x.shape[1], *win.out)
    for start, stop, padded in win.blocks(x, 0, BLOCK_BYTES):
        yb = planes[start:stop]
        for index, offset in enumerate(win.offsets()):
            view = win.at(padded, offset)
            if index == 0:
                np.copyto(yb, view)
            else:
                yb += view
        yb /= divisor
    return y


def global_average_pool(x: np.ndarray) -> np.ndarray:
    """``core.GlobalAveragePool``: the mean over the spatial axes, kept as size 1. The
    row sums of ``[N*C, D]`` go through ``einsum``, whose SIMD loop costs far less per
    short row than ``sum``'s reduction machinery (and, single-threaded, never waits on
    a busy BLAS thread the way a matrix-vector product can); a channels-last input is
    summed over its pixel rows in place."""
    count = math.prod(x.shape[2:])
    last = np.moveaxis(x, 1, -1)
    if count > 1 and x.ndim > 2 and last.flags.c_contiguous:
        # A channels-last buffer (the CPU plan's Conv outputs): sum the pixels of each
        # image as rows, without gathering each channel's plane first.
        y = np.einsum("ijk->ik", last.reshape(x.shape[0], count, x.shape[1]))
    else:
        planes = x.reshape(x.shape[0] * x.shape[1], count)
        y = planes[:, 0].copy() if count == 1 else np.einsum("ij->i", planes)
    y /= x.dtype.type(count)  # an empty spatial extent: 0 / 0 = NaN
    return y.reshape(*x.shape[:2], *[1] * (x.ndim - 2))


def global_max_pool(x: np.ndarray) -> np.ndarray:
    """``core.GlobalMaxPool``: the max over the spatial axes (-inf when there are none)."""
    count = math.prod(x.shape[2:])
    y = np.max(x.reshape(*x.shape[:2], count), axis=-1, initial=-np.inf)
    return y.reshape(*x.shape[:2], *[1] * (x.ndim - 2))
