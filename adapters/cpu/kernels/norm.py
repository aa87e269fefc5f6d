"""Fast normalizations: Softmax, LogSoftmax, LayerNormalization,
BatchNormalization and LRN.

Each follows its reference kernel's order of operations elementwise (so special
values give the same results), but works in place on cache-sized blocks of
independent slices (rows, or channel planes) instead of allocating a
full-size temporary per step: every step of a block runs while the block is
still in cache, and the only full-size allocation is the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

BLOCK_BYTES = 1 << 20
"""About how many bytes one block of slices takes."""


def _blocks(count: int, slice_bytes: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` ranges over ``count`` slices of ``slice_bytes`` each."""
    step = max(1, BLOCK_BYTES // max(1, slice_bytes))
    for start in range(0, count, step):
        yield start, min(count, start + step)


def _around(x: np.ndarray, axis: int) -> tuple[np.ndarray, int, int, int]:
    """``x`` as ``[outer, length, inner]`` around ``axis`` (a view when contiguous)."""
    axis %= x.ndim
    outer, length = math.prod(x.shape[:axis]), x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])
    return np.ascontiguousarray(x).reshape(outer, length, inner), outer, length, inner


def _shifted_blocks(x: np.ndarray, axis: int) -> tuple[np.ndarray, list[tuple[slice, ...]]]:
    """The result ``[outer, length, inner]`` around ``axis`` and the index of each of its
    cache-sized blocks of slices; each block holds x - max(x) along the axis."""
    x3, outer, length, inner = _around(x, axis)
    y = np.empty(x3.shape, dtype=x.dtype)
    slab = length * inner * x.itemsize
    if slab <= BLOCK_BYTES or inner == 1:
        blocks = [(slice(o0, o1), slice(None), slice(None)) for o0, o1 in _blocks(outer, slab)]
    else:  # one outer slab is too big: split its inner axis too
        blocks = [(slice(o, o + 1), slice(None), slice(i0, i1)) for o in range(outer)
                  for i0, i1 in _blocks(inner, length * x.itemsize)]
    for index in blocks:
        xb = x3[index]
        # initial= admits empty axes
        np.subtract(xb, np.max(xb, axis=1, keepdims=True, initial=-np.inf), out=y[index])
    return y, blocks


def _sums(block: np.ndarray) -> np.ndarray:
    """Sums of ``[b, length, inner]`` along axis 1, kept. Over the last axis (inner 1)
    ``einsum``'s SIMD loop costs far less per short row than ``sum``'s reduction."""
    if block.shape[2] == 1:
        return np.einsum("ij->i", block[:, :, 0]).reshape(-1, 1, 1)
    return np.sum(block, axis=1, keepdims=True)


def softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """``core.Softmax``: exp(x - max) / sum(exp(x - max)) along ``axis``."""
    y, blocks = _shifted_blocks(x, axis)
    for index in blocks:
        yb = y[index]
        np.exp(yb, out=yb)
        yb /= _sums(yb)
    return y.reshape(x.shape)


def log_softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """``core.LogSoftmax``: (x - max) - log(sum(exp(x - max))) along ``axis``."""
    y, blocks = _shifted_blocks(x, axis)
    for index in blocks:
        yb = y[index]
        total = _sums(np.exp(yb))
        yb -= np.log(total, out=total)  # an empty slice sums to 0: log gives -inf
    return y.reshape(x.shape)


def _normalized_only(p: np.ndarray | None, x: np.ndarray, axis: int) -> np.ndarray | None:
    """``p`` (broadcasting to ``x``) flattened over the normalized axes, or ``None``
    when it also varies along the axes before ``axis``."""
    if p is None:
        return None
    lead = p.ndim - (x.ndim - axis)
    if lead > 0 and any(d != 1 for d in p.shape[:lead]):
        return None
    tail = p.reshape(p.shape[max(0, lead):])
    return np.broadcast_to(tail, x.shape[axis:]).reshape(-1)


