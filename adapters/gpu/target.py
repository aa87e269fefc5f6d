"""The compile target of the kernels: a real CUDA device, or numba's CUDA simulator.

Importing this module imports numba.cuda, whose mode (simulator or not) is
fixed by then (see :mod:`polyhal.simulators.gpu`). Everything that differs
between the two modes lives here, so that every kernel has one source:

- :data:`SIMULATED` and the launch shapes (:func:`grid_1d`, :data:`GEMM_TILE`):
  the simulator runs each CUDA thread as a Python thread, so it gets few
  threads, each looping over many items (:data:`MAX_BLOCKS`), and its
  interpreter a short switch interval (:data:`SIMULATOR_SWITCH_INTERVAL_S`);
  kernels are written with
  grid-stride loops and tile sizes as closure constants, so that any shape is
  correct in both modes;
- the bit casts between float32 and uint32 (libdevice on a GPU, numpy views
  in the simulator, whose libdevice functions are stubs), from which the
  bfloat16 conversions and TF32 rounding are built;
- the scalar types kernels cast with (:data:`f32`, :data:`f64`, :data:`u16`,
  :data:`u32`): numba's types on a GPU, numpy's in the simulator, where calling a
  numba type makes the same numpy cast after running an import statement (about
  1 us against 0.2 us, several times per element);
- ``gmath``: the ``math`` functions kernels call (the real module on a GPU;
  numpy ufuncs in the simulator, where Python's ``math`` raises on
  overflow, ``inf`` or a negative ``sqrt`` instead of following IEEE).
- :func:`device_function`: ``cuda.jit(device=True)`` on a GPU; in the
  simulator the plain Python function, since a simulated device function
  takes two locks on each call to swap its module's ``cuda`` global, and
  simulated threads preempted while holding them queue behind each other
  (a 12-row LayerNorm took 0.03 to 2 s). No device function here uses
  ``cuda``, so the swap has nothing to do.
- in the simulator, ``cuda.shared.array`` made safe for the threads of a
  block (:func:`polyhal.simulators.gpu.make_shared_arrays_thread_safe`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numba
import numpy as np
from numba import cuda

from polyhal.simulators.gpu import make_shared_arrays_thread_safe

_config: Any = getattr(cuda, "config", None) or numba.config
SIMULATED: bool = bool(_config.ENABLE_CUDASIM)
"""True when numba runs kernels on its CUDA simulator."""

THREADS = 2 if SIMULATED else 256
"""Threads per block of the 1-D kernels."""
MAX_BLOCKS = 2 if SIMULATED else 4096
"""Blocks of a 1-D grid at most (grid-stride loops cover the rest). The simulator starts
a Python thread per CUDA thread, so it gets 2 blocks of 2 threads at most, each covering
many items: block and thread indices and the grid-stride loops are all exercised, and a
launch pays for few thread starts. A fused kernel over 24 items took 3.3 ms as 3 blocks of
8 threads, 0.65 ms as 2 blocks of 2; the full ``fp32`` conformance of ``gpu-sim`` went from
98 to 55 s with this, the GEMM tile and switch interval below and the scalar types."""

GEMM_TILE = (8, 8, 16, 4, 4) if SIMULATED else (64, 64, 16, 4, 4)
"""``(BM, BN, BK, TM, TN)`` of the GEMM kernel: a BM x BN output tile per block,
BK-deep slabs of A and B in shared memory, TM x TN outputs per thread. The simulator's
blocks have four threads, so each ``syncthreads`` (a round of its polling loop) waits
for few, and 16-deep slabs, half the rounds of 8-deep ones."""

SIMULATOR_SWITCH_INTERVAL_S = 0.0002
"""The interpreter's switch interval in a simulator worker (Python's default: 5 ms). The
simulator runs a block's threads while a Python loop polls them for ``syncthreads``;
that loop keeps the GIL until another thread has waited a switch interval. A shorter
one (1 ms) took the ``ci`` profile's L1 and L2 from 127 s to 63 s; 0.2 ms took its GEMM
launches from 60 to about 30 ms each (0.1 ms gained little more, beside a busy core or
not). The worker process is the device's, so
:class:`~polyhal.adapters.gpu.GpuSimAdapter` sets it on open."""


if SIMULATED:
    f32, f64, u16, u32 = np.float32, np.float64, np.uint16, np.uint32
else:
    f32, f64, u16, u32 = numba.float32, numba.float64, numba.uint16, numba.uint32


def device_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """A function kernels call: a CUDA device function on a GPU, ``function`` itself in
    the simulator (see the module docstring). It must not use ``cuda``."""
    return function if SIMULATED else cuda.jit(device=True)(function)


def grid_1d(count: int) -> tuple[int, int]:
    """``(blocks, threads)`` for a grid-stride kernel over ``count`` items (>= 1 block)."""
    blocks = max(1, min(MAX_BLOCKS, -(-count // THREADS)))
    return blocks, THREADS


if SIMULATED:
    make_shared_arrays_thread_safe()
    # The simulator's numpy scalars follow IEEE, as a GPU does; quietly, as a GPU does (in
    # the simulator's threads, where np.seterr does not reach; the process is the device's).
    warnings.filterwarnings("ignore", category=RuntimeWarning)

    def _like(x: Any, value: Any) -> Any:
        return np.asarray(x).dtype.type(value)

    gmath = SimpleNamespace(
        exp=np.exp, log=np.log, log1p=np.log1p, expm1=np.expm1, tanh=np.tanh, sin=np.sin,
        cos=np.cos, sqrt=np.sqrt, erf=lambda x: _like(x, math.erf(x)), inf=math.inf,
        nan=math.nan)

    @device_function
    def as_float(bits):
        return np.uint32(bits).view(np.float32)

    @device_function
    def as_bits(value):
        return np.float32(value).view(np.uint32)
else:
    from numba.cuda import libdevice

    gmath = math

    @device_function
    def as_float(bits):
        return libdevice.int_as_float(numba.int32(bits))

    @device_function
    def as_bits(value):
        return u32(libdevice.float_as_int(f32(value)))


@device_function
def bf16_load(bits):
    """bfloat16 bits (uint16) -> float32, exactly."""
    return as_float(u32(bits) << u32(16))


@device_function
def bf16_store(value):
    """float32 -> bfloat16 bits, rounded to nearest even (NaN stays NaN)."""
    if value != value:
        return u16(0x7FC0)
    bits = as_bits(value)
    bits += u32(0x7FFF) + ((bits >> u32(16)) & u32(1))
    return u16(bits >> u32(16))


@device_function
def tf32_round(value):
    """float32 rounded to TF32 (a 10-bit mantissa), nearest even; inf and NaN kept."""
    bits = as_bits(value)
    if (bits & u32(0x7F800000)) == u32(0x7F800000):
        return f32(value)
    bits = (bits + u32(0xFFF) + ((bits >> u32(13)) & u32(1))) \
        & u32(0xFFFFE000)
    return as_float(bits)
