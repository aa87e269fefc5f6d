"""``polyhal.compile``: a graph placed on devices, callable on numpy arrays."""

from __future__ import annotations

import numbers
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.errors import PolyhalError, UnsupportedError
from polyhal.hal.capabilities import PRECISIONS, Capabilities
from polyhal.hal.checked import CheckedDevice
from polyhal.hal.contract import Buffer, CompileOptions, Device, Executable, Profile
from polyhal.hal.registry import open_device
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.passes.specialize import specialize
from polyhal.reference.executor import bind_inputs
from polyhal.runtime import tracing
from polyhal.runtime.placement import Partition, Placement, decompose_for, place


class UnknownOutputError(PolyhalError, KeyError, IndexError):
    """Results asked for by a name or a position they do not have; also a ``KeyError``
    and an ``IndexError``, as a missing dict key and list index are."""

    __str__ = PolyhalError.__str__  # KeyError would quote the message


class Outputs(dict):
    """Results by output name; an ``int`` index gives them by position."""

    def __getitem__(self, key: str | int) -> np.ndarray:
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            values = list(self.values())
            if -len(values) <= key < len(values):
                return values[key]
        elif isinstance(key, str) and key in self:
            return super().__getitem__(key)
        raise UnknownOutputError(f"outputs: no output {key!r}; the outputs are "
                                 f"{', '.join(map(repr, self)) or 'none'} (positions 0 to "
                                 f"{len(self) - 1})")


@dataclass
class RunStats:
    """Counters of a compiled graph."""

    runs: int = 0
    compiles: int = 0
    transfers: int = 0


_devices: dict[tuple[str, bool], Device] = {}
_devices_lock = threading.Lock()


def shared_device(address: str, isolate: bool = False) -> Device:
    """The process-wide opened device at ``address`` (opened on first use, and again
    after someone closed it)."""
    with _devices_lock:
        key = (address, isolate)
        device = _devices.get(key)
        if device is None or (isinstance(device, CheckedDevice) and device.closed):
            device = _devices[key] = open_device(address, isolate=isolate)
        return device


