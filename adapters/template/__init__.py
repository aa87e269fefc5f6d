"""The template adapter: the smallest correct adapter, to copy when bringing a device.

It "runs" four ops with numpy. A real adapter keeps this shape and replaces
the numpy calls with work on its device: copies in ``upload``/``download``,
code generation in ``compile``, a launch in ``run``.
"""

from __future__ import annotations

from collections.abc import Sequence
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
)
from polyhal.ir import Graph

# What this device computes, per op: one numpy function each. A node is run by
# looking its op up here, so this table *is* the device's instruction set.
KERNELS = {
    "core.Add": np.add,
    "core.Mul": np.multiply,
    "core.Relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "core.MatMul": np.matmul,
}

# The claim: the conformance suite generates a case for every op x dtype here,
# and the runtime places exactly these nodes on this device.
CAPABILITIES = Capabilities(
    ops={op: ["float32", "float64"] for op in KERNELS},
    dynamic_shapes=True,  # numpy handles any shape, so symbolic graphs compile as they are
)


class TemplateExecutable(Executable):
    """A compiled graph: here, the node list with each node's kernel resolved."""

    def __init__(self, device: TemplateDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        # Resolve every kernel now, so that `run` does no lookups.
        self.steps = [(device.kernels[node.qualified_op], node) for node in graph.nodes]

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        # Values by name: graph inputs, then constants, then each node's outputs.
        env: dict[str, Any] = {v.name: b.handle for v, b in zip(self.graph.inputs, inputs,
                                                                strict=True)}
        env.update(self.graph.constants)
        for kernel, node in self.steps:
            with np.errstate(all="ignore"):  # inf and NaN results are IEEE-correct, not errors
                result = kernel(*(env[name] for name in node.inputs))
            # numpy returns 0-d results as scalars: keep them arrays.
            env[node.outputs[0].name] = np.asarray(result)
        return [self.device.upload(env[v.name]) for v in self.graph.outputs]


class TemplateDevice(Device):
    """One template device. Buffers hold numpy arrays: 'device memory' is host memory."""

    kernels = KERNELS

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def upload(self, array: np.ndarray) -> Buffer:
        # Copy: the caller may change its array after uploading.
        from polyhal.ir import TensorType

        return Buffer(self, TensorType.of(array), np.array(array, copy=True))

    def download(self, buffer: Buffer) -> np.ndarray:
        return np.array(buffer.handle, copy=True)

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        # Refuse what the device cannot run, naming every offending node: the
        # runtime then places those nodes elsewhere (or reports them).
        missing = [f"{n.name} ({n.qualified_op})" for n in graph.nodes
                   if n.qualified_op not in self.kernels]
        if missing:
            raise UnsupportedError(f"template cannot run: {', '.join(missing)}")
        return TemplateExecutable(self, graph)


class TemplateAdapter(Adapter):
    """The adapter: names the family and opens devices."""

    name = "template"
    version = "1.0.0"
    api_version = (1, 1)  # the HAL contract versions this adapter speaks
    device_class = TemplateDevice
    executable_class = TemplateExecutable

    def probe(self) -> list[DeviceInfo]:
        # Cheap: no device is started to answer this.
        return [DeviceInfo(self.name, 0, "template (numpy on the host)")]

    def open(self, index: int = 0, **options: Any) -> Device:
        # Refuse what you do not understand: a misspelt option must not pass silently.
        if index != 0:
            raise UnsupportedError(f"template has one device (index 0), not {index}")
        if options:
            raise UnsupportedError(f"template: unknown option(s) {', '.join(sorted(options))} "
                                   "(known: none)")
        return TemplateDevice()
