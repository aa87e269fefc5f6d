"""``faulty``: a device that wraps any other and injects faults into it.

``open_device("faulty:N", inner="cpu", inner_options={}, error_rate=0.1, hang_rate=0.0,
crash_rate=0.0, corrupt_rate=0.0, slowdown=1.0, checksum=False, error_at=(),
seed=0)``
opens the ``inner`` device and behaves exactly like it, except that runs
raise ``DeviceError``, hang, or kill their process, at the given rates;
successful runs take ``slowdown`` times as long; and downloads come back with
a flipped bit at ``corrupt_rate`` (silently, unless ``checksum=True``, which
makes every output carry a CRC-32 that the runtime checks; see
:mod:`polyhal.simulators.faulty.plan`). The index only names the device, so
``faulty:0``, ``faulty:1``, ... can wrap different devices side by side.

The device always runs in a worker process (hangs and crashes must not take
the caller with them): a hang ends at the caller's timeout as a
``DeviceTimeoutError``, a crash as a ``DeviceCrashError``. Tests of the
runtime's recovery, ``benchmarks/multidevice.py`` and L5's fault cases use it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from polyhal import __version__
from polyhal.errors import DeviceError
from polyhal.hal import (
    Adapter,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    DeviceInfo,
    Executable,
    Profile,
    buffer_checksum,
    open_device,
)
from polyhal.hal.worker import load_adapter_class
from polyhal.ir import Graph
from polyhal.simulators.faulty.plan import FaultPlan, flip_one_bit

__all__ = ["CRASH_EXIT_CODE", "FaultPlan", "FaultyAdapter", "FaultyDevice", "FaultyExecutable"]

CRASH_EXIT_CODE = 86
"""The exit code of a worker that an injected crash ended."""


class FaultyExecutable(Executable):
    """The wrapped device's executable, run through the fault plan."""

    def __init__(self, device: FaultyDevice, inner: Executable, graph: Graph) -> None:
        self.device = device
        self.inner = inner
        self.graph = graph

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        device = self.device
        fault = device.plan.run_fault(device.runs, device.rng)
        device.runs += 1
        if fault == "crash":
            os._exit(CRASH_EXIT_CODE)
        if fault == "hang":
            while True:
                time.sleep(1.0)
        if fault == "error":
            raise DeviceError(f"{device.address}: injected fault in Executable.run")
        started = time.perf_counter()
        outputs = self.inner.run([b.handle for b in inputs])
        checksums = [buffer_checksum(device.inner.download(b)) if device.plan.checksum else None
                     for b in outputs]
        if device.plan.slowdown > 1.0:
            time.sleep((device.plan.slowdown - 1.0) * (time.perf_counter() - started))
        return [Buffer(device, b.type, b, crc) for b, crc in zip(outputs, checksums, strict=True)]

    def profile(self) -> Profile | None:
        return self.inner.profile()


class FaultyDevice(Device):
    """The ``inner`` device of a :class:`FaultPlan`, with the plan's faults."""

    def __init__(self, plan: FaultPlan, index: int) -> None:
        self.plan = plan
        self.index = index
        if plan.inner_adapter is not None:
            load_adapter_class(plan.inner_adapter, f"faulty:{index}")
        self.inner = open_device(plan.inner, **plan.inner_options)
        self.rng = np.random.default_rng([plan.seed, index, os.getpid()])
        self.runs = 0

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def upload(self, array: np.ndarray) -> Buffer:
        inner = self.inner.upload(array)
        return Buffer(self, inner.type, inner)

    def download(self, buffer: Buffer) -> np.ndarray:
        array = self.inner.download(buffer.handle)
        if self.plan.corrupt_rate and self.rng.random() < self.plan.corrupt_rate:
            return flip_one_bit(array, self.rng)
        return array

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return FaultyExecutable(self, self.inner.compile(graph, options), graph)

    def close(self) -> None:
        self.inner.close()


class FaultyAdapter(Adapter):
    """Wraps any device and injects faults (see the module docstring)."""

    name = "faulty"
    version = __version__
    device_class = FaultyDevice
    executable_class = FaultyExecutable
    always_isolate = True

    def probe(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.name, 0, "fault-injecting wrapper of another device",
                           details={"options": ", ".join(f.name for f in fields(FaultPlan))})]

    def open(self, index: int = 0, **options: Any) -> Device:
        return FaultyDevice(FaultPlan.from_options(options, f"faulty:{index}"), index)
