"""Elementwise fusion: chains of float elementwise nodes become one numba loop.

The fusion groups are :mod:`polyhal.passes.elementwise`'s (float32 and
float64, two or more nodes, or one Erf/Gelu). Each group's expression is
generated once per expression and dtype into a module cached on disk, holding
two loops over it:

- ``flat``, an ``njit`` loop over C-contiguous operands of one shape, taken
  whenever the operands are such (numba loads it from the disk cache in a few
  milliseconds);
- a ``numba.vectorize`` ufunc, which broadcasts and follows any strides, for
  the other calls. It is built on first need: numba caches its kernel but
  builds its loop wrapper with LLVM in every process (about 60 ms a group).

Both compute the same expression, vectorized by LLVM alike
(``error_model="numpy"``: a division by zero gives inf or NaN, with no check
that would keep the loop scalar). Scalar constants are inlined as literals of
the group's dtype (a float32 group computes in float32); other inputs become
arguments. float32 Erf and Gelu use a vectorizable rational erf (max abs error
3.4e-7).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from polyhal.cache import cache_dir as polyhal_cache_dir
from polyhal.cache import private_cache_dir, writable_cache_dir
from polyhal.files import write_atomically
from polyhal.ir.graph import Graph
from polyhal.passes import elementwise
from polyhal.passes.elementwise import FusionGroup

FUSABLE_DTYPES = ("float32", "float64")
ALONE = frozenset({"Erf", "Gelu"})
"""Ops compiled even when nothing fuses with them: numpy has no ufunc for them, and
the reference's per-element ``math.erf`` is slow."""

_PRELUDE = '''\
import math

import numba
import numpy as np


@numba.njit(inline="always")
def _relu(x, zero):
    return x if x > 0 or x != x else zero


@numba.njit(inline="always")
def _max(a, b):
    return a if a > b or a != a else b


@numba.njit(inline="always")
def _min(a, b):
    return a if a < b or a != a else b


@numba.njit(inline="always")
def _log(x):
    if x > 0:
        return math.log(x)
    if x == 0:
        return -math.inf
    return math.nan


@numba.njit(inline="always")
def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


@numba.njit(inline="always")
def _floor(x):
    return np.floor(x)


@numba.njit(inline="always")
def _ceil(x):
    return np.ceil(x)


@numba.njit(inline="always")
def _pow(a, b):
    return float(a) ** float(b)


@numba.njit(inline="always")
def _erf32(x):
    # erf(x) = x * P(x^2) / Q(x^2) on [-4, 4], +-1 beyond (|erf(4)| rounds to 1 in
    # float32); a rational fit with max abs error 3.4e-7 evaluated in float32. Unlike
    # libm's erf it has no branches or calls, so LLVM vectorizes the loop (~20x faster).
    c = min(max(numba.float32(x), numba.float32(-4.0)), numba.float32(4.0))
    y = c * c
    p = numba.float32(1.974595805420869e-06)
    p = p * y + numba.float32(0.0002880826194969423)
    p = p * y + numba.float32(0.0040053062767188684)
    p = p * y + numba.float32(0.05347267313539997)
    p = p * y + numba.float32(0.19628698451634086)
    p = p * y + numba.float32(1.1283789776147115)
    q = numba.float32(3.748057566732227e-05)
    q = q * y + numba.float32(0.001216768439347448)
    q = q * y + numba.float32(0.015447767359585973)
    q = q * y + numba.float32(0.11649227769168904)
    q = q * y + numba.float32(0.5072859688271321)
    q = q * y + numba.float32(1.0)
    r = c * p / q
    return r if x == x else x  # a select, not a branch: the loop stays vectorizable
'''


def find_groups(graph: Graph) -> list[FusionGroup]:
    """The CPU's fusion groups (two or more nodes, or one of :data:`ALONE`), with
    their generated ufunc source."""
    return [_codegen(graph, group)
            for group in elementwise.find_groups(graph, FUSABLE_DTYPES, 2, ALONE)]


