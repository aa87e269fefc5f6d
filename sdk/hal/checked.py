"""Run-time enforcement of the HAL contract.

Every device the runtime or the conformance suite opens is wrapped in a
:class:`CheckedDevice`: a result of the wrong type, dtype or shape, or a buffer
from another device, raises :class:`AdapterContractError` naming the adapter
and the call; any other exception escaping an adapter becomes a
:class:`DeviceError` (``PolyhalError`` subclasses pass through unchanged). The
caller's arguments are checked before the adapter sees them: a wrong one is the
caller's error (:class:`InputBindingError` for arrays and buffers, a
:class:`PolyhalError` otherwise), never blamed on the adapter.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from polyhal.errors import (
    AdapterContractError,
    DeviceError,
    InputBindingError,
    IRError,
    PolyhalError,
    UnsupportedError,
)
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import (
    Adapter,
    Buffer,
    CompileOptions,
    Device,
    Executable,
    Profile,
    buffer_checksum,
)
from polyhal.ir import dims as D
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType

T = TypeVar("T")
_TYPE = operator.attrgetter("type")


def guarded(where: str, call: Callable[..., T], *args: Any) -> T:
    """Call into an adapter; foreign exceptions become :class:`DeviceError`."""
    try:
        return call(*args)
    except PolyhalError:
        raise
    except Exception as exc:
        raise DeviceError(f"{where} raised {type(exc).__name__}: {exc}") from exc


def open_checked(adapter: Adapter, index: int, options: Mapping[str, Any]) -> Device:
    """``adapter.open(index, **options)``, checked, with the device's ``adapter`` and
    ``index`` set. Options an adapter does not take are its to refuse (with
    :class:`UnsupportedError`); any other exception escaping ``open`` is the device
    failing to open, a :class:`DeviceError` naming the options."""
    where = f"{adapter.name}:{index} Adapter.open"
    try:
        device = adapter.open(index, **options)
    except PolyhalError:
        raise
    except Exception as exc:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "no options"
        raise DeviceError(f"{where} ({given}) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(device, Device):
        raise AdapterContractError(f"{where} returned {type(device).__name__}, not a Device")
    device.adapter = adapter
    device.index = index
    return device


class CheckedExecutable(Executable):
    """An executable whose every run is checked against the graph's types."""

    MAX_SIGNATURES = 256
    """Checked signatures kept (of inputs, and of inputs with outputs); beyond that
    the record starts afresh."""

    def __init__(self, device: CheckedDevice, inner: Executable, graph: Graph) -> None:
        self.device = device
        self.inner = inner
        self.graph = graph
        self._where = f"{device.address} Executable.run"
        from polyhal.hal.isolation import IsolatedExecutable  # it imports this module

        self._isolated = isinstance(inner, IsolatedExecutable)
        # Signatures that passed the checks, keyed by the ids of their types. Each
        # entry holds the types themselves, so no id is reused while it is kept: a
        # key found is the same type objects. ``TensorType.of`` returns one object
        # per dtype and shape, so a steady stream of calls checks each signature once.
        self._inputs_checked: dict[tuple[int, ...],
                                   tuple[tuple[TensorType, ...], dict[str, int]]] = {}
        self._outputs_checked: dict[tuple[int, ...], tuple[TensorType, ...]] = {}

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        # Runs on every call: messages are formatted only for an error.
        device, graph = self.device, self.graph
        if not isinstance(inputs, list | tuple) or len(inputs) != len(graph.inputs):
            raise InputBindingError(self._miscounted(inputs))
        for value, buffer in zip(graph.inputs, inputs, strict=True):
            if not device.owns(buffer):
                device.check_owned(buffer, f"{self._where}: input {value.name!r}",
                                   InputBindingError)
        in_types = tuple(map(_TYPE, inputs))
        in_key = tuple(map(id, in_types))
        checked = self._inputs_checked.get(in_key)
        if checked is None:
            bindings: dict[str, int] = {}
            for value, t in zip(graph.inputs, in_types, strict=True):
                _check_type(value.type, t, bindings, self._where, "input", value.name)
            checked = _remember(self._inputs_checked, self.MAX_SIGNATURES, in_key,
                                (in_types, bindings))
        outputs = guarded(self._where, self.inner.run, list(inputs))
        if not isinstance(outputs, list | tuple) or len(outputs) != len(graph.outputs):
            raise AdapterContractError(f"{self._where} returned {_count(outputs)}; graph "
                                       f"{graph.name!r} has {len(graph.outputs)} outputs")
        for index, buffer in enumerate(outputs):
            if not device.owns(buffer):
                device.check_owned(buffer, f"{self._where} (output "
                                           f"{graph.outputs[index].name!r})")
        types = (*in_types, *map(_TYPE, outputs))
        key = tuple(map(id, types))
        if key not in self._outputs_checked:
            bindings = dict(checked[1])
            for value, t in zip(graph.outputs, types[len(in_types):], strict=True):
                _check_type(value.type, t, bindings, self._where, "output", value.name)
            _remember(self._outputs_checked, self.MAX_SIGNATURES, key, types)
        return list(outputs)

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Upload ``arrays`` (one per graph input), run, and download every output, with
        the checks of :meth:`CheckedDevice.upload`, :meth:`run` and
        :meth:`CheckedDevice.download`. An isolated device's worker makes these calls
        and checks, and answers them all in one reply: one round trip instead of one
        per call (:meth:`polyhal.hal.isolation.IsolatedExecutable.run_arrays`)."""
        if self._isolated:
            if not isinstance(arrays, list | tuple) or len(arrays) != len(self.graph.inputs):
                raise InputBindingError(self._miscounted(arrays))
            return self.inner.run_arrays(list(arrays))  # type: ignore[attr-defined]
        device = self.device
        buffers = [device.upload(array) for array in arrays]
        return [device.download(buffer) for buffer in self.run(buffers)]

    def _miscounted(self, inputs: object) -> str:
        """Why ``inputs`` is not one buffer per graph input."""
        names = ", ".join(v.name for v in self.graph.inputs) or "none"
        if not isinstance(inputs, list | tuple):
            return (f"{self._where}: expected a list of buffers (one per graph input: "
                    f"{names}), got {type(inputs).__name__}")
        return (f"{self._where}: {len(inputs)} buffers given, graph {self.graph.name!r} "
                f"takes {len(self.graph.inputs)} ({names})")

    def profile(self) -> Profile | None:
        where = f"{self.device.address} Executable.profile"
        profile = guarded(where, self.inner.profile)
        if profile is not None and not isinstance(profile, Profile):
            raise AdapterContractError(f"{where} returned {type(profile).__name__}, not a "
                                       "Profile or None")
        return profile


def _remember(record: dict[tuple[int, ...], T], limit: int, key: tuple[int, ...],
              entry: T) -> T:
    if len(record) >= limit:
        record.clear()
    record[key] = entry
    return entry


def _count(outputs: object) -> str:
    if isinstance(outputs, list | tuple):
        return f"{len(outputs)} buffers"
    return f"a {type(outputs).__name__}, not a list of buffers"


def _check_type(expected: TensorType, actual: TensorType, bindings: dict[str, int],
                where: str, role: str, name: str) -> None:
    """Raise unless ``actual`` (the buffer of ``role`` ``name``) has ``expected``'s
    dtype and a concrete shape matching its dimensions under ``bindings``: an
    ``input`` that does not is the caller's error, an ``output`` the adapter's."""
    if (actual.dtype == expected.dtype and actual.rank == expected.rank
            and all(isinstance(d, int) for d in actual.shape)
            and D.bind_shape(expected.shape, actual.shape, bindings) is None):
        return
    error = InputBindingError if role == "input" else AdapterContractError
    where = f"{where}: {role} {name!r}"
    if actual.dtype != expected.dtype or actual.rank != expected.rank:
        raise error(f"{where}: got {actual}, expected {expected}")
    if not all(isinstance(d, int) for d in actual.shape):
        raise error(f"{where}: buffer shape must be concrete, got {actual}")
    axis = D.bind_shape(expected.shape, actual.shape, bindings)
    want = expected.shape[axis]  # type: ignore[index]
    raise error(f"{where}: dimension {axis} is {actual.shape[axis]}, expected "
                f"{want} = {D.evaluate(want, bindings)}; got {actual}")


class CheckedDevice(Device):
    """A device whose every call is checked against the contract."""

    def __init__(self, inner: Device, address: str) -> None:
        self.inner = inner
        self.adapter = inner.adapter
        self.index = inner.index
        self._address = address
        self._upload_where = f"{address} Device.upload"
        self._download_where = f"{address} Device.download"

    @property
    def address(self) -> str:
        return self._address

    @property
    def capabilities(self) -> Capabilities:
        caps = guarded(f"{self.address} Device.capabilities",
                       lambda: self.inner.capabilities)
        if not isinstance(caps, Capabilities):
            raise AdapterContractError(f"{self.address} Device.capabilities returned "
                                       f"{type(caps).__name__}, not Capabilities")
        return caps

    def owns(self, buffer: object) -> bool:
        """True when ``buffer`` is a buffer of this device."""
        return isinstance(buffer, Buffer) and (buffer.device is self.inner
                                               or buffer.device is self)

    def check_owned(self, buffer: object, where: str,
                    error: type[PolyhalError] = AdapterContractError) -> None:
        """Raise ``error`` unless ``buffer`` is a buffer of this device (the caller's
        buffers are the caller's error, an adapter's results the adapter's)."""
        if self.owns(buffer):
            return
        if not isinstance(buffer, Buffer):
            hint = "; upload arrays first (Device.upload)" if isinstance(buffer, np.ndarray) else ""
            raise error(f"{where}: expected a Buffer, got {type(buffer).__name__}{hint}")
        other = getattr(buffer.device, "address", "another device")
        if other == self.address:
            raise error(f"{where}: the buffer belongs to another device instance at the same "
                        f"address ({other}, opened separately), not this one")
        raise error(f"{where}: the buffer belongs to {other}, not {self.address}")

    def upload(self, array: np.ndarray) -> Buffer:
        where = self._upload_where
        if not isinstance(array, np.ndarray):
            raise InputBindingError(f"{where}: expected a numpy array, got "
                                    f"{type(array).__name__}")
        if not array.dtype.isnative:  # byte-swapped (>f4 on x86): the same values, natively
            array = array.astype(array.dtype.newbyteorder("="))
        expected = TensorType.of(array, where)
        buffer = guarded(where, self.inner.upload, array)
        if not self.owns(buffer):
            self.check_owned(buffer, f"{where} (its result)")
        if buffer.type is not expected and buffer.type != expected:
            raise AdapterContractError(f"{where} returned a buffer of type {buffer.type} for "
                                       f"an array of type {expected}")
        return buffer

    def download(self, buffer: Buffer) -> np.ndarray:
        where = self._download_where
        if not self.owns(buffer):
            self.check_owned(buffer, where, InputBindingError)
        array = guarded(where, self.inner.download, buffer)
        if not isinstance(array, np.ndarray):
            raise AdapterContractError(f"{where} returned {type(array).__name__}, not an array")
        try:
            actual = TensorType.of(array, where)
        except IRError:
            raise AdapterContractError(f"{where} returned an array of dtype {array.dtype}, "
                                       "which is no polyhal dtype") from None
        if actual is not buffer.type and actual != buffer.type:
            raise AdapterContractError(f"{where} returned {actual} for a buffer of type "
                                       f"{buffer.type}")
        if buffer.checksum is not None and buffer_checksum(array) != buffer.checksum:
            raise DeviceError(f"{where}: checksum mismatch: the {buffer.type} data came back "
                              "corrupted (its CRC-32 differs from the one the device "
                              "computed)")
        return array

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        where = f"{self.address} Device.compile"
        if not isinstance(graph, Graph):
            raise PolyhalError(f"{where}: expected a Graph, got {type(graph).__name__}")
        if not isinstance(options, CompileOptions):
            raise PolyhalError(f"{where}: options must be a CompileOptions (e.g. "
                               f"polyhal.hal.CompileOptions()), got {type(options).__name__}")
        offered = self.capabilities.precisions
        if options.precision not in offered:  # checked here once, for every adapter
            raise UnsupportedError(f"{where}: precision {options.precision!r} is not offered "
                                   f"(Capabilities.precisions: {', '.join(sorted(offered))})")
        executable = guarded(where, self.inner.compile, graph, options)
        if not isinstance(executable, Executable):
            raise AdapterContractError(f"{where} returned {type(executable).__name__}, not an "
                                       "Executable")
        return CheckedExecutable(self, executable, graph)

    def close(self) -> None:
        guarded(f"{self.address} Device.close", self.inner.close)
