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

from polyhal.errors import AdapterContractError, DeviceError, PolyhalError
from polyhal.hal.checked import CheckedDevice, guarded
from polyhal.hal.checks import check_adapter_class
from polyhal.hal.contract import Adapter, Device

if TYPE_CHECKING:
    from polyhal.hal.isolation import Channel, WorkerSpec
    from polyhal.hal.remote import RayHost

ENTRY_POINT_GROUP = "polyhal.adapters"
_ADDRESS = re.compile(r"([a-z][a-z0-9-]*)(?::(\d+))?")
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
    every problem with the class.
    """
    check_adapter_class(adapter).raise_if_broken()
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
            try:
                cls = entry.load()
                register(cls, replace=True)
            except AdapterContractError as exc:
                _failures[entry.name] = PluginFailure(entry.name, entry.value, str(exc))
            except Exception as exc:  # a broken plugin must not break the others
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                _failures[entry.name] = PluginFailure(entry.name, entry.value,
                                                      f"import failed: {detail}")


def _selected(name: str) -> bool:
    wanted = os.environ.get("POLYHAL_ADAPTERS", "").strip()
    return not wanted or name in {w.strip() for w in wanted.split(",")}


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
        listing = ", ".join(known) or "none"
        raise PolyhalError(f"no adapter named {name!r} (available: {listing})")
    with _lock:
        if name not in _instances:
            _instances[name] = guarded(f"adapter {name!r} constructor", known[name])
        return _instances[name]


def parse_address(address: str) -> tuple[str, int]:
    """``"gpu:1"`` -> ``("gpu", 1)``; ``"cpu"`` -> ``("cpu", 0)``."""
    match = _ADDRESS.fullmatch(address.strip()) if isinstance(address, str) else None
    if match is None:
        raise PolyhalError(f"bad device address {address!r}: expected ADAPTER or ADAPTER:INDEX "
                           "(e.g. 'cpu', 'gpu:1')")
    return match.group(1), int(match.group(2) or 0)


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
    adapter = get_adapter(name)
    channel_factory = _channel_factory(host, f"{name}:{index}")
    if isolate or channel_factory is not None or type(adapter).always_isolate:
        from polyhal.hal.isolation import IsolatedDevice

        inner: Device = IsolatedDevice(name, index, options, timeout=timeout,
                                       channel_factory=channel_factory)
    else:
        inner = guarded(f"{name}:{index} Adapter.open", lambda: adapter.open(index, **options))
        if not isinstance(inner, Device):
            raise AdapterContractError(f"{name}:{index} Adapter.open returned "
                                       f"{type(inner).__name__}, not a Device")
        inner.adapter = adapter
        inner.index = index
    return CheckedDevice(inner, f"{name}:{index}")


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
    rows = []
    for name in adapters():
        try:
            devices = guarded(f"adapter {name!r} probe", get_adapter(name).probe)
            rows.append((name, list(devices), ""))
        except (PolyhalError, DeviceError) as exc:
            rows.append((name, None, str(exc)))
    return rows