class CompiledGraph:
    """A graph placed over devices; call it with arrays by position or by input name."""

    def __init__(self, graph: Graph, devices: Sequence[Device], options: CompileOptions) -> None:
        self.source = graph
        self.devices = {d.address: d for d in devices}
        self.options = options
        caps = [d.capabilities for d in devices]
        addresses = [d.address for d in devices]
        lacking = _precision_gaps(addresses, caps, options.precision)
        self.graph = graph if addresses[0] in lacking else decompose_for(graph, caps[0])
        self.placement: Placement = place(self.graph, addresses, caps, unusable=lacking)
        self.stats = RunStats()
        self._dynamic = [self.devices[part.device].capabilities.dynamic_shapes
                         for part in self.placement.partitions]
        self._steps = [(part, self.devices[part.device], [v.name for v in part.graph.inputs],
                        [v.name for v in part.graph.outputs])
                       for part in self.placement.partitions]
        self._output_names = [v.name for v in graph.outputs]
        # Checked devices' executables have run_arrays (every device polyhal opens).
        self._one_partition = len(self._steps) == 1 and isinstance(self._steps[0][1],
                                                                   CheckedDevice)
        self._cache: dict[int | tuple[int, tuple[TensorType, ...]], Executable] = {}
        self._last: list[tuple[str, Executable]] = []
        self._lock = threading.Lock()

    def _executable(self, index: int, part: Partition, types: tuple[TensorType, ...]
                    ) -> Executable:
        """Partition ``index``'s executable for inputs of ``types``: one for every input
        shape on a device with ``dynamic_shapes`` (its executable specializes as it
        needs, and keeps what it builds across shapes), else one per concrete input
        types."""
        key: int | tuple[int, tuple[TensorType, ...]] = index
        if not self._dynamic[index]:
            key = (index, types)
        executable = self._cache.get(key)
        if executable is not None:
            return executable
        with self._lock:
            if key not in self._cache:
                device = self.devices[part.device]
                graph = part.graph
                if not self._dynamic[index]:
                    bindings: dict[str, int] = {}
                    for value, given in zip(graph.inputs, types, strict=True):
                        for dim, size in zip(value.type.shape, given.shape, strict=True):
                            if isinstance(dim, str):
                                bindings.setdefault(dim, size)  # type: ignore[arg-type]
                    graph = specialize(graph, bindings)
                with tracing.span(f"compile {graph.name}", "compile", part.device, partition=index,
                                  nodes=len(graph.nodes)):
                    self._cache[key] = device.compile(graph, self.options)
                self.stats.compiles += 1
            return self._cache[key]

    def __call__(self, *args: Any, **kwargs: Any) -> Outputs:
        """Run on arrays given by position or by input name; results by name and position."""
        host, _ = bind_inputs(self.source, args, kwargs)
        if self._one_partition and not tracing.active():
            return self._call_one_partition(host)
        located: dict[str, tuple[str, Buffer]] = {}
        ran: list[tuple[str, Executable]] = []
        for index, (part, device, input_names, output_names) in enumerate(self._steps):
            buffers = [self._fetch(name, part.device, device, host, located)
                       for name in input_names]
            executable = self._executable(index, part, tuple(b.type for b in buffers))
            ran.append((part.device, executable))
            outputs = self._run(index, part, executable, buffers)
            for name, buffer in zip(output_names, outputs, strict=True):
                located[name] = (part.device, buffer)
        downloaded = {name: self._download(name, *located[name], tracing.HOST)
                      for name in self._output_names if name in located}
        return self._results(host, downloaded, ran)

    def _call_one_partition(self, host: dict[str, np.ndarray]) -> Outputs:
        """A call of a graph placed whole on one device: its executable's ``run_arrays``
        uploads, runs and downloads (in one request to an isolated device's worker)."""
        part, _, input_names, output_names = self._steps[0]
        arrays = [host[name] for name in input_names]
        executable = self._executable(0, part, tuple(map(TensorType.of, arrays)))
        outputs = executable.run_arrays(arrays)  # type: ignore[attr-defined]
        return self._results(host, dict(zip(output_names, outputs, strict=True)),
                             [(part.device, executable)])

    def _results(self, host: dict[str, np.ndarray], downloaded: dict[str, np.ndarray],
                 ran: list[tuple[str, Executable]]) -> Outputs:
        """The graph's outputs by name: those ``downloaded`` from the devices, and copies
        of the inputs and constants that are outputs too."""
        results = Outputs()
        for name in self._output_names:
            if name in downloaded:
                results[name] = downloaded[name]
            elif name in host:
                results[name] = np.array(host[name], copy=True)
            else:
                results[name] = np.array(self.source.constants[name], copy=True)
        self.stats.runs += 1
        self._last = ran
        return results

    def profiles(self) -> list[tuple[str, Profile | None]]:
        """What each partition's executable measured in the last call: ``(device
        address, Executable.profile())`` in partition order (empty before a call)."""
        return [(address, executable.profile()) for address, executable in self._last]

    def _fetch(self, name: str, address: str, device: Device, host: dict[str, np.ndarray],
               located: dict[str, tuple[str, Buffer]]) -> Buffer:
        source = tracing.HOST
        if name in located:
            source, buffer = located[name]
            if source == address:
                return buffer
            host[name] = self._download(name, source, buffer, address)
            self.stats.transfers += 1
        buffer = self._upload(name, device, host[name], source)
        located[name] = (address, buffer)
        return buffer

    # Each of these helpers records a span while a recording is active
    # (polyhal.runtime.tracing), and is the bare call otherwise. Transfer args
    # name the ends of the whole transfer: a download between partitions and
    # the upload it feeds carry the same ones.

    def _download(self, name: str, address: str, buffer: Buffer, to: str) -> np.ndarray:
        device = self.devices[address]
        if not tracing.active():
            return device.download(buffer)
        with tracing.span(f"download {name}", "transfer", address, value=name,
                          from_device=address, to_device=to) as args:
            array = device.download(buffer)
            args["bytes"] = array.nbytes
        return array

    def _upload(self, name: str, device: Device, array: np.ndarray, source: str) -> Buffer:
        if not tracing.active():
            return device.upload(array)
        with tracing.span(f"upload {name}", "transfer", device.address, value=name,
                          bytes=array.nbytes, from_device=source, to_device=device.address):
            return device.upload(array)

    def _run(self, index: int, part: Partition, executable: Executable,
             buffers: list[Buffer]) -> list[Buffer]:
        """Run one partition: while recording, as a ``run`` span (``run,fallback`` on a
        fallback device) holding the device's per-node times and counters."""
        if not tracing.active():
            return executable.run(buffers)
        name = f"run {part.graph.name}" + (" (fallback)" if part.fallback else "")
        with tracing.span(name, "run,fallback" if part.fallback else "run", part.device,
                          partition=index, nodes=len(part.graph.nodes), fallback=part.fallback):
            start = time.perf_counter()
            outputs = executable.run(buffers)
            end = time.perf_counter()
        _trace_profile(executable, part.device, index, start, end)
        return outputs


def _trace_profile(executable: Executable, lane: str, index: int, start: float,
                   end: float) -> None:
    """Record what ``executable.profile()`` measured of the run from ``start`` to
    ``end``: its per-node seconds laid out in order from ``start`` (scaled down to
    end by ``end``) as ``node`` spans, and its counters. A failing ``profile()`` is
    recorded as a ``fault`` instant: it does not fail the run."""
    try:
        profile = executable.profile()
    except PolyhalError as exc:
        tracing.instant("profile failed", "fault", lane, partition=index, error=str(exc))
        return
    if profile is None:
        return
    total = sum(profile.nodes.values())
    scale = min(1.0, (end - start) / total) if total > 0 else 0.0
    at = start
    for node, seconds in profile.nodes.items():
        until = min(at + seconds * scale, end)
        tracing.add_span(node, "node", lane, at, until, partition=index, seconds=seconds)
        at = until
    for counter, value in profile.counters.items():
        tracing.instant(counter, "counter", lane, value=value)


