"""GEMM against a constant right operand, packed once: few rows without BLAS's per-call cost.

OpenBLAS packs ``B`` again at every ``sgemm`` call. For a few rows of ``A`` that
packing costs more than the product: on this adapter's reference VM,
``[2, 784] @ [784, 512]`` took 180 us where one row (which OpenBLAS hands to
``gemv``) took 29 us, so a batch of 2 ran 4-6x slower than onnxruntime.

When ``B`` is a constant (a layer's weights), :func:`pack` lays it out once,
when the plan is built, as panels of :func:`panel_columns` columns, each
``[K, PANEL]`` and contiguous, padded with zero columns; the bias (``C``, one
value per column) is padded alike. :func:`multiply` then streams each panel
once per tile of up to :data:`TILE_ROWS` rows of ``A``: the micro-kernel (a
numba intrinsic emitting LLVM IR, as :mod:`.direct_conv` does) keeps the
tile's accumulators in registers, starting from the bias, adds
``A[m, k] * panel[k, :]`` for ``k = 0, 1, ...`` in order (``fmuladd``), applies
the Relu when asked (NaN stays NaN) and stores only the real columns. Panels
are shared between :mod:`polyhal.adapters.cpu.threads` threads once the
product is large enough to pay for waking one (:data:`MIN_WORK_PER_THREAD`).

The plan uses it for a ``Gemm`` (``alpha = 1``, ``A`` not transposed, ``C``
constant with one value per column and ``beta = 1``, or absent) and a
``MatMul`` whose ``B`` is a 2-D constant, while ``A`` has at most
:data:`MAX_ROWS` rows (beyond that BLAS is as fast or faster) and the padding
stays small (:func:`packs_compactly`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from polyhal.adapters.cpu import threads as cpu_threads
from polyhal.adapters.cpu.kernels import crew
from polyhal.adapters.cpu.kernels.simd import VECTOR_BYTES, VectorCodegen

TILE_ROWS = 4
"""Rows of ``A`` one micro-kernel call computes."""
TILE_VECTORS = 3
"""SIMD vectors of columns per row: 4 x 3 accumulators, three panel vectors and a
broadcast fill the 16 AVX2 registers (tiles of 4 x 2, 6 x 2, 3 x 3 and 3 x 4
rows x vectors were no faster at 4 rows and slower at 8)."""
MAX_ROWS = 32
"""Rows of ``A`` up to which the plan uses :func:`multiply` instead of BLAS (measured
with 2 threads: 1.1-2x faster than OpenBLAS at 32 rows, 0.8x at 64)."""
MIN_WORK_PER_THREAD = 1_250_000
"""Multiply-adds per thread below which another thread is not worth waking: a
hand-off costs about 13 us, in which one core does some 600k multiply-adds."""


def panel_columns(dtype: np.dtype) -> int:
    """Columns of one panel: the tile's vectors' lanes."""
    return TILE_VECTORS * (VECTOR_BYTES // np.dtype(dtype).itemsize)


def packs_compactly(depth: int, columns: int, dtype: np.dtype) -> bool:
    """True when packing a ``[depth, columns]`` operand adds at most as many padding
    values as it has (or at most a million): a model file's ``[10**8, 1]``
    constant is not padded to 24 columns."""
    width = panel_columns(dtype)
    padding = (-columns % width) * depth
    return padding <= max(depth * columns, 1 << 20)


@dataclass(frozen=True)
class PackedWeights:
    """A ``[K, N]`` right operand and its per-column bias, laid out for :func:`multiply`."""

    panels: np.ndarray
    """``[P, K, PANEL]``: columns ``p * PANEL ...`` of ``B``, zero-padded past ``N``."""
    bias: np.ndarray
    """``[P * PANEL]``: the bias of each column, zero-padded."""
    columns: int
    """``N``."""

    @property
    def depth(self) -> int:
        """``K``."""
        return self.panels.shape[1]


def pack(b: np.ndarray, bias: np.ndarray | None = None, transposed: bool = False
         ) -> PackedWeights:
    """Packs ``B`` (``[K, N]``, or ``[N, K]`` when ``transposed``) and ``bias`` (any
    shape that broadcasts to ``[N]``; zeros when absent)."""
    weights = b.T if transposed else b
    depth, columns = weights.shape
    width = panel_columns(b.dtype)
    count = -(-columns // width)
    panels = np.zeros((count, depth, width), b.dtype)
    for p in range(count):
        block = weights[:, p * width:(p + 1) * width]
        panels[p, :, :block.shape[1]] = block
    padded_bias = np.zeros(count * width, b.dtype)
    if bias is not None:
        padded_bias[:columns] = np.broadcast_to(bias, (columns,))
    return PackedWeights(panels, padded_bias, columns)


def _tile_kernel(rows: int) -> Any:
    """The micro-kernel intrinsic for ``rows`` rows of ``A`` by one panel.

    ``tile(a, panels, bias, out, a0, depth, p0, o0, columns, n0, valid, relu)`` computes,
    for ``r < rows``, ``bias[n0:][:PANEL] + sum over k of a[a0 + r * depth + k] *
    panels[p0 + k * PANEL:][:PANEL]`` (then the Relu when ``relu``) and stores its
    first ``valid`` values at ``out[o0 + r * columns:]``, where ``columns`` is
    ``out``'s row length (``a``, ``panels``, ``bias`` and ``out`` are flat).
    """

    @intrinsic
    def tile(typingctx, a, panels, bias, out, a0, depth, p0, o0, columns, n0, valid, relu):
        signature = types.void(a, panels, bias, out, a0, depth, p0, o0, columns, n0, valid,
                               relu)

        def codegen(context, builder, sig, args):
            a_p, panels_p, bias_p, out_p = (
                context.make_array(t)(context, builder, v).data
                for v, t in zip(args[:4], sig.args[:4], strict=True))
            a0_, depth_, p0_, o0_, columns_, n0_, valid_, relu_ = args[4:]
            ir_ = VectorCodegen(context, builder, sig.args[0].dtype)
            width = ir_.width
            slots = ir_.accumulators(rows, TILE_VECTORS, bias_p, n0_)
            with cgutils.for_range(builder, depth_) as loop:
                k = loop.index
                start = ir_.add(p0_, ir_.mul(k, ir_.const(width * TILE_VECTORS)))
                weights = [ir_.load_vector(panels_p, ir_.add(start, ir_.const(j * width)))
                           for j in range(TILE_VECTORS)]
                for r, row in enumerate(slots):
                    at = ir_.add(a0_, ir_.mul(ir_.const(r), depth_), k)
                    spread = ir_.splat(builder.load(builder.gep(a_p, [at], inbounds=True)))
                    ir_.multiply_add(row, spread, weights)
            for r, row in enumerate(slots):
                for j, slot in enumerate(row):
                    value = ir_.relu_if(builder.load(slot), relu_)
                    offset = ir_.add(o0_, ir_.const(j * width), ir_.mul(ir_.const(r), columns_))
                    ir_.store_lanes(value, out_p, offset,
                                    builder.sub(valid_, ir_.const(j * width)))
            return context.get_dummy_value()

        return signature, codegen

    return tile


_TILE_1, _TILE_2, _TILE_3, _TILE_4 = (_tile_kernel(rows) for rows in range(1, TILE_ROWS + 1))


@numba.njit(nogil=True, cache=True)
def _panels(a, panels, bias, out, first, stop, relu):  # pragma: no cover - numba
    """Panels ``first`` to ``stop`` of the product (see :func:`multiply`); ``a`` and
    ``out`` are C-contiguous ``[M, K]`` and ``[M, N]``."""
    rows, depth = a.shape
    columns = out.shape[1]
    width = panels.shape[2]
    flat_a, flat_panels, flat_out = a.reshape(-1), panels.reshape(-1), out.reshape(-1)
    full = rows - rows % TILE_ROWS
    left = rows - full
    for p in range(first, stop):
        n0 = p * width
        p0 = p * depth * width
        valid = columns - n0
        for m0 in range(0, full, TILE_ROWS):
            _TILE_4(flat_a, flat_panels, bias, flat_out, m0 * depth, depth, p0,
                    m0 * columns + n0, columns, n0, valid, relu)
        a0, o0 = full * depth, full * columns + n0
        if left == 1:
            _TILE_1(flat_a, flat_panels, bias, flat_out, a0, depth, p0, o0, columns, n0, valid,
                    relu)
        elif left == 2:
            _TILE_2(flat_a, flat_panels, bias, flat_out, a0, depth, p0, o0, columns, n0, valid,
                    relu)
        elif left == 3:
            _TILE_3(flat_a, flat_panels, bias, flat_out, a0, depth, p0, o0, columns, n0, valid,
                    relu)


def multiply(a: np.ndarray, weights: PackedWeights, out: np.ndarray, relu: bool = False
             ) -> np.ndarray:
    """``out [M, N]`` = ``a [M, K]`` @ ``B`` + bias, then the Relu when ``relu``.

    ``a`` must have ``B``'s dtype (a non-contiguous one is copied first); ``out``
    must be a C-contiguous array of that dtype. Returns ``out``.
    """
    rows, depth = a.shape
    if (depth != weights.depth or out.shape != (rows, weights.columns)
            or not out.flags.c_contiguous):
        raise ValueError(f"packed GEMM: [{rows}, {depth}] @ [{weights.depth}, "
                         f"{weights.columns}] into a {list(out.shape)} array that must be "
                         "C-contiguous")
    if rows and weights.columns:
        multiply_unchecked(np.ascontiguousarray(a), weights, out, relu)
    return out


def multiplier(rows: int, weights: PackedWeights, relu: bool
               ) -> Callable[[np.ndarray, np.ndarray], None]:
    """``(a, out)`` -> :func:`multiply_unchecked` ``(a, weights, out, relu)`` for a plan
    whose products have ``rows`` rows: where the product is too small for a second
    thread at any thread count, the kernel is called directly (one call of a small
    model then costs less)."""
    count = weights.panels.shape[0]
    panels, bias = weights.panels, weights.bias
    if min(count, rows * weights.depth * weights.columns // MIN_WORK_PER_THREAD) > 1:
        return lambda a, out: multiply_unchecked(a, weights, out, relu)
    return lambda a, out: _panels(a, panels, bias, out, 0, count, relu)


def multiply_unchecked(a: np.ndarray, weights: PackedWeights, out: np.ndarray, relu: bool
                       ) -> None:
    """:func:`multiply` for a plan that checked the operands when it was built: ``a``
    C-contiguous ``[M, K]``, ``out`` C-contiguous ``[M, N]``, with ``M`` and ``N``
    not zero."""
    count = weights.panels.shape[0]
    threads = min(cpu_threads.count(), count, a.shape[0] * a.shape[1] * weights.columns
                  // MIN_WORK_PER_THREAD)
    if threads <= 1:
        _panels(a, weights.panels, weights.bias, out, 0, count, relu)
        return
    bounds = [count * t // threads for t in range(threads + 1)]
    crew.run([functools.partial(_panels, a, weights.panels, weights.bias, out, first, stop,
                                relu)
              for first, stop in itertools.pairwise(bounds)])
