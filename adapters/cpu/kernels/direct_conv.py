"""Direct 2-D convolution on channels-last data, register-blocked in LLVM IR.

A Conv is, for each output pixel, a sum over the window's ``(kh, kw, c)`` of one
input value times a row of filters ``[M]``. The micro-kernel (:func:`_tile_kernel`, a numba
intrinsic that emits LLVM IR) computes a tile of :data:`TILE_PIXELS` adjacent
output pixels by :data:`TILE_VECTORS` SIMD vectors of output channels: its
accumulators stay in registers for the whole window, each step broadcasts one
input value per pixel and multiplies it into the filter vectors (``fmuladd``),
and the tile is written once, with the bias already added and a residual and
the Relu (if any) applied. Nothing like im2col's columns is ever written, and the input
and filters are read from cache: this is how fast CPU libraries convolve the
thin channel counts of small CNNs, where a GEMM is too narrow for BLAS.

numba's own loop vectorizer cannot be relied on for this: it vectorizes the
reduction over the window instead of the channels and spills the
accumulators (measured: 3 GFLOP/s against the micro-kernel's 95-115 per core on
the layers of ``benchmarks/models.py``). The IR uses LLVM vector types,
so the same code is correct on any target; the vector width and the tile are
sized for the registers of the CPU numba compiles for (:data:`TILE_PIXELS`). The
inner loop over a window row only advances pointers computed before it: with
its indices recomputed at every step, the addresses spilled to the stack and the
AVX2 tile took 8.5 ms on those layers (one thread) where it now takes 7.0.

Output channels are processed in blocks of ``TILE_VECTORS`` vectors; the
filters and bias are padded with zeros to whole blocks (:func:`pack_filters`)
and a last, partial block is stored through a lane mask, so any channel count
works. For each output row, the input rows its windows read are first copied
into a small buffer with zero columns where the windows reach past the input's
edges, so padding is never materialized for the whole input. Rows of output
pixels are shared between :mod:`polyhal.adapters.cpu.threads` threads
(:func:`convolve`, :mod:`.crew`); the kernel releases the GIL.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from polyhal.adapters.cpu import threads as cpu_threads
from polyhal.adapters.cpu.kernels import crew, simd

_WIDE = simd.has_avx512()
VECTOR_BYTES = simd.AVX512_VECTOR_BYTES if _WIDE else simd.VECTOR_BYTES
"""Bytes of the micro-kernel's vectors: AVX-512's where numba compiles for it."""
TILE_PIXELS, TILE_VECTORS = (8, 1) if _WIDE else (4, 2)
"""Adjacent output pixels one micro-kernel call computes, and its SIMD vectors of
output channels per pixel. With AVX-512, 8 x 1 accumulators of 16 float32 (one
vector covers a 16-channel layer without waste; tiles of 8 x 2 and 12 x 1, and
AVX2's vectors in an 8 x 2 tile, were measured 15-100% slower). With AVX2, 4 x 2
accumulators, two filter vectors and a broadcast leave room in its 16 registers (8 x 1
and 6 x 2 were measured 15-50% slower)."""
MIN_ROWS_PER_THREAD = 8
"""Output rows below which a thread is not worth waking."""
CHUNKS_PER_THREAD = 8
"""Chunks of output rows per thread that threads take from a shared counter."""


def block_channels(dtype: np.dtype) -> int:
    """Output channels one tile covers (its vectors' lanes): filters are padded to a
    multiple of this."""
    return TILE_VECTORS * (VECTOR_BYTES // np.dtype(dtype).itemsize)


def _tile_kernel(pixels: int, vectors: int) -> Any:
    """The micro-kernel intrinsic for a tile of ``pixels`` x ``vectors`` vectors.

    ``tile(rows, filters, bias, out, residual, x0, f0, o0, counts, x_steps, f_steps,
    pixel_step, out_step, block, valid, add, relu)``, with ``counts = (kh, kw, c)`` loop counts,
    ``x_steps = (kh, kw)`` strides of the input rows (elements; ``c`` is contiguous)
    and ``f_steps = (kh, kw, filter_row)`` those of the filter rows, adds for every
    ``(kh, kw, c)`` and pixel ``p < pixels``::

        rows[x0 + p * pixel_step + kh * x_steps[0] + kw * x_steps[1] + c]
          * filters[(f0 + kh * f_steps[0] + kw * f_steps[1] + c) * filter_row + block :]

    (``vectors`` vectors of it) to ``bias[block:]``, adds ``residual`` at the pixel's
    place in ``out`` when ``add`` (``residual`` has ``out``'s layout; pass ``out``
    itself otherwise), applies the Relu when ``relu``, and stores pixel ``p`` at
    ``out[o0 + p * out_step :]``, only its first ``valid`` channels when fewer than a
    tile's remain. The accumulators are stack slots that LLVM keeps in registers.
    """

    @intrinsic
    def tile(typingctx, rows, filters, bias, out, residual, x0, f0, o0, counts, x_steps,
             f_steps, pixel_step, out_step, block, valid, add, relu):
        signature = types.void(rows, filters, bias, out, residual, x0, f0, o0, counts, x_steps,
                               f_steps, pixel_step, out_step, block, valid, add, relu)

        def codegen(context, builder, sig, args):
            x0_, f0_, o0_ = args[5:8]
            counts_, x_steps_, f_steps_ = (cgutils.unpack_tuple(builder, t) for t in args[8:11])
            pixel_step_, out_step_, block_, valid_, add_, relu_ = args[11:]
            rows_p, filters_p, bias_p, out_p, residual_p = (
                context.make_array(t)(context, builder, a).data
                for a, t in zip(args[:5], sig.args[:5], strict=True))
            ir_ = simd.VectorCodegen(context, builder, sig.args[0].dtype, VECTOR_BYTES)
            width, filter_row = ir_.width, f_steps_[2]
            slots = ir_.accumulators(pixels, vectors, bias_p, block_)
            with (cgutils.for_range(builder, counts_[0]) as kh_loop,
                  cgutils.for_range(builder, counts_[1]) as kw_loop):
                kh, kw = kh_loop.index, kw_loop.index
                # Each pixel's and the filters' first element of this (kh, kw), computed
                # once: the inner loop only adds ``c`` to pointers.
                x_start = ir_.add(x0_, ir_.mul(kh, x_steps_[0]), ir_.mul(kw, x_steps_[1]))
                pixel_rows = [builder.gep(rows_p, [ir_.add(x_start, ir_.mul(ir_.const(p),
                                                                          pixel_step_))],
                                          inbounds=True) for p in range(pixels)]
                f_row = ir_.add(f0_, ir_.mul(kh, f_steps_[0]), ir_.mul(kw, f_steps_[1]))
                filter_rows = builder.gep(filters_p, [ir_.add(ir_.mul(f_row, filter_row), block_)],
                                          inbounds=True)
                with cgutils.for_range(builder, counts_[2]) as c_loop:
                    c = c_loop.index
                    f_start = ir_.mul(c, filter_row)
                    weights = [ir_.load_vector(filter_rows, ir_.add(f_start, ir_.const(j * width)))
                               for j in range(vectors)]
                    for pixel_row, row in zip(pixel_rows, slots, strict=True):
                        spread = ir_.splat(builder.load(builder.gep(pixel_row, [c],
                                                                    inbounds=True)))
                        ir_.multiply_add(row, spread, weights)
            for p, row in enumerate(slots):
                for j, slot in enumerate(row):
                    value = builder.load(slot)
                    offset = ir_.add(o0_, ir_.const(j * width), ir_.mul(ir_.const(p), out_step_))
                    count = builder.sub(valid_, ir_.const(j * width))
                    added = builder.fadd(value, ir_.load_lanes(residual_p, offset, count))
                    value = ir_.relu_if(builder.select(add_, added, value), relu_)
                    ir_.store_lanes(value, out_p, offset, count)
            return context.get_dummy_value()

        return signature, codegen

    return tile


@intrinsic
def _copy(typingctx, target, target_start, source, source_start, count):
    """``target[target_start:][:count] = source[source_start:][:count]`` as one
    ``memcpy`` (numba's own loops check every index and do not vectorize)."""
    signature = types.void(target, target_start, source, source_start, count)

    def codegen(context, builder, sig, args):
        target_, target_start_, source_, source_start_, count_ = args
        target_p, source_p = (context.make_array(t)(context, builder, a).data
                              for a, t in ((target_, sig.args[0]), (source_, sig.args[2])))
        cgutils.raw_memcpy(builder, builder.gep(target_p, [target_start_], inbounds=True),
                           builder.gep(source_p, [source_start_], inbounds=True), count_,
                           context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype)))
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _claim(typingctx, counter, count):
    """Atomically adds ``count`` to ``counter[0]``; returns the value before."""
    signature = types.int64(counter, count)

    def codegen(context, builder, sig, args):
        pointer = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", pointer, args[1], "monotonic")

    return signature, codegen


def _memory(x: np.ndarray) -> np.ndarray:
    """The memory that ``x`` (strides >= 0, whole elements) spans, as a 1-D array from
    its first element to its last."""
    extent = sum((d - 1) * s for d, s in zip(x.shape, x.strides, strict=True)) // x.itemsize
    return np.lib.stride_tricks.as_strided(x, (extent + 1,), (x.itemsize,), writeable=False)


_TILE = _tile_kernel(TILE_PIXELS, TILE_VECTORS)
_EDGE = _tile_kernel(1, TILE_VECTORS)


@numba.njit(nogil=True, cache=True)
def _taps(o, stride, begin, dilation, kernel, size):  # pragma: no cover - numba
    """``(first, stop)``: the kernel positions of output coordinate ``o`` whose input
    coordinate ``o * stride - begin + k * dilation`` lies in ``[0, size)``."""
    origin = o * stride - begin
    first = 0 if origin >= 0 else min(kernel, (-origin + dilation - 1) // dilation)
    stop = 0 if origin > size - 1 else min(kernel, (size - 1 - origin) // dilation + 1)
    return first, max(first, stop)


@numba.njit(nogil=True, cache=True)
def _rows(x, filters, bias, out, residual, counter, chunk, geometry, steps, add, relu
          ):  # pragma: no cover - compiled by numba
    """Output rows of the Conv (see :func:`convolve`), ``chunk`` rows at a time, taken
    from the shared ``counter`` until all ``N * OH`` are taken."""
    out_w, m, kh_size = geometry[4], geometry[5], geometry[6]
    rows = np.zeros(kh_size * _span(geometry) * geometry[2], x.dtype)
    total = out.size // (out_w * m)
    while True:
        first = _claim(counter, chunk)
        if first >= total:
            return
        for r in range(first, min(first + chunk, total)):
            _row(x, filters, bias, out, residual, rows, r, geometry, steps, add, relu)


@numba.njit(nogil=True, cache=True, inline="always")
def _span(geometry):  # pragma: no cover - compiled by numba
    """Columns of the input one output row reads (with the padding)."""
    out_w, kw_size, stride_w, dil_w = geometry[4], geometry[7], geometry[9], geometry[13]
    return (out_w - 1) * stride_w + (kw_size - 1) * dil_w + 1


@numba.njit(nogil=True, cache=True, inline="always")
def _row(x, filters, bias, out, residual, rows, r, geometry, steps, add, relu
         ):  # pragma: no cover - compiled by numba
    """Output row ``r`` (of ``N * OH``): the input rows it reads are copied into
    ``rows`` (its zero columns stand for the padding), then tiles of it are computed."""
    (h, w, c, out_h, out_w, m, kh_size, kw_size, stride_h, stride_w, begin_h, begin_w,
     dil_h, dil_w) = geometry
    span = _span(geometry)
    start, stop = max(0, -begin_w), min(w, span - begin_w)
    n = r // out_h
    oh = r - n * out_h
    kh0, kh1 = _taps(oh, stride_h, begin_h, dil_h, kh_size, h)
    for kh in range(kh0, kh1):
        source = n * steps[0] + (oh * stride_h - begin_h + kh * dil_h) * steps[1]
        target = ((kh - kh0) * span + begin_w) * c
        if steps[2] == c and steps[3] == 1:  # channels-last: one contiguous run
            _copy(rows, target + start * c, x, source + start * c, (stop - start) * c)
        else:  # other layouts: gathered (unsigned indices: no wraparound checks)
            for iw in range(start, stop):
                for ci in range(c):
                    rows[numba.uint64(target + iw * c + ci)] = \
                        x[numba.uint64(source + iw * steps[2] + ci * steps[3])]
    # With unit width dilation (kw, c) is one contiguous run of the rows and filters.
    counts = (kh1 - kh0, 1, kw_size * c) if dil_w == 1 else (kh1 - kh0, kw_size, c)
    x_steps = (span * c, dil_w * c)
    f_steps = (kw_size * c, c, filters.shape[1])
    f0 = kh0 * kw_size * c
    o_row = r * out_w * m
    block = TILE_VECTORS * (VECTOR_BYTES // filters.itemsize)
    full = out_w - out_w % TILE_PIXELS
    for m0 in range(0, m, block):
        for ow in range(0, full, TILE_PIXELS):
            _TILE(rows, filters, bias, out, residual, ow * stride_w * c, f0,
                  o_row + ow * m + m0, counts, x_steps, f_steps, stride_w * c, m, m0, m - m0,
                  add, relu)
        for ow in range(full, out_w):
            _EDGE(rows, filters, bias, out, residual, ow * stride_w * c, f0,
                  o_row + ow * m + m0, counts, x_steps, f_steps, stride_w * c, m, m0, m - m0,
                  add, relu)


def pack_filters(w: np.ndarray, bias: np.ndarray | None, dtype: np.dtype
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``w [M, C, KH, KW]`` as rows ``(KH, KW, C)`` of ``M`` padded with zeros to a whole
    number of blocks (:func:`block_channels`), and the bias padded alike (zeros when
    absent)."""
    m = w.shape[0]
    padded = -(-m // block_channels(dtype)) * block_channels(dtype)
    rows = np.zeros((int(np.prod(w.shape[1:])), padded), dtype)
    rows[:, :m] = w.transpose(2, 3, 1, 0).reshape(-1, m)
    packed_bias = np.zeros(padded, dtype)
    if bias is not None:
        packed_bias[:m] = bias
    return rows, packed_bias


def convolve(x: np.ndarray, filters: tuple[np.ndarray, np.ndarray], out: np.ndarray,
             kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int],
             begin: tuple[int, int], relu: bool, residual: np.ndarray | None = None) -> None:
    """``out [N, OH, OW, M]`` (C-contiguous) = Conv(``x``) + bias (+ ``residual``, a
    C-contiguous array of ``out``'s shape) (then Relu).

    ``x`` is the input seen as ``[N, H, W, C]`` in any memory layout (a
    channels-last buffer, an NCHW array transposed, views of either; one with a
    negative stride is copied first).
    The input rows each output row reads are copied (gathered, for other layouts
    than channels-last) into a small buffer whose columns past the input's edges
    are zero (``begin`` pads before each axis; rows outside the input are
    skipped), so nothing is padded.
    ``filters`` come from :func:`pack_filters`.
    """
    if any(stride < 0 or stride % x.itemsize for stride in x.strides):
        x = np.ascontiguousarray(x)  # a reversed or unaligned view: one compact copy
    n, h, w, c = x.shape
    _, out_h, out_w, m = out.shape
    geometry = (h, w, c, out_h, out_w, m, *kernel, *strides, *begin, *dilations)
    steps = tuple(stride // x.itemsize for stride in x.strides)
    flat = out.reshape(-1)
    added = flat if residual is None else residual.reshape(-1)
    if added.shape != flat.shape or added.dtype != flat.dtype:
        raise ValueError(f"residual {residual.shape} {residual.dtype} "  # type: ignore[union-attr]
                         f"does not match the output {out.shape} {out.dtype}")
    arguments = (_memory(x), *filters, flat, added)
    total = n * out_h
    threads = max(1, min(cpu_threads.count(), total // MIN_ROWS_PER_THREAD))
    # Rows are taken in small chunks from a shared counter, so a thread that is slowed
    # down (a busy core, a preempted vCPU) takes fewer of them.
    chunk = max(1, total // (threads * CHUNKS_PER_THREAD))
    counter = np.zeros(1, np.int64)
    crew.run([functools.partial(_rows, *arguments, counter, chunk, geometry, steps,
                                 residual is not None, relu)
               for _ in range(threads)])
