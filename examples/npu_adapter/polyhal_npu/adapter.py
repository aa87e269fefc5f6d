"""The NPU adapter: the HAL classes over the kernels and the cycle model."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.errors import UnsupportedError
from polyhal.hal import (
    Adapter,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    DeviceInfo,
    Executable,
    Profile,
)
from polyhal.ir import Graph, Node, TensorType
from polyhal.passes import Sparse24, compress_2_4, is_2_4_sparse
from polyhal.runtime.placement import node_reason
from polyhal_npu import cost, kernels
from polyhal_npu.cost import NodeCost, NpuConfig

FLOATS = ["float16", "float32"]
CAPABILITIES = Capabilities(
    ops={"core.MatMul": FLOATS, "core.Add": FLOATS, "core.Mul": FLOATS, "core.Relu": FLOATS,
         "core.MatMulInteger": ["int8"]},
    dynamic_shapes=True,
    # sparse-2:4: conformance level L4-sparse grades the sparse MatMul path
    tags=frozenset({"sparse-2:4", "int8", "fp16"}),
)


@dataclass
class _Step:
    """One node as the device runs it: the kernel, and the cost model of its launch."""

    node: Node
    kernel: Callable[..., np.ndarray]
    cost: Callable[[list[np.ndarray], np.ndarray], NodeCost]
    sparse_weight: Sparse24 | None = None


class NpuExecutable(Executable):
    """A graph planned for the NPU: 2:4-sparse MatMul weights are held compressed."""

    def __init__(self, device: NpuDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        self.sparse_weights: dict[str, Sparse24] = {}
        """Constants held in the compressed 2:4 form, by name."""
        self.steps = [self._plan(node) for node in graph.nodes]
        # Device memory: the constants the steps read, with 2:4 weights only compressed.
        needed = {name for step in self.steps
                  for name in (step.node.inputs[:1] if step.sparse_weight else step.node.inputs)}
        needed |= {v.name for v in graph.outputs}
        self.constants = {name: np.array(value) for name, value in graph.constants.items()
                          if name in needed}
        self._last: Profile | None = None
        self._lock = threading.Lock()

    def _plan(self, node: Node) -> _Step:
        config = self.device.config
        op = node.qualified_op
        if op in kernels.ELEMENTWISE:
            def vector(args: list[np.ndarray], out: np.ndarray) -> NodeCost:
                return cost.vector_cost(config, out.size, sum(map(cost.nbytes, args)),
                                        out.nbytes)
            return _Step(node, kernels.ELEMENTWISE[op], vector)
        weight_name = node.inputs[1] if len(node.inputs) > 1 else ""
        weight = self.graph.constants.get(weight_name)
        if (op == "core.MatMul" and weight is not None and weight.ndim == 2
                and is_2_4_sparse(weight)):
            packed = self.sparse_weights.setdefault(weight_name, compress_2_4(weight))
            return _Step(node, lambda x: kernels.sparse_matmul(x, packed),
                         self._matmul_cost(packed), packed)
        kernel = kernels.matmul if op == "core.MatMul" else kernels.matmul_integer
        return _Step(node, kernel, self._matmul_cost(None))

    def _matmul_cost(self, packed: Sparse24 | None
                     ) -> Callable[[list[np.ndarray], np.ndarray], NodeCost]:
        """The cost of a MatMul; ``packed``: its weight, held compressed."""
        config = self.device.config

        def matmul(args: list[np.ndarray], out: np.ndarray) -> NodeCost:
            a = args[0]
            b_shape = packed.shape if packed is not None else args[1].shape
            k = a.shape[-1]
            m = a.shape[-2] if a.ndim > 1 else 1
            n = b_shape[-1] if len(b_shape) > 1 else 1
            batch = out.size // max(m * n, 1)
            # a non-finite x runs densely (kernels.sparse_matmul), reading the weight dense
            sparse = packed is not None and bool(np.isfinite(a).all())
            if packed is None:
                weight_bytes = args[1].nbytes
            else:
                weight_bytes = packed.nbytes if sparse else int(np.prod(b_shape)) * a.itemsize
            return cost.matmul_cost(config, a.dtype.name, batch, m, k, n,
                                    a.nbytes + weight_bytes, out.nbytes, sparse=sparse)
        return matmul

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        started = time.perf_counter()
        env: dict[str, np.ndarray] = {v.name: b.handle for v, b in zip(
            self.graph.inputs, inputs, strict=True)}
        env.update(self.constants)
        costs = []
        for step in self.steps:
            names = step.node.inputs[:1] if step.sparse_weight else step.node.inputs
            args = [env[name] if name else None for name in names]
            with np.errstate(all="ignore"):  # inf and NaN results are IEEE-correct
                out = np.asarray(step.kernel(*args))
            env[step.node.outputs[0].name] = out
            costs.append(step.cost([a for a in args if a is not None], out))
        outputs = [self.device.upload(env[v.name]) for v in self.graph.outputs]
        profile = Profile(stages={"run": time.perf_counter() - started},
                          nodes={s.node.name: c.cycles / self.device.config.clock_hz
                                 for s, c in zip(self.steps, costs, strict=True)},
                          counters=cost.total(costs, self.device.config))
        with self._lock:
            self._last = profile
        return outputs

    def profile(self) -> Profile | None:
        """The last run: modelled seconds per node, and counters ``cycles``, ``macs``,
        ``sparse_macs``, ``skipped_macs``, ``vector_ops``, ``bytes``, ``modelled_s``."""
        with self._lock:
            return self._last


class NpuDevice(Device):
    """One simulated NPU; its buffers hold numpy arrays."""

    def __init__(self, config: NpuConfig) -> None:
        self.config = config

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def upload(self, array: np.ndarray) -> Buffer:
        return Buffer(self, TensorType.of(array), np.array(array, copy=True))

    def download(self, buffer: Buffer) -> np.ndarray:
        return np.array(buffer.handle, copy=True)

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        missing = [f"{n.name}: {why}" for n in graph.nodes
                   if (why := node_reason(CAPABILITIES, graph, n)) is not None]
        if missing:
            raise UnsupportedError(f"npu cannot run: {'; '.join(missing)}")
        return NpuExecutable(self, graph)


class NpuAdapter(Adapter):
    """A simulated AI accelerator: int8/float16/float32 matrix unit with 2:4 sparsity."""

    name = "npu"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = NpuDevice
    executable_class = NpuExecutable

    def probe(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.name, 0, "simulated NPU (int8/fp16 matrix unit, 2:4 sparse)")]

    def open(self, index: int = 0, **options: Any) -> Device:
        """Open the NPU; options override :class:`NpuConfig` fields (``clock_hz``, ...)."""
        if index != 0:
            raise UnsupportedError(f"npu has one device (index 0), not {index}")
        return NpuDevice(NpuConfig.from_options(options))
