"""The epilogue of a BLAS product: a bias row added and a Relu, in one pass.

numpy does them as two passes over the product, a broadcast add and then
``np.maximum`` (slow for its NaN handling): 85 us on a 256 x 512 float32
product here, where this loop takes 9. The arithmetic is numpy's: ``y + c`` in
the product's dtype, and ``max(v, 0)`` with NaN kept and -0.0 made 0.0.
"""

from __future__ import annotations

import numba
import numpy as np

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""The dtypes the loop takes (numba has no float16 arithmetic on the CPU)."""


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _rows(y, row, add, relu):  # pragma: no cover - numba
    rows, columns = y.shape
    for i in range(rows):
        for j in range(columns):
            v = y[i, j] + row[j] if add else y[i, j]
            # v > 0 or NaN (unordered) keeps v; anything else, -0.0 included, is 0
            y[i, j] = v if not relu or v > 0 or v != v else 0.0


def add_row_and_relu(y: np.ndarray, c: np.ndarray | None, relu: bool) -> bool:
    """In place: ``y += c`` (``c`` one value per column of the 2-D ``y``: shape
    ``(N,)``, ``(1, N)``, or one value), then ``max(y, 0)`` when ``relu``. Returns False,
    having done nothing, where the loop does not apply (another dtype or layout, a
    ``c`` that is not a row of ``y``'s dtype): the caller then uses numpy."""
    if y.ndim != 2 or y.dtype not in DTYPES or not y.flags.c_contiguous:
        return False
    columns = y.shape[1]
    if c is None:
        if not relu:
            return True
        row = np.zeros(0, y.dtype)
    elif c.dtype != y.dtype or c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1):
        return False
    elif c.size == columns:
        row = np.ascontiguousarray(c.reshape(columns))
    elif c.size == 1:
        row = np.full(columns, c.reshape(()), y.dtype)
    else:
        return False
    _rows(y, row, c is not None, relu)
    return True
