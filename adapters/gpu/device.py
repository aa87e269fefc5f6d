"""The GPU device: device-array buffers on one stream, executables specialized per shape.

numba is imported when a device opens, not when this module is (the adapter
registry imports it, and ``gpu-sim``'s parent process must stay free to
choose no simulator).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from polyhal.errors import AdapterContractError, UnsupportedError
from polyhal.hal import Buffer, Capabilities, CompileOptions, Device, Executable, Profile
from polyhal.hal.derived import DerivedConstants
from polyhal.ir import Graph, TensorType
from polyhal.passes import FUSION_RULES, apply_rules, simplify, specialize_to
from polyhal.runtime.placement import node_reason

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
"""The ``compile(..., precision=)`` modes (see :mod:`.storage`)."""


MAX_PLANS = 64
"""Plans one executable keeps (one per input shapes and shape-giving values); beyond
that the oldest is dropped, and built again if its inputs come back."""


def optimize(graph: Graph) -> Graph:
    """The GPU pipeline's graph passes (those of ``cpu``)."""
    return apply_rules(simplify(graph), FUSION_RULES)


HOST_READ = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "Split": (1,), "Squeeze": (1,),
             "Unsqueeze": (1,), "Slice": (1, 2, 3, 4), "ReduceSum": (1,), "ReduceMean": (1,),
             "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,)}
"""Inputs that give shapes, axes or counts: the host reads them to plan the launches."""


def host_read_inputs(graph: Graph) -> list[int]:
    """Positions of the graph inputs that some node reads as a shape, axes or count."""
    read = {node.inputs[i] for node in graph.nodes for i in HOST_READ.get(node.op, ())
            if i < len(node.inputs) and node.inputs[i]}
    return [i for i, value in enumerate(graph.inputs) if value.name in read]


class GpuExecutable(Executable):
    """A graph whose plans are built per concrete input shapes (and values of the inputs
    that give shapes or axes, which the plan bakes in), on first use."""

    def __init__(self, device: GpuDevice, graph: Graph, precision: str) -> None:
        self.device = device
        self.graph = graph
        self.optimized = optimize(graph)
        """``graph`` through :func:`optimize` with its shapes still symbolic: what each
        plan specializes (and optimizes again, mostly a scan)."""
        self.precision = precision
        self.host_read = host_read_inputs(self.optimized)
        self._plans: dict[Any, Any] = {}
        self._derived = DerivedConstants(self.optimized)
        """Device copies of the graph's constants, shared by the plans."""
        self._profile: Profile | None = None

    def plan_for(self, inputs: Sequence[Buffer]) -> tuple[Any, bool]:
        """The :class:`~.plan.Plan` for these inputs (built and cached on first use) and
        whether it was built now."""
        from polyhal.adapters.gpu.plan import Plan

        values = {self.optimized.inputs[i].name: self.device.download(inputs[i])
                  for i in self.host_read}
        key = (tuple(b.type.shape for b in inputs),
               tuple((v.dtype.str, v.shape, v.tobytes()) for v in values.values()))
        plan = self._plans.get(key)
        if plan is not None:
            return plan, False
        shapes = [tuple(b.type.shape) for b in inputs]
        plan = Plan(optimize(specialize_to(self.optimized, shapes, values)), self.precision,
                    self.device.stream, self._derived)
        if len(self._plans) >= MAX_PLANS:
            del self._plans[next(iter(self._plans))]
        self._plans[key] = plan
        return plan, True

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        with self.device.lock:
            start = time.perf_counter()
            plan, fresh = self.plan_for(inputs)
            built = time.perf_counter()
            launches = plan.launches
            arrays = plan.execute([b.handle for i, b in enumerate(inputs)
                                   if i not in self.host_read])
            self.device.stream.synchronize()
            done = time.perf_counter()
        self._profile = Profile(
            stages={"compile": built - start if fresh else 0.0, "run": done - built},
            counters={"kernels": float(plan.launches - launches),
                      "plans": float(len(self._plans)),
                      "constant_bytes": float(sum(a.nbytes for a in self._derived.kept()))})
        return [Buffer(self.device, TensorType(v.type.dtype, tuple(int(d) for d in
                                                                      v.type.shape)), a)
                for v, a in zip(plan.graph.outputs, arrays, strict=True)]

    def profile(self) -> Profile | None:
        return self._profile


class GpuDevice(Device):
    """One CUDA device (or the simulator): buffers are flat device arrays."""

    def __init__(self, capabilities: Capabilities) -> None:
        from numba import cuda

        self._capabilities = capabilities
        self.stream = cuda.stream()
        self.lock = threading.RLock()

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def upload(self, array: np.ndarray) -> Buffer:
        from numba import cuda

        from polyhal.adapters.gpu.storage import storage_for, to_device_layout

        ttype = TensorType.of(array)
        host = to_device_layout(array, storage_for(ttype.dtype))
        with self.lock:
            handle = cuda.to_device(host, stream=self.stream)
            self.stream.synchronize()
        return Buffer(self, ttype, handle)

    def download(self, buffer: Buffer) -> np.ndarray:
        if buffer.device is not self:
            raise AdapterContractError(f"{self.adapter.name}: buffer from another device")
        from polyhal.adapters.gpu.storage import from_device_layout

        with self.lock:
            flat = buffer.handle.copy_to_host(stream=self.stream)
            self.stream.synchronize()
        return from_device_layout(flat, buffer.type.dtype, tuple(buffer.type.shape))

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        # The precision is checked against Capabilities.precisions by CheckedDevice.
        reasons = ((n.name, node_reason(self._capabilities, graph, n)) for n in graph.nodes)
        missing = [f"{name} ({reason})" for name, reason in reasons if reason]
        if missing:
            raise UnsupportedError(f"{self.adapter.name} cannot run: {', '.join(missing)}")
        return GpuExecutable(self, graph, options.precision)
