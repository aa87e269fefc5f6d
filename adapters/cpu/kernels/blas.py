"""Accumulating GEMM (``C = A @ B + beta * C``) on the BLAS numpy itself uses.

``np.matmul`` cannot accumulate into its output, and a second BLAS library (say
SciPy's) is not an option: two OpenBLAS thread pools that take turns spin
against each other, and a matmul after a call into the other pool was measured
at 15x its own time here. So the CBLAS ``?gemm`` symbol is looked up, through
ctypes, in the OpenBLAS that numpy's wheel bundles (found by
:mod:`threadpoolctl`, the library the adapter already sets the thread count of).
Where numpy uses some other BLAS, :func:`gemm_into` is ``None`` and callers keep
to ``np.matmul``.

The call releases the GIL, as ``np.matmul`` does; operands are row-major
matrices whose rows may be spaced apart (a leading dimension), which lets a
caller hand BLAS a shifted window of a larger buffer without a copy.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

_ROW_MAJOR, _NO_TRANS = 101, 111
_SYMBOLS = (("scipy_cblas_{}gemm64_", ctypes.c_int64), ("cblas_{}gemm64_", ctypes.c_int64),
            ("scipy_cblas_{}gemm", ctypes.c_int32), ("cblas_{}gemm", ctypes.c_int32))
"""CBLAS names by the integer width they take: scipy-openblas (numpy's wheels, ILP64
or LP64), then plain OpenBLAS builds."""

GemmInto = Callable[[np.ndarray, np.ndarray, np.ndarray, float], None]


@functools.cache
def _numpy_blas() -> ctypes.CDLL | None:
    """The OpenBLAS shipped inside numpy's wheel, if that is what numpy runs on."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    numpy_dir = Path(np.__file__).resolve().parent.parent
    for library in threadpool_info():
        path = Path(library.get("filepath", ""))
        if (library.get("internal_api") == "openblas"
                and path.resolve().parent.name.startswith("numpy")
                and path.resolve().parent.parent == numpy_dir):
            try:
                return ctypes.CDLL(str(path))
            except OSError:
                return None
    return None


@functools.cache
def gemm_into(dtype: np.dtype) -> GemmInto | None:
    """``f(a, b, c, beta)``: ``c = a @ b + beta * c`` in place, for float32/float64
    ``a [M, K]``, ``b [K, N]``, ``c [M, N]`` whose last axes are contiguous (rows may
    be spaced apart); ``None`` where numpy's BLAS cannot be reached."""
    dtype = np.dtype(dtype)
    letter = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}.get(dtype)
    library = _numpy_blas()
    if letter is None or library is None:
        return None
    scalar = ctypes.c_float if letter == "s" else ctypes.c_double
    found = next(((getattr(library, pattern.format(letter)), integer)
                  for pattern, integer in _SYMBOLS
                  if hasattr(library, pattern.format(letter))), None)
    if found is None:
        return None
    function, integer = found
    function.restype = None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer,
                         scalar, ctypes.c_void_p, integer, ctypes.c_void_p, integer, scalar,
                         ctypes.c_void_p, integer]
    size = dtype.itemsize

    def call(a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float) -> None:
        (m, k), n = a.shape, b.shape[1]
        if not (a.dtype == b.dtype == c.dtype == dtype and b.shape[0] == k
                and c.shape == (m, n)):
            raise ValueError(f"gemm_into: {a.shape} @ {b.shape} -> {c.shape}, "
                             f"dtypes {a.dtype}, {b.dtype}, {c.dtype}")
        for name, array in (("a", a), ("b", b), ("c", c)):
            if array.strides[1] != size or array.strides[0] < array.shape[1] * size:
                raise ValueError(f"gemm_into: {name} needs contiguous rows, strides "
                                 f"{array.strides}")
        if not c.flags.writeable:
            raise ValueError("gemm_into: c is read-only")
        if m == 0 or n == 0:
            return
        function(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a.ctypes.data,
                 a.strides[0] // size, b.ctypes.data, b.strides[0] // size, beta,
                 c.ctypes.data, c.strides[0] // size)

    return call
