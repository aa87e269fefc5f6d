"""The HAL contract: the four classes a vendor implements to bring a device.

A vendor writes one subclass of each:

- :class:`Adapter` — a device family: ``probe()`` lists devices cheaply (no heavy
  imports, no device start), ``open(index)`` starts one.
- :class:`Device` — ``capabilities``, ``upload``, ``download``, ``compile``.
- :class:`Buffer` — a tensor living on the device (subclassing is optional).
- :class:`Executable` — ``run(buffers) -> buffers``.

**Required**: ``Adapter.probe``, ``Adapter.open``, ``Device.capabilities``,
``Device.upload``, ``Device.download``, ``Device.compile``, ``Executable.run``.
Everything else has a default built from these. The contract is checked when
an adapter is registered (:func:`polyhal.hal.register`); ``polyhal
check-adapter NAME`` prints it as a table. See ``adapters/template`` for the
smallest correct adapter.
"""

from __future__ import annotations

import concurrent.futures
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from polyhal.errors import PolyhalError
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType

API_VERSION = 1
"""The version of this contract. An adapter declares the range it supports."""


@dataclass(frozen=True)
class DeviceInfo:
    """One device an adapter found, whether or not it can be used now."""

    adapter: str
    """The adapter's name."""
    index: int
    """Position among the adapter's devices: the ``N`` in ``ADAPTER:N``."""
    name: str
    """A human-readable device name."""
    available: bool = True
    """False when the device exists but cannot be opened now."""
    reason: str = ""
    """Why the device is unavailable (empty when available)."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """Anything else worth showing: driver versions, memory, simulator."""

    @property
    def address(self) -> str:
        """``ADAPTER:INDEX``."""
        return f"{self.adapter}:{self.index}"


@dataclass(frozen=True)
class CompileOptions:
    """Options the runtime passes through to ``Device.compile``."""

    precision: str = "fp32"
    """``fp32``, ``tf32``, ``fp16`` or ``bf16``: the compute precision to use."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Adapter-specific options, passed through untouched."""

    def __post_init__(self) -> None:
        problem = compile_options_problem(self)
        if problem is not None:
            raise PolyhalError(problem)


def compile_options_problem(options: CompileOptions) -> str | None:
    """What is wrong with the fields of ``options`` (``None``: nothing): ``precision``
    must be a string and ``extra`` a mapping with string keys. Which precisions a
    device offers is its ``Capabilities.precisions``' to say, at ``compile``."""
    precision, extra = options.precision, options.extra
    if not isinstance(precision, str):
        return (f"CompileOptions.precision={precision!r} must be a string (fp32, tf32, fp16 "
                "or bf16)")
    if not isinstance(extra, Mapping):
        return (f"CompileOptions.extra={extra!r} must be a mapping of option name (a string) "
                "to value")
    for key in extra:
        if not isinstance(key, str):
            return (f"CompileOptions.extra: option name {key!r} ({type(key).__name__}) is not "
                    "a string")
    return None


@dataclass(eq=False)
class Buffer:
    """A tensor on a device: its concrete type and the adapter's handle to the data."""

    device: Device
    """The device holding the data."""
    type: TensorType
    """The concrete dtype and shape of the data."""
    handle: Any = None
    """The adapter's own reference to the data (a numpy array, a device pointer, ...)."""
    checksum: int | None = None
    """Optional: the CRC-32 (:func:`buffer_checksum`) of the contents as the device
    produced them. When set, every download is verified against it, and a mismatch
    (data corrupted in device memory or in transfer) is a ``DeviceError``."""


def buffer_checksum(array: np.ndarray) -> int:
    """The CRC-32 of an array's bytes in C order: what :attr:`Buffer.checksum` holds."""
    return zlib.crc32(np.ascontiguousarray(array).tobytes())


@dataclass(frozen=True)
class Profile:
    """What an executable measured on its last run."""

    stages: Mapping[str, float] = field(default_factory=dict)
    """Seconds per stage: ``compile``, ``transfer``, ``run``."""
    nodes: Mapping[str, float] = field(default_factory=dict)
    """Seconds per node name, where the device can tell."""
    counters: Mapping[str, float] = field(default_factory=dict)
    """Device counters: cycles, shots, synaptic events, ..."""


class Executable:
    """A graph compiled for one device. Required: :meth:`run`."""

    device: Device
    graph: Graph

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        """Run on buffers of this device, in graph-input order; outputs in graph-output order."""
        raise NotImplementedError("need run")

    def run_async(self, inputs: Sequence[Buffer]) -> concurrent.futures.Future[list[Buffer]]:
        """Start :meth:`run` and return a future (default: one worker thread per call)."""
        return _ASYNC_POOL.submit(self.run, inputs)

    def profile(self) -> Profile | None:
        """What the last run measured, if the device measures anything."""
        return None


class Device:
    """One opened device. Required: ``capabilities``, ``upload``, ``download``, ``compile``."""

    adapter: Adapter
    index: int = 0

    @property
    def capabilities(self) -> Capabilities:
        """What this device supports; conformance cases are generated from it."""
        raise NotImplementedError("need capabilities")

    def upload(self, array: np.ndarray) -> Buffer:
        """Copy a host array to the device."""
        raise NotImplementedError("need upload")

    def download(self, buffer: Buffer) -> np.ndarray:
        """Copy a device buffer to a new host array."""
        raise NotImplementedError("need download")

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        """Compile a verified graph; raise ``UnsupportedError`` for what the device lacks."""
        raise NotImplementedError("need compile")

    def close(self) -> None:
        """Release the device (default: nothing to release). polyhal calls it once, and
        refuses every call after it (a `DeviceError`)."""

    @property
    def address(self) -> str:
        """``ADAPTER:INDEX``."""
        return f"{self.adapter.name}:{self.index}"

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Adapter:
    """A device family. Required: :meth:`probe`, :meth:`open`; class attributes
    ``name``, ``version``, ``api_version`` and ``device_class``."""

    name: ClassVar[str]
    """Registry name: lowercase letters, digits and ``-`` (``gpu-sim``)."""
    version: ClassVar[str]
    """The adapter's own version."""
    api_version: ClassVar[tuple[int, int]] = (API_VERSION, API_VERSION)
    """Inclusive range of HAL contract versions the adapter supports."""
    device_class: ClassVar[type[Device]]
    """The :class:`Device` subclass ``open`` returns (checked at registration)."""
    executable_class: ClassVar[type[Executable] | None] = None
    """The :class:`Executable` subclass ``compile`` returns (checked when given)."""
    worker_env: ClassVar[Mapping[str, str]] = {}
    """Environment variables an isolated worker sets before importing anything (for
    libraries that read their configuration once, at import)."""
    always_isolate: ClassVar[bool] = False
    """True when the adapter's devices can only run in a worker process."""
    manifest: ClassVar[str | None] = None
    """Path of the adapter's conformance manifest (default: ``manifest.toml`` beside
    the adapter's module)."""

    def probe(self) -> list[DeviceInfo]:
        """List devices cheaply: no heavy imports, no device start."""
        raise NotImplementedError("need probe")

    def open(self, index: int = 0, **options: Any) -> Device:
        """Open device ``index``."""
        raise NotImplementedError("need open")


_ASYNC_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=8,
                                                    thread_name_prefix="polyhal-async")
