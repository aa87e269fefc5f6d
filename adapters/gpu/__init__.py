"""The GPU adapters: numba.cuda kernels on a real CUDA device (``gpu``) or on numba's
CUDA simulator (``gpu-sim``), from one code path.

``compile`` optimizes the graph once, with its shapes still symbolic (the
``cpu`` passes: folding, CSE, DCE, MatMul+Add -> Gemm, Conv+BatchNorm
folding); the first run with each concrete input shape specializes the
optimized graph, runs the passes again for what the shapes make possible,
and lowers it to a
:class:`~.plan.Plan` of kernel launches: generated kernels for fusion
groups, a tiled shared-memory GEMM for MatMul/Gemm/Conv, row kernels for
reductions, Softmax and LayerNormalization, and index-map gathers for data
movement. ``compile(..., precision=)`` takes ``fp32``, ``tf32``, ``fp16``
or ``bf16`` (see :mod:`.storage`).

The simulator mode must be chosen before numba is imported, so ``gpu-sim``
devices always run in a worker process that chooses it
(:mod:`polyhal.simulators.gpu`); ``gpu`` runs in the caller's process, on a
real device, and ``polyhal devices`` says why when there is none. Nothing
here imports numba until a device opens.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import sys
from functools import cache
from typing import Any

from polyhal.adapters.gpu.device import PRECISIONS, GpuDevice, GpuExecutable
from polyhal.errors import DeviceError, UnsupportedError
from polyhal.hal import Adapter, Capabilities, Device, DeviceInfo
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ops import get_op
from polyhal.simulators import gpu as simulator

FLOAT_OPS = (
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu",
    "Reciprocal", "Sin", "Cos", "Floor", "Ceil", "Softplus", "Pow", "Max", "Min", "Erf",
    "LeakyRelu", "Elu", "Gelu", "MatMul", "Gemm", "Conv", "MaxPool", "Softmax", "LogSoftmax",
    "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "GlobalAveragePool", "GlobalMaxPool")
"""Ops computed in float dtypes only."""
MOVED_OPS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
             "Expand", "Tile", "Split", "Concat", "Gather")
"""Ops that move elements: every dtype they admit."""


@cache
def gpu_capabilities() -> Capabilities:
    """What the GPU adapters claim (both the same: one code path)."""
    ops: dict[str, frozenset[DType]] = {}
    for name in FLOAT_OPS:
        op = get_op(name)
        ops[op.qualified_name] = frozenset().union(*op.type_vars.values()) & FLOAT_TYPES
    for name in MOVED_OPS:
        op = get_op(name)
        ops[op.qualified_name] = frozenset().union(*op.type_vars.values())
    return Capabilities(ops=ops, dynamic_shapes=True, max_rank=32,
                        precisions=frozenset(PRECISIONS),
                        tags=frozenset({"fused"}))


def _numba_missing() -> str:
    if importlib.util.find_spec("numba") is None:
        return "needs numba: pip install 'polyhal[gpu]'"
    return ""


class GpuAdapter(Adapter):
    """``gpu``: a CUDA device through numba.cuda, in the caller's process."""

    name = "gpu"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = GpuDevice
    executable_class = GpuExecutable

    def probe(self) -> list[DeviceInfo]:
        reason = _numba_missing()
        if not reason and simulator.requested():
            reason = (f"{simulator.SIMULATOR_ENV} is set in this process, so numba has no "
                      "real CUDA target here: use gpu-sim")
        if not reason and ctypes.util.find_library("cuda") is None and not os.path.exists(
                "/dev/nvidiactl"):
            reason = "no CUDA driver (libcuda) on this machine: gpu-sim simulates one"
        if reason:
            return [DeviceInfo(self.name, 0, "CUDA GPU", False, reason)]
        from numba import cuda

        if not cuda.is_available():
            return [DeviceInfo(self.name, 0, "CUDA GPU", False,
                               "numba finds no usable CUDA device (driver or toolkit missing)")]
        return [DeviceInfo(self.name, i, gpu.name.decode() if isinstance(gpu.name, bytes)
                           else str(gpu.name), True, "",
                           details={"compute_capability": ".".join(map(str,
                                                                       gpu.compute_capability))})
                for i, gpu in enumerate(cuda.gpus)]

    def open(self, index: int = 0, **options: Any) -> Device:
        _no_options(self.name, options)
        from numba import cuda

        from polyhal.adapters.gpu import target

        if target.SIMULATED:
            raise DeviceError("gpu: numba is in CUDA simulator mode in this process; the "
                              "simulator is the gpu-sim adapter")
        if not cuda.is_available():
            raise DeviceError("gpu: numba finds no usable CUDA device")
        count = len(cuda.gpus)
        if not 0 <= index < count:
            raise UnsupportedError(f"gpu: no device {index} ({count} found)")
        cuda.select_device(index)
        return GpuDevice(gpu_capabilities())


class GpuSimAdapter(Adapter):
    """``gpu-sim``: the same kernels on numba's CUDA simulator, always in a worker."""

    name = "gpu-sim"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = GpuDevice
    executable_class = GpuExecutable
    worker_env = simulator.WORKER_ENV
    always_isolate = True

    def probe(self) -> list[DeviceInfo]:
        reason = _numba_missing()
        return [DeviceInfo(self.name, 0, "numba CUDA simulator", not reason, reason)]

    def open(self, index: int = 0, **options: Any) -> Device:
        _no_options(self.name, options)
        if index != 0:
            raise UnsupportedError(f"gpu-sim has one device (index 0), not {index}")
        from polyhal.adapters.gpu import target

        if not target.SIMULATED:
            raise DeviceError("gpu-sim runs in a worker process that enables numba's CUDA "
                              "simulator; open it with polyhal.hal.open_device('gpu-sim')")
        sys.setswitchinterval(target.SIMULATOR_SWITCH_INTERVAL_S)
        return GpuDevice(gpu_capabilities())


def _no_options(name: str, options: dict[str, Any]) -> None:
    if options:
        raise UnsupportedError(f"{name}: unknown option(s) {', '.join(sorted(options))} "
                               "(it takes none)")

