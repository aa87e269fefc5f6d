"""Fast MatMul and Gemm: BLAS through ``np.matmul``, without extra copies.

Gemm hands the transposed operands to ``np.matmul`` as views (BLAS reads them
transposed) and scales and adds in place on the product; MatMul folds the
batch axes of ``[..., M, K] @ [K, N]`` into one ``[B*M, K] @ [K, N]`` product,
one large BLAS call instead of one small call per batch element.
"""

from __future__ import annotations

import math

import numpy as np


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``core.MatMul``: numpy.matmul semantics; ``out``, when given, must be C-contiguous."""
    if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
        rows = math.prod(a.shape[:-1])  # explicit: -1 fails on empty
        flat_out = None if out is None else out.reshape(rows, b.shape[-1])
        product = np.matmul(a.reshape(rows, a.shape[-1]), b, out=flat_out)
        return product.reshape(*a.shape[:-1], b.shape[-1]) if out is None else out
    return np.matmul(a, b, out=out)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *, alpha: float,
         beta: float, transA: int, transB: int) -> np.ndarray:
    """``core.Gemm``: alpha * A' @ B' + beta * C, C broadcast unidirectionally."""
    scalar = a.dtype.type  # integer alpha/beta are whole numbers (checked by inference)
    y = np.matmul(a.T if transA else a, b.T if transB else b)
    if alpha != 1.0:  # 1 * y == y exactly
        y *= scalar(alpha)
    if c is not None:
        if beta != 1.0:  # beta * C literally (on C's own shape): beta = 0 with inf gives NaN
            c = scalar(beta) * c
        # broadcast_to rejects a C that would enlarge (M, N): the broadcast is unidirectional
        y += np.broadcast_to(c, y.shape)
    return y
