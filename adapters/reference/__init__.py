"""The reference adapter: the reference executor as a device.

It claims every op of the registry in every dtype the op admits (the quantum
domain's only where qiskit, which reads its circuits, is installed), and computes
with the reference kernels — so its conformance run checks the suite itself.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import cache
from typing import Any

from polyhal.hal import (
    Adapter,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    DeviceInfo,
    Executable,
)
from polyhal.hal.host import HostMemoryDevice, check_known_options, check_single_device
from polyhal.ir import Graph, TensorType
from polyhal.ops import all_ops
from polyhal.reference import ReferenceExecutor


@cache
def reference_capabilities() -> Capabilities:
    """Every registered op, with every dtype it admits (quantum ops need qiskit)."""
    quantum = _importable("qiskit")
    ops = {op.qualified_name: frozenset().union(*op.type_vars.values()) for op in all_ops()
           if quantum or op.domain != "quantum"}
    return Capabilities(ops=ops, dynamic_shapes=True, precisions=frozenset({"fp32"}),
                        max_rank=32, tags=frozenset({"reference", "training"}))


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, say
        return False


class ReferenceExecutable(Executable):
    """A graph bound to the reference executor."""

    def __init__(self, device: ReferenceDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        self.executor = ReferenceExecutor(graph)

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        outputs = self.executor(*(b.handle for b in inputs))
        return [Buffer(self.device, TensorType.of(a), a) for a in outputs.values()]


class ReferenceDevice(HostMemoryDevice):
    """Host memory and the reference kernels."""

    @property
    def capabilities(self) -> Capabilities:
        return reference_capabilities()


    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return ReferenceExecutable(self, graph)


class ReferenceAdapter(Adapter):
    """The specification, as a device."""

    name = "reference"
    version = "1.0.0"
    api_version = (1, 1)
    device_class = ReferenceDevice
    executable_class = ReferenceExecutable

    def probe(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.name, 0, "reference executor (numpy)")]

    def open(self, index: int = 0, **options: Any) -> Device:
        check_single_device(self.name, index)
        check_known_options(self.name, options, ())
        return ReferenceDevice()
