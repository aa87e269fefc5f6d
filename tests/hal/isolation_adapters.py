"""Adapters for the isolation tests, at module level so a spawned worker can import them.

``test-faulty`` is the template device whose executable misbehaves on cue, read
from the first element of its first input: ``13`` exits the process with code 3,
``42`` loops forever, ``-1`` raises ``ValueError``, ``-2`` raises
``ExecutionError``, ``-3`` raises an exception that cannot be pickled, ``-4`` raises
:class:`FaultyUnsupported`, ``-5`` raises a class the caller cannot import. Any other
value runs normally, so one executable can both work and fail.

``test-env`` declares ``worker_env`` and reports what its worker saw as
capability tags. ``test-slow-open`` is the template device taking
``open_seconds`` (an ``Adapter.open`` option) to open. ``test-no-room`` is the
template device whose ``upload`` runs out of memory for arrays of more than
``NO_ROOM_ABOVE`` elements.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from polyhal.adapters.template import (
    CAPABILITIES,
    TemplateAdapter,
    TemplateDevice,
    TemplateExecutable,
)
from polyhal.errors import ExecutionError, UnsupportedError
from polyhal.hal import Buffer, Capabilities, CompileOptions, Device, Executable, Profile
from polyhal.ir import Graph

CRASH, HANG, RAISE, EXECUTION_ERROR, UNPICKLABLE = 13.0, 42.0, -1.0, -2.0, -3.0
NO_ROOM_ABOVE = 4
OWN_ERROR, LOCAL_ERROR = -4.0, -5.0

FLAG_AT_IMPORT = os.environ.get("POLYHAL_TEST_FLAG", "unset")
"""The flag as this module saw it when imported (in a worker: after ``worker_env``)."""


class UnpicklableError(Exception):
    """An exception carrying a lock, which cannot be pickled."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class FaultyUnsupported(UnsupportedError):
    """An adapter's own error class."""


class FaultyExecutable(TemplateExecutable):
    """The template executable, with faults triggered by the first input element."""

    runs = 0

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        cue = float(inputs[0].handle.flat[0]) if inputs and inputs[0].handle.size else 0.0
        if cue == CRASH:
            os._exit(3)
        if cue == HANG:
            while True:
                pass
        if cue == RAISE:
            raise ValueError("the faulty device refuses -1")
        if cue == EXECUTION_ERROR:
            raise ExecutionError("faulty kernel failed on -2")
        if cue == UNPICKLABLE:
            raise UnpicklableError("this error holds a lock")
        if cue == OWN_ERROR:
            raise FaultyUnsupported("no -4 on this device")
        if cue == LOCAL_ERROR:
            class LocalUnsupported(UnsupportedError):
                pass

            raise LocalUnsupported("no -5 on this device")
        self.runs += 1
        return super().run(inputs)

    def profile(self) -> Profile | None:
        return Profile(counters={"runs": float(self.runs), "pid": float(os.getpid())})


class FaultyDevice(TemplateDevice):
    """A template device whose executables fail on cue."""

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        super().compile(graph, options)  # the template's support check
        return FaultyExecutable(self, graph)


class FaultyAdapter(TemplateAdapter):
    """``test-faulty``: see the module docstring."""

    name = "test-faulty"
    device_class = FaultyDevice
    executable_class = FaultyExecutable

    def open(self, index: int = 0, **options: Any) -> Device:
        super().open(index, **options)  # the template's index check
        return FaultyDevice()


class EnvDevice(TemplateDevice):
    """Reports the worker's environment as capability tags."""

    @property
    def capabilities(self) -> Capabilities:
        tags = {f"flag={os.environ.get('POLYHAL_TEST_FLAG', 'unset')}",
                f"import-flag={FLAG_AT_IMPORT}",
                f"worker={os.environ.get('POLYHAL_ISOLATED_WORKER', 'none')}"}
        return Capabilities(ops=CAPABILITIES.ops, dynamic_shapes=True, tags=frozenset(tags))


class EnvAdapter(TemplateAdapter):
    """``test-env``: a template device whose worker gets ``POLYHAL_TEST_FLAG=1``."""

    name = "test-env"
    device_class = EnvDevice
    worker_env: ClassVar[Mapping[str, str]] = {"POLYHAL_TEST_FLAG": "1"}

    def open(self, index: int = 0, **options: Any) -> Device:
        super().open(index, **options)
        return EnvDevice()


class SlowOpenAdapter(TemplateAdapter):
    """``test-slow-open``: the template device, opened after ``open_seconds``."""

    name = "test-slow-open"

    def open(self, index: int = 0, **options: Any) -> Device:
        time.sleep(float(options.pop("open_seconds", 0.0)))
        return super().open(index, **options)


class NoRoomDevice(TemplateDevice):
    """A template device without room for arrays of more than ``NO_ROOM_ABOVE`` elements."""

    def upload(self, array: np.ndarray) -> Buffer:
        if array.size > NO_ROOM_ABOVE:
            raise MemoryError(f"no room for {array.nbytes} bytes")
        return super().upload(array)


class NoRoomAdapter(TemplateAdapter):
    """``test-no-room``: see the module docstring."""

    name = "test-no-room"
    device_class = NoRoomDevice

    def open(self, index: int = 0, **options: Any) -> Device:
        super().open(index, **options)
        return NoRoomDevice()
