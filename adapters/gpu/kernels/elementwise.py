"""Elementwise kernels generated from fusion groups (:mod:`polyhal.passes.elementwise`).

A group becomes one grid-stride kernel: each thread reads its inputs (at the
same index, at index 0 for a one-element input, or through an index map for
any other broadcast), evaluates the group's body in the compute type and
stores the result once. Generated sources are compiled once per process and
cached by their text.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numba
from numba import cuda

from polyhal.adapters.gpu.storage import Storage
from polyhal.adapters.gpu.target import bf16_load, bf16_store, device_function, f32, f64, gmath


@device_function
def _relu(x, zero):
    return x if x > 0 or x != x else zero


@device_function
def _max(a, b):
    return a if a > b or a != a else b


@device_function
def _min(a, b):
    return a if a < b or a != a else b


@device_function
def _pow(a, b):
    return a ** b


@device_function
def _floor(x):
    if not abs(x) < 4503599627370496.0:  # NaN, infinities and floats without a fraction
        return x
    return x - x % 1


@device_function
def _ceil(x):
    if not abs(x) < 4503599627370496.0:
        return x
    return -((-x) - (-x) % 1)


NAMESPACE: dict[str, Any] = {
    "numba": numba, "cuda": cuda, "math": gmath, "f32": f32, "f64": f64, "bf16_load": bf16_load,
    "bf16_store": bf16_store, "_relu": _relu, "_max": _max, "_min": _min, "_pow": _pow,
    "_floor": _floor, "_ceil": _ceil, "_log": gmath.log, "_sqrt": gmath.sqrt,
    "_erf32": gmath.erf,
}
"""The names generated kernels see (see :mod:`polyhal.passes.elementwise`)."""

DIRECT, SCALAR, MAPPED = "direct", "scalar", "mapped"
"""How a kernel reads an input: at the output's index, at 0, or through an index map."""

_lock = threading.Lock()
_compiled: dict[str, Callable[..., Any]] = {}


def compile_source(source: str, name: str) -> Callable[..., Any]:
    """The kernel ``name`` defined by ``source`` (generated here, never from a model)."""
    key = hashlib.sha256(source.encode()).hexdigest()
    with _lock:
        kernel = _compiled.get(key)
        if kernel is None:
            namespace = dict(NAMESPACE)
            exec(compile(source, f"<polyhal-gpu-{key[:12]}>", "exec"), namespace)
            kernel = _compiled[key] = namespace[name]
        return kernel


def group_source(body: Sequence[str], inputs: Sequence[tuple[Storage, str]],
                 out: Storage) -> str:
    """The source of kernel ``fused(out, n, x0, m0, x1, m1, ...)`` for a group ``body``
    whose inputs have the given storages and read modes (``m<i>`` is the index map of
    a mapped input and unused otherwise)."""
    params = ", ".join(f"x{i}, m{i}" for i in range(len(inputs)))
    loads = []
    for i, (storage, mode) in enumerate(inputs):
        at = {DIRECT: "i", SCALAR: "0"}.get(mode, f"m{i}[i]")
        loads.append(f"        a{i} = K({storage.load_source.format(f'x{i}[{at}]')})")
    lines = [f"        {line}" for line in body]
    result = out.store_source.format(f"K(t{len(body) - 1})")
    return (f"K = {'f64' if out.compute is f64 else 'f32'}\n\n\n"
            f"@cuda.jit\n"
            f"def fused(out, n{', ' + params if params else ''}):\n"
            f"    for i in range(cuda.grid(1), n, cuda.gridsize(1)):\n"
            + "\n".join(loads + lines) + "\n"
            f"        out[i] = {result}\n")


def cast_source(src: Storage, dst: Storage) -> str:
    """The source of kernel ``cast(out, n, x)``: float storage ``src`` -> ``dst``."""
    compute = "f64" if f64 in (src.compute, dst.compute) else "f32"
    value = f"{compute}({src.load_source.format('x[i]')})"
    return ("@cuda.jit\n"
            "def cast(out, n, x):\n"
            "    for i in range(cuda.grid(1), n, cuda.gridsize(1)):\n"
            f"        out[i] = {dst.store_source.format(value)}\n")
