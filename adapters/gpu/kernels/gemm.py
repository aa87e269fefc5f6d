"""The tiled GEMM: ``out[b] = alpha * A[b] @ B[b] + beta * C`` for a batch of matrices.

Each block computes a BM x BN output tile (:data:`~..target.GEMM_TILE`): it
stages BK-deep slabs of A and B in shared memory, converted to the compute
type (and rounded to TF32 in ``tf32`` mode), and each thread accumulates a
TM x TN register tile. A and B are read through element strides, so
transposed operands cost nothing, and per-batch element offsets, so
broadcast batch dimensions share one matrix. C, when present, is read
through an index map over the (flat) output: a bias of any broadcast shape.
Out-of-range rows and columns are zero-filled in the slabs and never stored.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from numba import cuda

from polyhal.adapters.gpu.storage import Storage
from polyhal.adapters.gpu.target import GEMM_TILE, tf32_round


@cache
def gemm_kernel(a_storage: Storage, b_storage: Storage, c_storage: Storage | None,
                out_storage: Storage, tf32: bool) -> Any:
    """The kernel ``gemm(a, b, c, cmap, out, m, n, k, sam, sak, sbk, sbn, aoff, boff,
    alpha, beta)``, launched on a ``(ceil(n / BN), ceil(m / BM), batches)`` grid of
    ``(BM / TM) * (BN / TN)`` threads (:func:`launch_shape`)."""
    bm, bn, bk, tm, tn = GEMM_TILE
    tx_count, ty_count = bn // tn, bm // tm
    threads = tx_count * ty_count
    acc_type = out_storage.compute
    load_a, load_b, store = a_storage.load, b_storage.load, out_storage.store
    has_c = c_storage is not None
    load_c = c_storage.load if c_storage is not None else a_storage.load

    @cuda.jit
    def gemm(a, b, c, cmap, out, m, n, k, sam, sak, sbk, sbn, aoff, boff, alpha, beta):
        batch = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * bm
        col0 = cuda.blockIdx.x * bn
        a_slab = cuda.shared.array((bk, bm), acc_type)
        b_slab = cuda.shared.array((bk, bn), acc_type)
        acc = cuda.local.array((tm, tn), acc_type)
        for i in range(tm):
            for j in range(tn):
                acc[i, j] = acc_type(0)
        ty = tid // tx_count
        tx = tid % tx_count
        abase = aoff[batch]
        bbase = boff[batch]
        for k0 in range(0, k, bk):
            for e in range(tid, bm * bk, threads):
                r = e // bk
                kk = e % bk
                v = acc_type(0)
                if row0 + r < m and k0 + kk < k:
                    v = acc_type(load_a(a[abase + (row0 + r) * sam + (k0 + kk) * sak]))
                    if tf32:
                        v = tf32_round(v)
                a_slab[kk, r] = v
            for e in range(tid, bk * bn, threads):
                kk = e // bn
                col = e % bn
                v = acc_type(0)
                if col0 + col < n and k0 + kk < k:
                    v = acc_type(load_b(b[bbase + (k0 + kk) * sbk + (col0 + col) * sbn]))
                    if tf32:
                        v = tf32_round(v)
                b_slab[kk, col] = v
            cuda.syncthreads()
            for kk in range(bk):
                for i in range(tm):
                    av = a_slab[kk, ty + i * ty_count]
                    for j in range(tn):
                        acc[i, j] += av * b_slab[kk, tx + j * tx_count]
            cuda.syncthreads()
        obase = batch * m * n
        for i in range(tm):
            r = row0 + ty + i * ty_count
            if r < m:
                for j in range(tn):
                    col = col0 + tx + j * tx_count
                    if col < n:
                        v = alpha * acc[i, j]
                        if has_c:
                            v += beta * acc_type(load_c(c[cmap[obase + r * n + col]]))
                        out[obase + r * n + col] = store(v)

    return gemm


def launch_shape(m: int, n: int, batches: int) -> tuple[tuple[int, int, int], int]:
    """``(grid, threads)`` of one GEMM launch."""
    bm, bn, _, tm, tn = GEMM_TILE
    return (-(-n // bn), -(-m // bm), batches), (bm // tm) * (bn // tn)
