"""The ops the FPGA runs, in the graph's terms, on top of the driver.

MatMulInteger follows numpy.matmul semantics (1-D operands, broadcast batch
dimensions): a batch that shares one B is flattened into the rows of a single
GEMM; other batches run one GEMM each. Zero points are applied by the host as
the usual correction terms (``- za * colsum(B) - rowsum(A) * zb + K za zb``),
so the array only ever multiplies int8 by int8.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from polyhal.adapters.fpga.driver import Driver, Requant
from polyhal.ops.requantize import out_of_range


def requant_of(attrs: Mapping[str, object], multiplier: np.ndarray, shift: np.ndarray,
               bias: np.ndarray | None, columns: int) -> Requant:
    """The Requantize parameters, checked and broadcast to ``columns`` columns."""
    for name, values in (("multiplier", multiplier), ("shift", shift)):
        problem = out_of_range(name, np.asarray(values))
        if problem:
            raise ValueError(problem)

    def per_column(values: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(values, np.int64).reshape(-1), (columns,)
                               ).astype(np.int32)

    return Requant(per_column(multiplier), per_column(shift),
                   None if bias is None else per_column(bias), int(attrs["zero_point"]),
                   str(attrs["rounding"]), bool(attrs["relu"]))


def requantize(driver: Driver, x: np.ndarray, requant: Requant) -> np.ndarray:
    """Requantize ``x`` (any rank; parameters along the last axis)."""
    columns = x.shape[-1] if x.ndim else 1
    flat = x.reshape(-1, columns) if x.size else np.zeros((0, columns), np.int32)
    return driver.requantize(flat, requant).reshape(x.shape)


def matmul_integer(driver: Driver, a: np.ndarray, b: np.ndarray,
                   a_zero: np.ndarray | None = None, b_zero: np.ndarray | None = None,
                   requant: Requant | None = None) -> np.ndarray:
    """``(a - a_zero) @ (b - b_zero)`` in int32 (int8 when ``requant`` is given: then
    the zero points must be absent or zero)."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    (m, k), n = a2.shape[-2:], b2.shape[-1]
    if b2.ndim == 2:  # one B for every batch: all rows in one GEMM
        rows = np.broadcast_to(a2, (*batch, m, k)).reshape(math.prod(batch) * m, k)
        out = driver.gemm(rows, b2, requant).reshape(*batch, m, n)
    else:
        count = math.prod(batch)
        a3 = np.broadcast_to(a2, (*batch, m, k)).reshape(count, m, k)
        b3 = np.broadcast_to(b2, (*batch, k, n)).reshape(count, k, n)
        out = np.stack([driver.gemm(x, y, requant) for x, y in zip(a3, b3, strict=True)]
                       ).reshape(*batch, m, n) if a3.shape[0] else np.zeros(
                           (*batch, m, n), np.int8 if requant else np.int32)
    out = _zero_point_terms(out, a2, b2, a_zero, b_zero)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def _zero_point_terms(out: np.ndarray, a: np.ndarray, b: np.ndarray,
                      a_zero: np.ndarray | None, b_zero: np.ndarray | None) -> np.ndarray:
    za = _as_rows(a_zero, a)
    zb = _as_columns(b_zero, b)
    if za is None and zb is None:
        return out
    k = a.shape[-1]
    total = out.astype(np.int64)
    if za is not None:
        total -= za * b.astype(np.int64).sum(axis=-2, keepdims=True)
    if zb is not None:
        total -= a.astype(np.int64).sum(axis=-1, keepdims=True) * zb
    if za is not None and zb is not None:
        total += k * za * zb
    return total.astype(np.int32)  # the int32 sum wraps, as the device's does


def _as_rows(zero: np.ndarray | None, a: np.ndarray) -> np.ndarray | None:
    """A's zero point shaped [..., M, 1] (None when absent or all zero)."""
    if zero is None or not np.any(zero):
        return None
    z = np.asarray(zero, np.int64)
    return z.reshape(-1, 1) if z.ndim == 1 else z


def _as_columns(zero: np.ndarray | None, b: np.ndarray) -> np.ndarray | None:
    """B's zero point shaped [..., 1, N] (None when absent or all zero)."""
    if zero is None or not np.any(zero):
        return None
    return np.asarray(zero, np.int64)
