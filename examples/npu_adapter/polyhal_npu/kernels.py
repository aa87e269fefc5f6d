"""The NPU's datapaths, computed with numpy as the hardware would round them.

float16 MatMul accumulates in float32 and rounds once; int8 MatMulInteger
accumulates in int32 and wraps; the 2:4-sparse MatMul multiplies only the
stored half of a compressed weight.
"""

from __future__ import annotations

import numpy as np

from polyhal.passes import Sparse24


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dense MatMul; half precision accumulates in float32."""
    if a.dtype == np.float16:
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    return np.matmul(a, b)


def sparse_matmul(x: np.ndarray, weight: Sparse24) -> np.ndarray:
    """``x @ W`` for a compressed 2:4 weight ``W`` of shape ``[K, N]``: each output
    sums the ``K / 2`` stored products only.

    Skipping a pruned weight skips its product, so ``inf * 0`` would not give the
    NaN a dense MatMul gives: an ``x`` with a non-finite value is multiplied
    densely instead, keeping MatMul's IEEE semantics."""
    if x.ndim == 1:
        return sparse_matmul(x[None, :], weight)[0]
    if not np.isfinite(x).all():
        from polyhal.passes import decompress_2_4

        return matmul(x, decompress_2_4(weight))
    gathered = x[..., weight.rows()]  # [..., M, K/2, N]: the x element under each value
    accumulate = np.float32 if x.dtype == np.float16 else x.dtype
    out = np.einsum("...mkn,kn->...mn", gathered.astype(accumulate),
                    weight.values.astype(accumulate))
    return out.astype(x.dtype)


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zero: np.ndarray | None = None,
                   b_zero: np.ndarray | None = None) -> np.ndarray:
    """``(a - a_zero) @ (b - b_zero)`` on the int8 unit: int32 accumulators that wrap.

    Zero points are scalars, per-row of ``a`` ([M] or [..., M, 1]) or per-column of
    ``b`` ([N] or [..., 1, N]); 1-D operands follow numpy.matmul."""
    left = (a[None, :] if a.ndim == 1 else a).astype(np.int32)
    right = (b[:, None] if b.ndim == 1 else b).astype(np.int32)
    if a_zero is not None:
        left = left - (a_zero.reshape(-1, 1) if a_zero.ndim == 1 else a_zero).astype(np.int32)
    if b_zero is not None:
        right = right - b_zero.astype(np.int32)
    with np.errstate(over="ignore"):
        out = np.matmul(left, right)  # int32 arithmetic wraps as the accumulators do
    if a.ndim == 1 and b.ndim == 1:
        return out[..., 0, 0]
    if a.ndim == 1:
        return out[..., 0, :]
    return out[..., 0] if b.ndim == 1 else out


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0), NaN propagating."""
    return np.maximum(x, x.dtype.type(0))


ELEMENTWISE = {"core.Add": np.add, "core.Mul": np.multiply, "core.Relu": relu}
"""The vector unit's ops."""
