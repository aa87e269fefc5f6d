"""The neuro adapter: graphs of the snn domain run as brian2 spiking networks.

``compile`` lowers the graph to populations and synapse maps
(:mod:`~polyhal.adapters.neuro.plan`), builds them as brian2 NeuronGroups,
Synapses and monitors ordered so that no layer lags another
(:mod:`~polyhal.adapters.neuro.network`,
:mod:`~polyhal.adapters.neuro.schedule`), and prepares them on the chosen
brian2 target (:mod:`~polyhal.adapters.neuro.runner`): ``numpy`` (the
default), ``cython`` or ``cpp_standalone``. Parameters are built into the
network, so they must be graph constants; graph inputs arrive at run time.

>>> import numpy as np, polyhal
>>> from polyhal.ir import GraphBuilder, TensorType, DType
>>> from polyhal.ops import snn
>>> g = GraphBuilder("lif")
>>> x = g.input("x", TensorType(DType.FLOAT64, (4, 1, 2)))
>>> g.output(snn.lif(x, np.full(2, 1e-3), np.ones(2), np.zeros(2), np.full(2, 0.5),
...                  dt=1e-3, method="euler", reset="v_reset"), name="z")
>>> run = polyhal.compile(g.build(), device="neuro")
>>> run(np.ones((4, 1, 2)))["z"][:, 0, 0].tolist()
[1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from polyhal.adapters.neuro.models import SPIKES
from polyhal.adapters.neuro.plan import SUPPORTED_OPS, NetworkPlan, check_supported, lower
from polyhal.adapters.neuro.runner import TARGETS, Runner, runner_for
from polyhal.errors import InputBindingError, UnsupportedError
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
from polyhal.hal.host import HostMemoryDevice, check_single_device
from polyhal.ir import Graph, TensorType
from polyhal.passes import specialize


@cache
def neuro_capabilities() -> Capabilities:
    """The snn ops brian2 runs here, in float64 (brian2 computes in float64)."""
    # dynamic_shapes: compile accepts symbolic time and batch, building per binding.
    return Capabilities(ops={f"snn.{op}": ["float64"] for op in sorted(SUPPORTED_OPS)},
                        dynamic_shapes=True, tags=frozenset({"spiking"}))


def missing_for(target: str) -> str:
    """Why ``target`` cannot run here ("" when it can); cheap: nothing is imported."""
    if importlib.util.find_spec("brian2") is None:
        return "needs brian2: pip install 'polyhal[neuro]'"
    if target == "cython" and importlib.util.find_spec("Cython") is None:
        return "the cython target needs Cython: pip install cython"
    if target == "cpp_standalone" and not any(
            shutil.which(c) for c in (os.environ.get("CXX", ""), "c++", "g++", "clang++") if c):
        return "the cpp_standalone target needs a C++ compiler (c++, g++ or clang++ on PATH)"
    return ""


def _binary(array: np.ndarray) -> bool:
    """True when every value is 0 or 1 (spikes).

    Counts of two comparisons: numpy counts booleans several times faster than
    the non-zeros of a float array.
    """
    return np.count_nonzero(array == 0) + np.count_nonzero(array == 1) == array.size


@dataclass(eq=False)
class Build:
    """The networks of one shape binding: its plan and a runner per input kind.

    A graph input that reaches synapses is either spikes (0s and 1s: the relay
    adds ``w`` per spike, as brian2 code written by hand does) or currents (it
    adds ``w * x``); each kind is a network of its own, built on first use.
    """

    plan: NetworkPlan
    output_shapes: list[tuple[int, ...]]
    target: str
    runners: dict[frozenset[str], tuple[Runner, float]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when there is nothing to simulate (no steps, batch or neurons)."""
        return self.plan.steps == 0 or self.plan.batch == 0 or self.plan.neurons == 0

    def runner(self, spike_inputs: frozenset[str]) -> tuple[Runner, float]:
        """The runner for inputs where ``spike_inputs`` hold spikes, and its build time."""
        if spike_inputs not in self.runners:
            self.runners[spike_inputs] = runner_for(self.plan, self.target, spike_inputs)
        return self.runners[spike_inputs]