def _codegen(graph: Graph, group: FusionGroup) -> FusionGroup:
    lines = elementwise.group_body(graph, group)
    dtype = graph.value_type(group.output).dtype.value
    signature = f"{dtype}({', '.join([dtype] * len(group.inputs))})"
    params = ", ".join(f"a{i}" for i in range(len(group.inputs)))
    body = "\n".join(f"    {line}" for line in lines)
    # K types every literal: a float32 group computes in float32, as numpy does, and
    # stays free of float64 conversions that would halve its vector width.
    reads = ", ".join(f"a{i}[i]" for i in range(len(group.inputs)))
    group.source = (f"K = numba.{dtype}\n\n\n"
                    f"def fused({params}):\n{body}\n    return K(t{len(lines) - 1})\n\n\n"
                    f"_fused = numba.njit(inline='always')(fused)\n\n\n"
                    f"@numba.njit(nogil=True, cache=True, error_model='numpy')\n"
                    f"def flat(out, {params}):\n"
                    f"    for i in range(out.size):\n"
                    f"        out[i] = _fused({reads})\n\n\n"
                    f"def ufunc():\n"
                    f"    vectorize = numba.vectorize([{signature!r}], nopython=True, cache=True)\n"
                    f"    return vectorize(fused)\n")
    return group


class FusedKernel:
    """A group's two loops (see the module docstring): ``flat`` loaded with the module,
    the ufunc built on first need."""

    def __init__(self, module: Any) -> None:
        self.flat: Callable[..., None] = module.flat
        self._make_ufunc: Callable[[], Callable[..., np.ndarray]] = module.ufunc
        self._ufunc: Callable[..., np.ndarray] | None = None

    @property
    def ufunc(self) -> Callable[..., np.ndarray]:
        """The broadcasting ufunc (built on first use)."""
        if self._ufunc is None:
            with _lock:
                if self._ufunc is None:
                    self._ufunc = self._make_ufunc()
        return self._ufunc


_lock = threading.Lock()
_loaded: dict[str, FusedKernel] = {}


def cache_dir() -> Path:
    """Where generated kernels live: ``$POLYHAL_CACHE_DIR/cpu-kernels`` (or under
    ``~/.cache/polyhal``)."""
    return polyhal_cache_dir("cpu-kernels")


def _kernel_file(digest: str, source: str) -> Path:
    """The file of a kernel's source in the cache, or, when the cache cannot be
    written (a read-only home, a bad ``POLYHAL_CACHE_DIR``), in a folder of this
    process's own, with a warning: a cache is never a reason for a run to fail."""
    path = writable_cache_dir("cpu-kernels", "cpu") / f"fused_{digest}.py"
    if not path.exists():
        try:
            write_atomically(path, source.encode())
        except OSError as exc:  # a full disk, say, after the folder was found writable
            path = private_cache_dir("cpu-kernels", f"cpu: cannot write {path} "
                                     f"({exc.strerror or exc})") / path.name
            write_atomically(path, source.encode())
    return path


def compile_group(group: FusionGroup) -> FusedKernel:
    """The loops of ``group``: loaded from the disk cache, compiled on first use."""
    source = _PRELUDE + "\n\n" + group.source
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    with _lock:
        if digest in _loaded:
            return _loaded[digest]
        path = _kernel_file(digest, source)
        name = f"polyhal_fused_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        _loaded[digest] = FusedKernel(module)
        return _loaded[digest]


def fused_step(group: FusionGroup) -> Callable[..., np.ndarray]:
    """A function of the group's input arrays that returns its output (``out=`` honoured;
    run under the plan's ``np.errstate``): the flat loop when every array is
    C-contiguous, of the output's shape and dtype, else the ufunc."""
    kernel = compile_group(group)

    def run(*arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        first = arrays[0]
        shape, dtype = (first.shape, first.dtype) if out is None else (out.shape, out.dtype)
        if ((out is None or out.flags.c_contiguous)
                and all(a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
                        for a in arrays)):
            result = np.empty(shape, dtype) if out is None else out
            kernel.flat(result.reshape(-1), *[a.reshape(-1) for a in arrays])
            return result
        ufunc = kernel.ufunc
        return ufunc(*arrays, out=out) if out is not None else ufunc(*arrays)

    return run
