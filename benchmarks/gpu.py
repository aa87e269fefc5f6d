"""GEMM on the GPU adapter: achieved TFLOP/s per precision, against cuBLAS (CuPy).

For N in 1024, 2048, 4096 and 8192, an N x N x N MatMul compiled on ``gpu`` in
each mode: ``fp32`` (float32 graph), ``tf32`` (float32 graph, ``precision="tf32"``),
``fp16`` and ``bf16`` (float16 / bfloat16 graphs: 16-bit storage, float32
accumulation). Inputs are uploaded once; a run is one executable call
(launch + synchronize), timed after one warm-up, median of up to 10 runs
within a time budget; TFLOP/s = 2 N^3 / time. ``cuBLAS`` is ``cupy.matmul`` on
the same dtype (float32 for fp32 and tf32 - CuPy's default math mode; float16
for fp16; CuPy has no bfloat16) in the same process, and ``ratio`` =
ours / cuBLAS. ``error`` checks correctness on fresh random inputs: 64 random
output rows against float64 numpy on the same (16-bit-rounded) inputs,
normalized by sqrt(N) * rms(A) * rms(B); ``ok`` when it is under 16 unit
roundoffs of the mode (2^-24, 2^-11, 2^-11, 2^-8).

With no CUDA GPU the script says so; ``--quick`` (CI) then runs the same code
on ``gpu-sim`` at N = 16, whose timings mean nothing (every CUDA thread is a
Python thread), to keep the script working. It needs only numpy, numba-cuda
and (optionally) CuPy: ``pip install --no-deps -e .`` is enough.

    python benchmarks/gpu.py            # on a machine with a CUDA GPU (< 5 minutes)
    python benchmarks/gpu.py --quick    # CI
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import numpy as np

from polyhal.hal import CompileOptions, open_device
from polyhal.ir import DType, GraphBuilder, TensorType

MODES = {"fp32": (DType.FLOAT32, "fp32", 2.0 ** -24), "tf32": (DType.FLOAT32, "tf32", 2.0 ** -11),
         "fp16": (DType.FLOAT16, "fp32", 2.0 ** -11), "bf16": (DType.BFLOAT16, "fp32", 2.0 ** -8)}
BUDGET_S = 4.0  # timed runs per cell stop after this many seconds


def _graph(n: int, dtype: DType):
    g = GraphBuilder(f"gemm{n}")
    a = g.input("a", TensorType(dtype, (n, n)))
    b = g.input("b", TensorType(dtype, (n, n)))
    g.output(a @ b, name="c")
    return g.build()


def _time(call, budget: float = BUDGET_S, most: int = 10) -> float:
    call()  # warm-up: compiles the kernels and builds the plan
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < most and (not times or time.perf_counter() - start < budget):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _cublas(n: int, mode: str) -> float | None:
    try:
        import cupy
    except ImportError:
        return None
    if mode == "bf16":
        return None
    dtype = cupy.float16 if mode == "fp16" else cupy.float32
    a = cupy.random.standard_normal((n, n)).astype(dtype)
    b = cupy.random.standard_normal((n, n)).astype(dtype)

    def call() -> None:
        cupy.matmul(a, b)
        cupy.cuda.runtime.deviceSynchronize()

    return 2 * n ** 3 / _time(call) / 1e12


def _error(device, executable, n: int, dtype: DType, unit: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(np.float32).astype(dtype.numpy)
    b = rng.standard_normal((n, n)).astype(np.float32).astype(dtype.numpy)
    (out,) = executable.run([device.upload(a), device.upload(b)])
    c = device.download(out).astype(np.float64)
    rows = rng.choice(n, size=min(64, n), replace=False)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64[rows] @ b64
    scale = math.sqrt(n) * np.sqrt(np.mean(a64 ** 2)) * np.sqrt(np.mean(b64 ** 2))
    return float(np.abs(c[rows] - exact).max() / scale / unit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI: gpu-sim at N = 16 when "
                        "there is no GPU")
    args = parser.parse_args()
    from polyhal.adapters.gpu import GpuAdapter

    (info, *_) = GpuAdapter().probe()
    if info.available:
        address, sizes = "gpu", ([1024] if args.quick else [1024, 2048, 4096, 8192])
    else:
        print(f"no CUDA GPU here ({info.reason}): no GPU figures from this machine")
        if not args.quick:
            return
        address, sizes = "gpu-sim", [16]
    device = open_device(address, timeout=600)
    print(f"# {platform.node()} | {address}: {info.name if info.available else 'simulator'}"
          f" | {time.strftime('%Y-%m-%d')}")
    print(f"{'N':>6} {'mode':>5} {'TFLOP/s':>9} {'cuBLAS':>8} {'ratio':>6} {'error':>8} ok")
    for n in sizes:
        for mode, (dtype, precision, unit) in MODES.items():
            executable = device.compile(_graph(n, dtype), CompileOptions(precision=precision))
            rng = np.random.default_rng(n)
            buffers = [device.upload(rng.standard_normal((n, n)).astype(np.float32)
                                     .astype(dtype.numpy)) for _ in range(2)]
            runs = 10 if address == "gpu" else 1
            tflops = 2 * n ** 3 / _time(lambda e=executable, b=buffers: e.run(b),
                                        most=runs) / 1e12
            peer = _cublas(n, mode) if address == "gpu" else None
            error = _error(device, executable, n, dtype, unit, seed=n + 1)
            ratio = f"{tflops / peer:6.2f}" if peer else "   n/a"
            cublas = f"{peer:8.2f}" if peer else "     n/a"
            print(f"{n:>6} {mode:>5} {tflops:9.3f} {cublas} {ratio} {error:8.2f} "
                  f"{'yes' if error < 16 else 'NO'}", flush=True)
    device.close()


if __name__ == "__main__":
    main()
