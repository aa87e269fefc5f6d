"""Row kernels: one thread per output row of a reduction, Softmax or LayerNormalization.

A row is ``width`` elements read through an index map (``map[row * width + j]``)
or, when the row is contiguous, at ``row * width + j`` directly. Sums
accumulate in the compute type (float32 for 16-bit storage); Max and Min
propagate NaN, as the reference does.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from numba import cuda

from polyhal.adapters.gpu.storage import Storage
from polyhal.adapters.gpu.target import device_function, f32, gmath

REDUCTIONS = ("sum", "mean", "max", "min", "prod")


@device_function
def _offset(xmap, i, mapped):
    """Where element ``i`` of the rows lives: through the map, or at ``i``."""
    return xmap[i] if mapped else i


@device_function
def _param_offset(pmap, flat, j, mapped):
    """Where a LayerNormalization parameter's value for element ``j`` of a row (``flat``
    in all of X) lives: through its map over X, or at ``j``."""
    return pmap[flat] if mapped else j


@cache
def reduce_kernel(src: Storage, dst: Storage, kind: str, mapped: bool) -> Any:
    """``reduce(x, xmap, out, rows, width)``: ``out[r]`` = the ``kind`` of row ``r``."""
    compute, load, store = dst.compute, src.load, dst.store
    init = {"sum": 0.0, "mean": 0.0, "max": -gmath.inf, "min": gmath.inf, "prod": 1.0}[kind]
    code = REDUCTIONS.index(kind)

    @cuda.jit
    def reduce(x, xmap, out, rows, width):
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            acc = compute(init)
            for j in range(width):
                v = compute(load(x[_offset(xmap, r * width + j, mapped)]))
                if code <= 1:
                    acc += v
                elif code == 4:
                    acc *= v
                elif acc == acc and (v != v or (v > acc if code == 2 else v < acc)):
                    acc = v
            if code == 1:
                acc = acc / compute(width)
            out[r] = store(acc)

    return reduce


@cache
def softmax_kernel(storage: Storage, log: bool, mapped: bool) -> Any:
    """``softmax(x, xmap, out, rows, width)``: Softmax (or LogSoftmax) of each row,
    written where it was read."""
    compute, load, store = storage.compute, storage.load, storage.store

    @cuda.jit
    def softmax(x, xmap, out, rows, width):
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            top = compute(-gmath.inf)
            for j in range(width):
                v = compute(load(x[_offset(xmap, r * width + j, mapped)]))
                if top == top and (v != v or v > top):
                    top = v
            total = compute(0)
            for j in range(width):
                total += gmath.exp(compute(load(x[_offset(xmap, r * width + j, mapped)]))
                                   - top)
            for j in range(width):
                at = _offset(xmap, r * width + j, mapped)
                shifted = compute(load(x[at])) - top
                if log:
                    out[at] = store(compute(shifted - gmath.log(total)))
                else:
                    out[at] = store(compute(gmath.exp(shifted) / total))

    return softmax


@cache
def layer_norm_kernel(storage: Storage, stats: Storage, scale_mapped: bool, bias: bool,
                      bias_mapped: bool) -> Any:
    """``layer_norm(x, scale, smap, b, bmap, out, mean, inv_std, rows, width, eps)``:
    each contiguous row's statistics in float32 (``stash_type`` 1, for every dtype),
    then ``(x - mean) * inv_std * scale + b`` in the compute type, stored once;
    ``mean`` and ``inv_std`` (float32 values, in ``stats``) get the row's statistics.
    ``scale`` and ``b`` are the row's shape (``j``), or read through a map over all of
    ``x`` (``smap[r * width + j]``): they broadcast to X, which may give each row its own."""
    load, store, compute = storage.load, storage.store, storage.compute
    store_stat = stats.store

    @cuda.jit
    def layer_norm(x, scale, smap, b, bmap, out, mean, inv_std, rows, width, eps):
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            total = f32(0)
            for j in range(width):
                total += f32(load(x[r * width + j]))
            mu = total / f32(width)
            sq = f32(0)
            for j in range(width):
                d = f32(load(x[r * width + j])) - mu
                sq += d * d
            inv = f32(1) / gmath.sqrt(sq / f32(width) + eps)
            for j in range(width):
                y = compute((f32(load(x[r * width + j])) - mu) * inv)
                y = y * compute(load(scale[_param_offset(smap, r * width + j, j, scale_mapped)]))
                if bias:
                    y += compute(load(b[_param_offset(bmap, r * width + j, j, bias_mapped)]))
                out[r * width + j] = store(y)
            mean[r] = store_stat(mu)
            inv_std[r] = store_stat(inv)

    return layer_norm
