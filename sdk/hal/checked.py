"""Run-time enforcement of the HAL contract.

Every device the runtime or the conformance suite opens is wrapped in a
:class:`CheckedDevice`: a result of the wrong type, dtype or shape, or a buffer
from another device, raises :class:`AdapterContractError` naming the adapter
and the call; any other exception escaping an adapter becomes a
:class:`DeviceError` (``PolyhalError`` subclasses pass through unchanged). The
caller's arguments are checked before the adapter sees them: a wrong one is the
caller's error (:class:`InputBindingError` for arrays and buffers, a
:class:`PolyhalError` otherwise), never blamed on the adapter. So is an array that
cannot be copied for want of memory (a ``MemoryError`` while it is uploaded): it is
the caller's :class:`InputBindingError` naming its shape and size, not a device fault.
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
    compile_options_problem,
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


def host_array(array: Any, where: str) -> tuple[np.ndarray, TensorType]:
    """The caller's ``array`` as a device takes it (in native byte order), and its type.
    An :class:`InputBindingError` naming ``where`` unless it is a numpy array, and for a
    masked array (a device would drop its mask, where numpy's kernels honour it); an
    :class:`IRError` for a dtype polyhal does not have."""
    if type(array) is not np.ndarray:
        _check_array_class(array, where)
    if not array.dtype.isnative:  # byte-swapped (>f4 on x86): the same values, natively
        try:
            array = array.astype(array.dtype.newbyteorder("="))
        except MemoryError as exc:
            raise uncopyable(where, array, exc) from exc
    return array, TensorType.of(array, where)


def _check_array_class(array: object, where: str) -> None:
    """Raise unless ``array``, which is not exactly an ``ndarray``, is an ndarray subclass a
    device may take."""
    if not isinstance(array, np.ndarray):
        raise InputBindingError(f"{where}: expected a numpy array, got {type(array).__name__}")
    if isinstance(array, np.ma.MaskedArray):
        raise InputBindingError(f"{where}: got a masked array, whose mask a device would "
                                "ignore; pass its data or array.filled(value)")


def uncopyable(where: str, array: np.ndarray, exc: MemoryError, name: str = "the array"
               ) -> InputBindingError:
    """The caller's error for ``array`` (called ``name``), which cannot be copied for want
    of memory (a broadcast view, say, whose copy needs all of its ``nbytes``)."""
    detail = f": {exc}" if str(exc) else ""
    return InputBindingError(f"{where}: {name} ({array.dtype}, shape {array.shape}, "
                             f"{_size(array.nbytes)}) cannot be copied: out of memory "
                             f"(MemoryError{detail})")


def _size(nbytes: int) -> str:
    """``nbytes`` as a message gives it: ``20 bytes``, ``40000000000 bytes = 37.3 GiB``."""
    units = ("KiB", "MiB", "GiB", "TiB", "PiB")
    power = min(len(units), (nbytes.bit_length() - 1) // 10) if nbytes else 0
    if power == 0:
        return f"{nbytes} bytes"
    return f"{nbytes} bytes = {nbytes / 1024 ** power:.1f} {units[power - 1]}"


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
        if device._closed:
            raise device.closed_error(self._where)
        if not isinstance(inputs, list | tuple) or len(inputs) != len(graph.inputs):
            raise InputBindingError(self._miscounted(inputs, "buffers"))
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
        device = self.device
        if not isinstance(arrays, list | tuple) or len(arrays) != len(self.graph.inputs):
            raise InputBindingError(self._miscounted(arrays, "arrays"))
        if self._isolated:
            # Checked here, as an upload here would check them: the caller's arrays are
            # the caller's error, told before anything is sent to the worker.
            where = device._upload_where
            arrays = [host_array(array, where)[0] for array in arrays]
            return self.inner.run_arrays(arrays)  # type: ignore[attr-defined]
        buffers = [device.upload(array) for array in arrays]
        return [device.download(buffer) for buffer in self.run(buffers)]

    def _miscounted(self, inputs: object, what: str) -> str:
        """Why ``inputs`` is not one of ``what`` (buffers, arrays) per graph input."""
        names = ", ".join(v.name for v in self.graph.inputs) or "none"
        if not isinstance(inputs, list | tuple):
            return (f"{self._where}: expected a list of {what} (one per graph input: "
                    f"{names}), got {type(inputs).__name__}")
        return (f"{self._where}: {len(inputs)} {what} given, graph {self.graph.name!r} "
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
    """Raise unless ``actual`` (the type of the buffer of ``role`` ``name``) is a
    :class:`TensorType` with ``expected``'s dtype and a concrete shape matching its
    dimensions under ``bindings``: an ``input`` that does not is the caller's error,
    an ``output`` the adapter's."""
    if (isinstance(actual, TensorType) and actual.dtype == expected.dtype
            and actual.rank == expected.rank
            and all(isinstance(d, int) for d in actual.shape)
            and D.bind_shape(expected.shape, actual.shape, bindings) is None):
        return
    error = InputBindingError if role == "input" else AdapterContractError
    where = f"{where}: {role} {name!r}"
    if not isinstance(actual, TensorType):
        hint = "; make buffers with Device.upload" if role == "input" else ""
        raise error(f"{where}: the buffer's type is a {type(actual).__name__} "
                    f"({actual!r}), not a TensorType{hint}")
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
        self._closed = False

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
        if self._closed:
            raise self.closed_error(where)
        array, expected = host_array(array, where)
        try:
            buffer = self.inner.upload(array)
        except PolyhalError:
            raise
        except MemoryError as exc:  # the caller's array is too large to copy
            raise uncopyable(where, array, exc) from exc
        except Exception as exc:
            raise DeviceError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        if not self.owns(buffer):
            self.check_owned(buffer, f"{where} (its result)")
        if buffer.type is not expected and buffer.type != expected:
            raise AdapterContractError(f"{where} returned a buffer of type {buffer.type} for "
                                       f"an array of type {expected}")
        return buffer

    def download(self, buffer: Buffer) -> np.ndarray:
        where = self._download_where
        if self._closed:
            raise self.closed_error(where)
        if not self.owns(buffer):
            self.check_owned(buffer, where, InputBindingError)
        if not isinstance(buffer.type, TensorType):
            raise InputBindingError(f"{where}: the buffer's type is a "
                                    f"{type(buffer.type).__name__} ({buffer.type!r}), not a "
                                    "TensorType; make buffers with Device.upload")
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
        if self._closed:
            raise self.closed_error(where)
        if not isinstance(graph, Graph):
            raise PolyhalError(f"{where}: expected a Graph, got {type(graph).__name__}")
        if not isinstance(options, CompileOptions):
            raise PolyhalError(f"{where}: options must be a CompileOptions (e.g. "
                               f"polyhal.hal.CompileOptions()), got {type(options).__name__}")
        problem = compile_options_problem(options)  # refused when made; unless forced in
        if problem is not None:
            raise PolyhalError(f"{where}: {problem}")
        offered = self.capabilities.precisions
        if options.precision not in offered:  # checked here once, for every adapter
            raise UnsupportedError(f"{where}: precision {options.precision!r} is not offered "
                                   f"(Capabilities.precisions: {', '.join(sorted(offered))})")
        executable = guarded(where, self.inner.compile, graph, options)
        if not isinstance(executable, Executable):
            raise AdapterContractError(f"{where} returned {type(executable).__name__}, not an "
                                       "Executable")
        return CheckedExecutable(self, executable, graph)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (on this device, or on an isolated device it
        wraps): the device is not to be used again."""
        return self._closed or getattr(self.inner, "closed", False) is True

    @staticmethod
    def closed_error(where: str) -> DeviceError:
        """The error of a call (``where``) to a device after :meth:`close`."""
        return DeviceError(f"{where}: the device is closed (its buffers and executables "
                           "went with it)")

    def close(self) -> None:
        if self._closed:
            return
        try:
            guarded(f"{self.address} Device.close", self.inner.close)
        finally:
            self._closed = True