class NeuroExecutable(Executable):
    """A graph built as a brian2 network; each run feeds new inputs to the same network.

    A graph with concrete shapes is built when compiled; one with symbolic
    dimensions is built on first use of each binding, and kept.
    """

    def __init__(self, device: NeuroDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        check_supported(graph)
        self._builds: dict[tuple[tuple[int, ...], ...], Build] = {}
        self._lock = threading.Lock()
        self._last: tuple[Runner | None, float, float] | None = None
        if all(v.type.is_static for v in graph.inputs):
            build = self.build(tuple(tuple(int(d) for d in v.type.shape) for v in graph.inputs))
            if not build.empty:  # an snn's inputs are spikes, so that network comes first
                with self._lock:
                    build.runner(frozenset(build.plan.relayed_inputs))

    def build(self, shapes: tuple[tuple[int, ...], ...]) -> Build:
        """The network for inputs of ``shapes`` (built and cached on first use)."""
        with self._lock:
            build = self._builds.get(shapes)
            if build is None:
                bindings: dict[str, int] = {}
                for value, shape in zip(self.graph.inputs, shapes, strict=True):
                    for dim, size in zip(value.type.shape, shape, strict=True):
                        if isinstance(dim, str):
                            bindings.setdefault(dim, size)
                graph = specialize(self.graph, bindings) if bindings else self.graph
                build = Build(lower(graph), [tuple(int(d) for d in v.type.shape)
                                             for v in graph.outputs], self.device.target)
                self._builds[shapes] = build
            return build

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        if len(inputs) != len(self.graph.inputs):
            raise InputBindingError(f"neuro: the graph takes {len(self.graph.inputs)} inputs, "
                                    f"got {len(inputs)}")
        for value, buffer in zip(self.graph.inputs, inputs, strict=True):
            expected, actual = value.type, buffer.type
            if actual.dtype != expected.dtype or actual.rank != expected.rank or any(
                    isinstance(e, int) and e != a
                    for e, a in zip(expected.shape, actual.shape, strict=True)):
                raise InputBindingError(f"neuro: input {value.name!r} must be {value.type}, "
                                        f"got {buffer.type}")
        arrays = [np.asarray(b.handle) for b in inputs]
        build = self.build(tuple(a.shape for a in arrays))
        runner, seconds, recorded = None, 0.0, {}
        if not build.empty:
            spikes = frozenset(name for name in build.plan.relayed_inputs
                               if _binary(arrays[self._input_names.index(name)]))
            with self._lock:
                runner, seconds = build.runner(spikes)
            start = time.perf_counter()
            recorded = runner.run(arrays)
            self._last = (runner, seconds, time.perf_counter() - start)
        outputs = []
        for (_, root), shape in zip(build.plan.outputs, build.output_shapes, strict=True):
            if root.kind == "input":
                array = np.array(arrays[self._input_names.index(root.name)], np.float64)
            elif runner is None:
                array = np.zeros(shape)
            else:
                array = recorded[(root.name, SPIKES if root.kind == "spikes" else root.variable)]
            array = array.reshape(shape)  # a Flatten of a root changes only the shape
            outputs.append(Buffer(self.device, TensorType.of(array), array))
        return outputs

    @property
    def _input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    def profile(self) -> Profile | None:
        if self._last is None:
            return None
        runner, build_seconds, run_seconds = self._last
        counters = {} if runner is None else runner.counters()
        return Profile(stages={"compile": build_seconds, "run": run_seconds}, counters=counters)


class NeuroDevice(HostMemoryDevice):
    """brian2 on the host, generating code for one target."""

    def __init__(self, target: str = "numpy") -> None:
        self.target = target

    @property
    def capabilities(self) -> Capabilities:
        return neuro_capabilities()

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return NeuroExecutable(self, graph)


class NeuroAdapter(Adapter):
    """``neuro``: spiking networks on brian2 (targets numpy, cython, cpp_standalone)."""

    name = "neuro"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = NeuroDevice
    executable_class = NeuroExecutable

    def probe(self) -> list[DeviceInfo]:
        reason = missing_for("numpy")
        targets = [t for t in TARGETS if not missing_for(t)]
        details: dict[str, Any] = {"targets": targets}
        if not reason:
            details["brian2"] = importlib.metadata.version("brian2")
        return [DeviceInfo(self.name, 0, "brian2 spiking-network simulator", not reason, reason,
                           details=details)]

    def open(self, index: int = 0, **options: Any) -> Device:
        check_single_device(self.name, index)
        unknown = sorted(set(options) - {"target"})
        if unknown:
            raise UnsupportedError(f"neuro: unknown option(s) {', '.join(unknown)} "
                                   "(known: target)")
        target = options.get("target", "numpy")
        if target not in TARGETS:
            raise UnsupportedError(f"neuro: target {target!r} is not one of {', '.join(TARGETS)}")
        reason = missing_for(target)
        if reason:
            raise UnsupportedError(f"neuro: {reason}")
        return NeuroDevice(target)
