"""Adapter discovery and registration, and opening devices by address.

Adapters come from the entry-point group ``polyhal.adapters`` (an out-of-tree
adapter is a pip package) and from :func:`register` for in-process use. The
environment variable ``POLYHAL_ADAPTERS`` (comma-separated names) narrows the
set. A plugin that fails to import, or breaks the contract, is listed by
:func:`plugin_failures` and never stops the others from loading.
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from polyhal.errors import AdapterContractError, PolyhalError, shown
from polyhal.hal.checked import CheckedDevice, guarded, open_checked
from polyhal.hal.checks import check_adapter_class
from polyhal.hal.contract import Adapter, Device, DeviceInfo

if TYPE_CHECKING:
    from polyhal.hal.channel import Channel, WorkerSpec
    from polyhal.hal.remote import RayHost

ENTRY_POINT_GROUP = "polyhal.adapters"
_ADDRESS = re.compile(r"([a-z][a-z0-9-]*)(?::([0-9]+))?")  # ASCII digits only
MAX_INDEX_DIGITS = 18
"""The most digits a device index may have (any such index fits a signed 64-bit int)."""
HOSTS = ("process", "ray")
"""The ``open_device(host=)`` names: a local worker process, a Ray actor."""


@dataclass(frozen=True)
class PluginFailure:
    """An adapter plugin that could not be loaded."""

    name: str
    source: str
    error: str


_lock = threading.RLock()
_adapters: dict[str, type[Adapter]] = {}
_instances: dict[str, Adapter] = {}
_failures: dict[str, PluginFailure] = {}
_discovered = False


def register(adapter: type[Adapter], *, replace: bool = False) -> type[Adapter]:
    """Register an adapter class after checking it against the contract.

    Usable as a class decorator. Raises :class:`AdapterContractError` listing
    every problem with the class, or when its name is taken (by a discovered
    adapter too: discovery runs first) and ``replace`` is false.
    """
    check_adapter_class(adapter).raise_if_broken()
    if not replace:
        discover()  # a built-in or plugin name is taken whether or not discovery ran yet
    with _lock:
        existing = _adapters.get(adapter.name)
        if existing is not None and existing is not adapter and not replace:
            raise AdapterContractError(
                f"adapter name {adapter.name!r} is taken by {existing.__module__}:"
                f"{existing.__qualname__}; pass replace=True to replace it")
        _adapters[adapter.name] = adapter
        _instances.pop(adapter.name, None)
        _failures.pop(adapter.name, None)
    return adapter


def unregister(name: str) -> None:
    """Remove an adapter (no error if absent)."""
    with _lock:
        _adapters.pop(name, None)
        _instances.pop(name, None)


def discover(refresh: bool = False) -> None:
    """Load every adapter advertised under the ``polyhal.adapters`` entry points."""
    global _discovered
    with _lock:
        if _discovered and not refresh:
            return
        _discovered = True
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name in _adapters and not refresh:
                continue
            error = _load_plugin(entry)
            if error:
                _failures[entry.name] = PluginFailure(entry.name, entry.value, error)


def _load_plugin(entry: metadata.EntryPoint) -> str:
    """Load and register one entry point; what went wrong ("" when nothing did). A
    broken plugin must not break the others: not even one that calls ``sys.exit``
    (only ``KeyboardInterrupt`` and the like propagate)."""
    try:
        cls = entry.load()
    except SystemExit as exc:
        return f"import failed: the plugin called sys.exit({exc.code!r}) while importing"
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return f"import failed: {detail}"
    if not isinstance(cls, type):
        return (f"entry point {entry.name!r} ({entry.value}) names a {type(cls).__name__}, "
                "not an Adapter class: point it at a subclass of polyhal.hal.Adapter")
    try:
        register(cls, replace=True)
    except AdapterContractError as exc:
        return str(exc)
    return ""


def _selected(name: str) -> bool:
    wanted = os.environ.get("POLYHAL_ADAPTERS", "").strip()
    return not wanted or name in {w.strip() for w in wanted.split(",")}


def unknown_adapter(name: str) -> PolyhalError:
    """The error for an adapter ``name`` that :func:`adapters` does not hold; it says
    when ``POLYHAL_ADAPTERS`` narrowed the list, and whether ``name`` is left out by it."""
    known = adapters()
    with _lock:
        left_out = sorted(n for n in {*_adapters, *_failures} if not _selected(n))
    listing = ", ".join(known)
    if not left_out:
        return PolyhalError(f"no adapter named {name!r} (available: "
                            f"{listing or 'none: no adapter is registered'})")
    wanted = f"POLYHAL_ADAPTERS={os.environ.get('POLYHAL_ADAPTERS', '').strip()!r}"
    if name in left_out:
        return PolyhalError(f"no adapter named {name!r} in this process: {wanted} leaves it "
                            f"out (available: {listing or 'none'}); add {name!r} to "
                            "POLYHAL_ADAPTERS or unset it")
    available = (f"{listing}, as {wanted} narrowed the list" if known
                 else f"none: {wanted} selects no registered adapter")
    return PolyhalError(f"no adapter named {name!r} (available: {available}; left out: "
                        f"{', '.join(left_out)})")


def adapters() -> dict[str, type[Adapter]]:
    """Registered adapters by name (narrowed by ``POLYHAL_ADAPTERS``)."""
    discover()
    with _lock:
        return {n: a for n, a in sorted(_adapters.items()) if _selected(n)}


def plugin_failures() -> list[PluginFailure]:
    """Plugins that failed to import or to meet the contract."""
    discover()
    with _lock:
        return [f for n, f in sorted(_failures.items()) if _selected(n)]


def get_adapter(name: str) -> Adapter:
    """The (shared) instance of the adapter called ``name``."""
    known = adapters()
    if name not in known:
        failure = next((f for f in plugin_failures() if f.name == name), None)
        if failure is not None:
            raise AdapterContractError(f"adapter {name!r} failed to load: {failure.error}")
        raise unknown_adapter(name)
    with _lock:
        if name not in _instances:
            _instances[name] = guarded(f"adapter {name!r} constructor", known[name])
        return _instances[name]


def parse_address(address: str) -> tuple[str, int]:
    """``"gpu:1"`` -> ``("gpu", 1)``; ``"cpu"`` -> ``("cpu", 0)``."""
    match = _ADDRESS.fullmatch(address.strip()) if isinstance(address, str) else None
    if match is None:
        raise PolyhalError(f"bad device address {shown(address)}: expected ADAPTER or "
                           "ADAPTER:INDEX (e.g. 'cpu', 'gpu:1')")
    digits = match.group(2) or "0"
    if len(digits) > MAX_INDEX_DIGITS:
        raise PolyhalError(f"bad device address {shown(address)}: its index has "
                           f"{len(digits)} digits; a device index has at most "
                           f"{MAX_INDEX_DIGITS}")
    return match.group(1), int(digits)


def open_device(address: str, *, isolate: bool = False, timeout: float | None = None,
                host: str | RayHost | None = None, **options: Any) -> Device:
    """Open the device at ``ADAPTER[:INDEX]``, checked against the contract.

    With ``isolate=True`` (forced for adapters that declare ``always_isolate``)
    the device lives in a worker process: a crash or a
    hang (past ``timeout`` seconds per call) becomes a :class:`DeviceError`,
    and the worker restarts on the next call.

    ``host`` says where that worker runs: ``None`` or ``"process"``, a local
    process; ``"ray"`` or a :class:`~polyhal.hal.remote.RayHost` (its resources
    and node), a Ray actor — isolation is then implied. Ray comes with
    ``pip install 'polyhal[distributed]'``.
    """
    name, index = parse_address(address)
    _check_open_arguments(f"open_device({address!r})", isolate, timeout)
    adapter = get_adapter(name)
    channel_factory = _channel_factory(host, f"{name}:{index}")
    if isolate or channel_factory is not None or type(adapter).always_isolate:
        from polyhal.hal.isolation import IsolatedDevice

        inner: Device = IsolatedDevice(name, index, options, timeout=timeout,
                                       channel_factory=channel_factory)
    else:
        inner = open_checked(adapter, index, options)
    return CheckedDevice(inner, f"{name}:{index}")


def _check_open_arguments(where: str, isolate: object, timeout: object) -> None:
    if not isinstance(isolate, bool):
        raise PolyhalError(f"{where}: isolate={isolate!r} must be True or False")
    if timeout is not None:
        from polyhal.hal.isolation import check_timeout

        check_timeout(where, timeout)


def _channel_factory(host: str | RayHost | None, address: str
                     ) -> Callable[[WorkerSpec], Channel] | None:
    """The worker channel factory for ``open_device(host=)``; None: a local process."""
    if host is None or host == "process":
        return None
    from polyhal.hal.remote import RayHost

    if host == "ray":
        host = RayHost()
    if not isinstance(host, RayHost):
        raise PolyhalError(f"open_device({address!r}): unknown host {host!r}; expected "
                           f"{', '.join(map(repr, HOSTS))} or a RayHost")
    return host.channel_factory()


def probe_all() -> list[tuple[str, list[Any] | None, str]]:
    """Every adapter's probe result: ``(name, devices or None, error)``."""
    rows: list[tuple[str, list[Any] | None, str]] = []
    for name in adapters():
        try:
            rows.append((name, _probe(name), ""))
        except PolyhalError as exc:
            rows.append((name, None, str(exc)))
    return rows


def _probe(name: str) -> list[DeviceInfo]:
    """The checked result of adapter ``name``'s ``probe()``."""
    where = f"adapter {name!r} probe"
    devices = guarded(where, get_adapter(name).probe)
    if not isinstance(devices, list | tuple):
        raise AdapterContractError(f"{where} returned {type(devices).__name__}, not a list "
                                   "of DeviceInfo")
    for info in devices:
        if not isinstance(info, DeviceInfo):
            raise AdapterContractError(f"{where} returned a list holding a "
                                       f"{type(info).__name__}, not only DeviceInfo")
    return list(devices)
