"""``quant.Requantize`` in vectorized int64 arithmetic.

The reference kernel computes in Python integers (exact, and slow); here every
step fits int64 exactly: ``|x + bias| <= 2^32`` and ``multiplier < 2^31``, so
``|p| < 2^63``; ``p >> shift`` is numpy's arithmetic shift, a floor; the
remainder ``p - (f << shift)`` lies in ``[0, 2^shift)`` (``f << 63`` is at most
``-2^63`` in magnitude, and the subtraction's wrap-around gives the exact
remainder); it is compared with ``2^(shift - 1)`` rather than doubled, so
nothing overflows at ``shift = 63``.
"""

from __future__ import annotations

import numpy as np

from polyhal.ops.requantize import check_inputs


def requantize(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
               bias: np.ndarray | None = None, *, zero_point: int, rounding: str,
               relu: int) -> np.ndarray:
    """``quant.Requantize`` (see :mod:`polyhal.ops.requantize`), bit-exact."""
    check_inputs(x, multiplier, shift, bias, rounding)
    s = x.astype(np.int64) + (0 if bias is None else bias.astype(np.int64))
    p = s * multiplier.astype(np.int64)
    n = np.broadcast_to(shift.astype(np.int64), p.shape)
    with np.errstate(over="ignore"):
        f = p >> n
        r = p - (f << n)
    half = np.left_shift(np.int64(1), np.maximum(n - 1, 0))
    rounds = n > 0
    up = rounds & (r > half)
    tie = rounds & (r == half)
    up |= tie if rounding == "half_up" else tie & (f & 1 == 1)
    low = zero_point if relu else -128
    return np.clip(f + up + zero_point, low, 127).astype(np.int8)