def layer_norm(x: np.ndarray, scale: np.ndarray, b: np.ndarray | None = None, *, axis: int,
               epsilon: float, stash_type: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``core.LayerNormalization`` (stash_type 1: statistics in float32): Y, Mean and
    InvStdDev, with X viewed as ``[rows, normalized size]``, a block of rows at a time."""
    axis %= x.ndim
    rows, size = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    xs = np.ascontiguousarray(x).reshape(rows, size)
    count, eps = np.float32(size), np.float32(epsilon)
    scale_flat = _normalized_only(scale, x, axis)
    b_flat = _normalized_only(b, x, axis)
    blocked = scale_flat is not None and (b is None or b_flat is not None)
    y = np.empty((rows, size), dtype=x.dtype if blocked else np.float32)
    mean = np.empty((rows, 1), dtype=np.float32)
    inv_std = np.empty((rows, 1), dtype=np.float32)
    scratch = np.empty((0, size), dtype=np.float32)
    squares = np.empty((0, size), dtype=np.float32)
    for r0, r1 in _blocks(rows, size * 4):
        xb = xs[r0:r1]
        if xb.dtype != np.float32:
            xb = xb.astype(np.float32)  # stage one runs in float32 for every dtype
        mb, ib = mean[r0:r1], inv_std[r0:r1]
        np.sum(xb, axis=1, keepdims=True, out=mb)
        mb /= count  # nothing to normalize: 0 / 0 = NaN
        if y.dtype == np.float32:
            d = y[r0:r1]
        else:
            if scratch.shape[0] < r1 - r0:
                scratch = np.empty((r1 - r0, size), dtype=np.float32)
            d = scratch[:r1 - r0]
        np.subtract(xb, mb, out=d)
        if squares.shape[0] < r1 - r0:
            squares = np.empty((r1 - r0, size), dtype=np.float32)
        # sum(d * d) exactly as the reference sums it (not einsum): float64 graphs carry
        # this float32 stage, so any rounding difference here would show at float64 scale
        np.sum(np.multiply(d, d, out=squares[:r1 - r0]), axis=1, keepdims=True, out=ib)
        ib /= count
        ib += eps
        np.sqrt(ib, out=ib)
        np.divide(np.float32(1), ib, out=ib)
        d *= ib
        if not blocked:
            continue
        out = y[r0:r1]
        np.multiply(d, scale_flat, out=out)  # float64 X: Normalized is cast back first
        if b_flat is not None:
            out += b_flat
    stats = (*x.shape[:axis], *[1] * (x.ndim - axis))
    if blocked:
        return y.reshape(x.shape), mean.reshape(stats), inv_std.reshape(stats)
    result = y.reshape(x.shape).astype(x.dtype, copy=False)
    result *= scale
    if b is not None:
        result += b
    return result, mean.reshape(stats), inv_std.reshape(stats)


def batch_norm(x: np.ndarray, scale: np.ndarray, b: np.ndarray, mean: np.ndarray,
               var: np.ndarray, *, epsilon: float, momentum: float,
               training_mode: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``core.BatchNormalization``: (X - mean) / sqrt(var + epsilon) * scale + B per channel
    (axis 1), parameters first converted to X's dtype, a block of [N, C] planes at a time;
    with the running statistics, input_mean and input_var themselves in inference mode.

    Training mode normalizes with the batch's mean and population variance over every
    axis but the channels and returns the updated running statistics.
    """
    if not training_mode:
        return _normalize(x, scale, b, mean, var, epsilon), mean, var
    axes = (0, *range(2, x.ndim))  # every axis but the channels
    count = math.prod(x.shape[a] for a in axes)
    # mean() as numpy computes it (sum, then divide), without its empty-slice warning:
    # an empty batch gives 0 / 0 = NaN
    batch_mean = np.sum(x, axis=axes) / count
    square = np.subtract(x, batch_mean.reshape(-1, *[1] * (x.ndim - 2)))
    np.square(square, out=square)
    batch_var = np.sum(square, axis=axes) / count
    del square
    y = _normalize(x, scale, b, batch_mean, batch_var, epsilon)
    keep = mean.dtype.type(momentum)
    running_mean = mean * keep + batch_mean.astype(mean.dtype) * (1 - keep)
    running_var = var * keep + batch_var.astype(var.dtype) * (1 - keep)
    return y, running_mean, running_var


def _normalize(x: np.ndarray, scale: np.ndarray, b: np.ndarray, mean: np.ndarray,
               var: np.ndarray, epsilon: float) -> np.ndarray:
    """(X - mean) / sqrt(var + epsilon) * scale + B per channel, in place on the result."""

    def channel(p: np.ndarray) -> np.ndarray:
        return p.astype(x.dtype, copy=False).reshape(-1)

    params = (channel(mean), np.sqrt(channel(var) + x.dtype.type(epsilon)), channel(scale),
              channel(b))
    if x.ndim < 2:
        n, c, size = x.shape[0], 1, 1
    else:
        n, c, size = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    planes = np.ascontiguousarray(x).reshape(n * c, size)
    y = np.empty(planes.shape, dtype=x.dtype)
    if size < 64:  # short planes: broadcast the parameters over [N, C, S] whole
        blocks, per_plane = [(0, n * c)], False
    else:
        blocks, per_plane = list(_blocks(n * c, size * x.itemsize)), True
    for p0, p1 in blocks:
        if per_plane:
            which = np.arange(p0, p1) % c
            m, sd, s, bias = (p[which].reshape(-1, 1) for p in params)
            xb, yb = planes[p0:p1], y[p0:p1]
        else:
            m, sd, s, bias = (p.reshape(1, -1, 1) for p in params)
            xb, yb = planes.reshape(n, c, size), y.reshape(n, c, size)
        np.subtract(xb, m, out=yb)
        yb /= sd
        yb *= s
        yb += bias
    return y.reshape(x.shape)


def lrn(x: np.ndarray, *, alpha: float, beta: float, bias: float, size: int) -> np.ndarray:
    """``core.LRN``: the channel-window sums of squares accumulate one shifted slice per
    window offset instead of one sum per channel. Offsets of ``channels`` or more
    reach no channel, so at most ``2 * channels - 1`` slices are added, however
    large ``size`` is."""
    channels = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    square = np.multiply(x, x)
    total = np.zeros_like(x)
    reach = max(channels - 1, 0)
    for shift in range(-min(before, reach), min(after, reach) + 1):  # channel c adds c + shift
        low, high = max(0, -shift), min(channels, channels - shift)
        total[:, low:high] += square[:, low + shift:high + shift]
    total *= alpha / size
    total += bias
    total **= beta
    return np.divide(x, total, out=total)