def _precision_gaps(addresses: Sequence[str], caps: Sequence[Capabilities], precision: str
                    ) -> dict[str, str]:
    """Why each device that lacks ``precision`` cannot run any node (by address); an
    :class:`UnsupportedError` when no device offers it."""
    gaps = {address: f"offers precisions {', '.join(sorted(c.precisions))}; {precision} is "
                     "not one of them"
            for address, c in zip(addresses, caps, strict=True) if precision not in c.precisions}
    if len(gaps) == len(addresses):
        raise UnsupportedError("compile: " + "; ".join(f"{a} {why}" for a, why in gaps.items()))
    return gaps


def device_address(device: Device, where: str) -> str:
    """The address of ``device``; a :class:`PolyhalError` naming ``where`` when it is a
    Device instance that no adapter opened (it has no address)."""
    if type(device).address is Device.address and not hasattr(device, "adapter"):
        raise PolyhalError(f"{where}: this {type(device).__name__} was not opened through "
                           "polyhal, so it has no address; pass an address such as 'cpu', or "
                           "a device from polyhal.hal.open_device")
    return device.address


def _device_list(device: Any, fallback: Any) -> list[str | Device]:
    """``device`` and the fallbacks as one list, each an address or an opened Device."""
    if not isinstance(device, str | Device):
        raise PolyhalError(f"compile: device={device!r} must be a device address (such as "
                           "'cpu') or an opened Device")
    if fallback is None:
        return [device]
    fallbacks = [fallback] if isinstance(fallback, str | Device) else fallback
    if not isinstance(fallbacks, list | tuple) or not all(
            isinstance(f, str | Device) for f in fallbacks):
        raise PolyhalError(f"compile: fallback={fallback!r} must be None, a device address "
                           "(such as 'reference'), an opened Device, or a list of them")
    return [device, *fallbacks]


def _check_distinct(addresses: Sequence[str]) -> None:
    for position, address in enumerate(addresses):
        if address in addresses[:position]:
            where = ("both the device and a fallback" if address == addresses[0]
                     else "listed twice as a fallback")
            raise UnsupportedError(f"compile: {address} is {where}; list each device once")


def compile(graph: Graph, device: str | Device = "reference",
            fallback: str | Device | Sequence[str | Device] | None = None,
            precision: str = "fp32", isolate: bool = False,
            options: dict[str, Any] | None = None) -> CompiledGraph:
    """Place ``graph`` on ``device``, falling back to ``fallback`` node by node.

    >>> import numpy as np, polyhal
    >>> from polyhal import ops
    >>> from polyhal.ir import GraphBuilder, f32
    >>> g = GraphBuilder()
    >>> x = g.input("x", f32["n"])
    >>> g.output(ops.tanh(ops.relu(x)), name="y")
    >>> run = polyhal.compile(g.build(), device="template", fallback="reference")
    >>> run.placement.fallback_count
    1
    >>> run(np.array([-1.0, 1.0], np.float32))["y"].round(3)
    array([0.   , 0.762], dtype=float32)

    ``fallback=None`` raises :class:`UnsupportedError` listing every node the
    device does not cover.
    """
    if not isinstance(graph, Graph):
        raise UnsupportedError(f"compile: expected a polyhal Graph, got {type(graph).__name__}"
                               " (read a model file with polyhal.load or load_model)")
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise UnsupportedError(f"compile: precision {precision!r} is not one of "
                               f"{', '.join(sorted(PRECISIONS))}")
    if not isinstance(isolate, bool):
        raise PolyhalError(f"compile: isolate={isolate!r} must be True or False")
    if options is not None and not isinstance(options, Mapping):
        raise PolyhalError(f"compile: options={options!r} must be a mapping of option name "
                           "to value, or None")
    for key in options or {}:
        if not isinstance(key, str):
            raise PolyhalError(f"compile: options={options!r}: option name {key!r} "
                               f"({type(key).__name__}) is not a string")
    specs = _device_list(device, fallback)
    with tracing.span(f"place {graph.name}", "compile", tracing.HOST) as args:
        devices = [d if isinstance(d, Device) else shared_device(d, isolate) for d in specs]
        _check_distinct([device_address(d, "compile") for d in devices])
        compiled = CompiledGraph(graph, devices, CompileOptions(precision, dict(options or {})))
        args.update(devices=list(compiled.devices), partitions=len(compiled.placement.partitions),
                    fallbacks=compiled.placement.fallback_count)
    return compiled
