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

_RANGES = {"multiplier": (0, 2**31 - 1), "shift": (0, 63)}
ROUNDINGS = ("half_up", "half_even")


def _checked(name: str, values: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """``values`` as int64, broadcastable against ``x`` (a scalar or 1-D along the last
    axis), and in range."""
    if values is None:
        return np.zeros((), np.int64)
    if values.ndim > 1 or (values.ndim == 1 and (x.ndim == 0 or values.shape[0] != x.shape[-1])):
        raise ValueError(f"input {name} of shape {list(values.shape)} is neither a scalar nor "
                         f"1-D of length x.shape[-1] for x of shape {list(x.shape)}")
    if name in _RANGES:
        low, high = _RANGES[name]
        bad = (values < low) | (values > high)
        if bad.any():
            index = [int(i) for i in np.argwhere(np.atleast_1d(bad))[0]]
            value = int(np.atleast_1d(values)[tuple(index)])
            raise ValueError(f"input {name} holds {value} at {index if values.ndim else []}; "
                             f"{name} must lie in [{low}, {high}]")
    return values.astype(np.int64)


def requantize(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
               bias: np.ndarray | None = None, *, zero_point: int, rounding: str,
               relu: int) -> np.ndarray:
    """``quant.Requantize`` (see :mod:`polyhal.ops.requantize`), bit-exact."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding={rounding!r} must be one of {', '.join(ROUNDINGS)}")
    m = _checked("multiplier", multiplier, x)
    n = _checked("shift", shift, x)
    p = (x.astype(np.int64) + _checked("bias", bias, x)) * m
    n = np.broadcast_to(n, p.shape)
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
