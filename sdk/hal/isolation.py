"""Devices hosted in a worker process: a crash or a hang becomes a ``DeviceError``.

``open_device(address, isolate=True)`` wraps an :class:`IsolatedDevice`: a
proxy whose buffers, executables and calls are forwarded to one worker
process that holds the real device. The conformance runner, fault-injecting
simulators, adapters that must configure a library before it is imported
(``Adapter.worker_env``) and devices hosted on Ray workers
(``open_device(address, host="ray")``, :mod:`polyhal.hal.remote`) all use this
one mechanism.

Layers, from the caller down:

- :class:`IsolatedDevice` / :class:`IsolatedExecutable` — the HAL side. Each
  call is one request and one reply under the device's lock
  (:meth:`IsolatedExecutable.run_arrays` makes three calls in one). Buffers are
  ``Buffer(device=<the proxy>, type=<concrete type>, handle=(generation, id))``;
  when one is garbage-collected its id is queued (a ``weakref.finalize`` only
  appends to a deque: no IPC in a finalizer) and the queue rides along with
  the next request. Executables likewise.
- :class:`Channel` (:mod:`polyhal.hal.channel`) — the transport to one worker
  *generation*: ``send`` (bytes), ``receive(timeout)`` (bytes, or
  :class:`ChannelTimeout` / :class:`ChannelClosed`), ``is_alive``, ``kill``,
  ``close``. Requests and replies are pickled by the proxy
  (:mod:`polyhal.hal.wire`), so a channel only moves bytes.
  :class:`ProcessChannel` (a ``spawn`` process and a pipe) is the default;
  :class:`polyhal.hal.remote.RayChannel` (a Ray actor wrapping
  :class:`WorkerServer`) is the other; any ``WorkerSpec -> Channel`` callable can
  be passed as ``channel_factory=`` to :class:`IsolatedDevice`.
- :class:`WorkerServer` (:mod:`polyhal.hal.worker`) — the worker side,
  transport-free: it opens the device and turns request bytes into reply bytes.

Timeouts. Every request waits at most ``timeout`` seconds (default: the
``POLYHAL_DEVICE_TIMEOUT`` environment variable, else 60 s). Starting a
worker (spawn, imports, ``Adapter.open``) and ``compile`` (including the
transparent recompile after a restart) wait ``SLOW_CALL_FACTOR`` (5) times
as long, and a start at least ``MIN_START_TIMEOUT`` (60 s): starting an
interpreter and importing an adapter's stack can take many seconds on a busy
host, however short the calls are meant to be. On a timeout the worker is
killed and a ``DeviceTimeoutError`` names the device, the call and the
timeout; when the worker dies (exit, signal, broken pipe) a
``DeviceCrashError`` names the exit code or signal (both are ``DeviceError``
subclasses). The next call starts a fresh worker (a new generation)
transparently: buffers of the old generation raise ``DeviceError`` ("buffer
from before the device restarted"), while an :class:`IsolatedExecutable`
keeps its graph and options and recompiles.

A request is pickled in the caller's process. One that cannot be (an argument
of the caller's holding a lambda, say) is the caller's error, not a device
fault: a ``PolyhalError`` naming the argument that cannot be sent
(``CompileOptions.extra['f']``), an ``InputBindingError`` for an array (one
too large to copy names its shape and size).

Errors raised in the worker come back as the same ``PolyhalError`` subclass
with the same message (the worker's traceback is attached as
``exc.worker_traceback``, not as a note, which ``pytest.raises(match=)`` would
see); any other exception becomes a
``DeviceError`` with its type, message and the worker-side traceback.

The worker sets ``Adapter.worker_env`` (and ``POLYHAL_ISOLATED_WORKER`` =
the device address) before importing polyhal or numpy. As with any ``spawn``
start, the parent's ``__main__`` module is re-imported (as ``__mp_main__``)
before that, so a script should keep imports of env-configured libraries
under its ``if __name__ == "__main__":`` guard. Workers are stopped by
:meth:`IsolatedDevice.close`, when the device is garbage-collected, at
interpreter exit, and on their own when the parent process dies. They are not
daemonic processes, so an adapter may start processes of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from polyhal.errors import (
    DeviceCrashError,
    DeviceError,
    DeviceTimeoutError,
    InputBindingError,
    PolyhalError,
)
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.channel import (
    Channel,
    ChannelClosed,
    ChannelTimeout,
    ProcessChannel,
    WorkerSpec,
    main_guard_hint,
)
from polyhal.hal.contract import Buffer, CompileOptions, Device, Executable, Profile
from polyhal.hal.wire import dumps, rebuild_error, unsendable
from polyhal.hal.worker import WorkerServer
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType

__all__ = [
    "DEFAULT_TIMEOUT", "MIN_START_TIMEOUT", "SLOW_CALL_FACTOR", "TIMEOUT_ENV", "Channel",
    "ChannelClosed", "ChannelTimeout", "IsolatedDevice", "IsolatedExecutable", "ProcessChannel",
    "WorkerServer", "WorkerSpec", "check_timeout", "default_timeout",
]

TIMEOUT_ENV = "POLYHAL_DEVICE_TIMEOUT"
"""Environment variable: the default per-call timeout of isolated devices, in seconds."""
DEFAULT_TIMEOUT = 60.0
"""Per-call timeout when neither ``timeout=`` nor ``POLYHAL_DEVICE_TIMEOUT`` is given."""
SLOW_CALL_FACTOR = 5.0
"""Worker start (spawn, imports, ``Adapter.open``) and ``compile`` wait this many timeouts."""
MIN_START_TIMEOUT = 60.0
"""The least a worker start waits, in seconds, whatever the per-call timeout."""
WORKER_ENV = "POLYHAL_ISOLATED_WORKER"
"""Set in every worker to the address of the device it hosts."""

_CLOSE_WAIT = 5.0  # seconds a graceful close waits for the worker before killing it


def default_timeout() -> float:
    """The per-call timeout: ``POLYHAL_DEVICE_TIMEOUT`` if set, else 60 s."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise PolyhalError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise PolyhalError(f"{TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return value


def check_timeout(where: str, timeout: object) -> float:
    """``timeout`` as seconds; a :class:`PolyhalError` unless it is a positive number."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise PolyhalError(f"{where}: timeout={timeout!r} must be a positive number of "
                           "seconds")
    return float(timeout)


def _queue_free(pending: deque, state: list[int]) -> None:
    # A finalizer: only a deque append (atomic, lock-free, no IPC).
    pending.append((state[0], state[1]))


def _drain(pending: deque, generation: int) -> list[int]:
    ids = []
    while True:
        try:
            gen, key = pending.popleft()
        except IndexError:
            return ids
        if gen == generation:
            ids.append(key)


def _abandon(holder: list[Channel | None]) -> None:
    # The device was garbage-collected: stop its worker without waiting.
    channel = holder[0]
    if channel is not None:
        with contextlib.suppress(Exception):
            channel.kill(wait=False)


class IsolatedExecutable(Executable):
    """An executable compiled in the worker; recompiled there after a restart."""

    def __init__(self, device: IsolatedDevice, graph: Graph, options: CompileOptions,
                 generation: int, key: int) -> None:
        self.device = device
        self.graph = graph
        self.options = options
        self._state = [generation, key]  # mutated on recompile; read by the finalizer
        weakref.finalize(self, _queue_free, device._pending_executables,
                         self._state).atexit = False

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        device = self.device
        with device._lock:
            keys = [device._buffer_key(b, "Executable.run") for b in inputs]
            self._compile_if_restarted(device._generation if keys else None)
            outputs = device._request("Executable.run", "run", self._state[1], keys,
                                      generation=self._state[0])
            return [device._new_buffer(*output) for output in outputs]

    def run_arrays(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Upload ``arrays``, run, download the outputs: one request, which the worker
        answers after making those calls, checked (``WorkerServer.op_execute``). No
        buffer is left behind, so it runs in a restarted worker too."""
        device = self.device
        with device._lock:
            self._compile_if_restarted(None)
            return device._request("Executable.run", "execute", self._state[1], arrays,
                                   generation=self._state[0])

    def _compile_if_restarted(self, generation: int | None) -> None:
        """Compile again when the worker that compiled this is gone; ``generation``: the
        inputs' buffers', which must still be the live worker's."""
        device = self.device
        if self._state[0] != device._live_generation():
            key = device._request("Executable.run (recompiling after a restart)", "compile",
                                  self.graph, self.options,
                                  timeout=device._slow_timeout, generation=generation)
            self._state[:] = [device._generation, key]

    def profile(self) -> Profile | None:
        device = self.device
        with device._lock:
            if self._state[0] != device._live_generation():
                return None  # the last run happened in a worker that is gone
            return device._request("Executable.profile", "profile", self._state[1],
                                   generation=self._state[0])


class IsolatedDevice(Device):
    """A device hosted in a worker process; see the module docstring.

    ``timeout`` is the per-call limit in seconds (default: :func:`default_timeout`).
    ``channel_factory`` starts a worker (default: :class:`ProcessChannel`).
    """

    def __init__(self, adapter_name: str, index: int, options: Mapping[str, Any] | None = None,
                 timeout: float | None = None, *,
                 channel_factory: Callable[[WorkerSpec], Channel] | None = None) -> None:
        from polyhal.hal.registry import get_adapter

        self.adapter = get_adapter(adapter_name)
        self.index = index
        cls = type(self.adapter)
        env = {str(k): str(v) for k, v in cls.worker_env.items()}
        env[WORKER_ENV] = f"{adapter_name}:{index}"
        self.spec = WorkerSpec(f"{cls.__module__}:{cls.__qualname__}", adapter_name, index,
                               dict(options or {}), env)
        self.timeout = (default_timeout() if timeout is None
                        else check_timeout(self.spec.address, timeout))
        self._factory = channel_factory or ProcessChannel
        self._lock = threading.RLock()
        self._holder: list[Channel | None] = [None]  # shared with the finalizer
        self._generation = 0
        self._seq = itertools.count(1)
        self._caps: tuple[int, Capabilities] | None = None
        self._closed = False
        self._pending_buffers: deque[tuple[int, int]] = deque()
        self._pending_executables: deque[tuple[int, int]] = deque()
        self.start_seconds: float | None = None
        """How long the last worker took to start and open the device."""
        weakref.finalize(self, _abandon, self._holder).atexit = False

    @property
    def _slow_timeout(self) -> float:
        return self.timeout * SLOW_CALL_FACTOR

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: the device cannot be used again."""
        return self._closed

    @property
    def generation(self) -> int:
        """How many workers this device has started (the current worker's number)."""
        return self._generation

    def __repr__(self) -> str:
        return f"IsolatedDevice({self.spec.address!r}, generation={self._generation})"

    # -- worker lifecycle (all under self._lock)

    def _live_generation(self) -> int | None:
        channel = self._holder[0]
        return self._generation if channel is not None and channel.is_alive() else None

    def _drop_worker(self) -> None:
        channel, self._holder[0] = self._holder[0], None
        self._caps = None
        if channel is not None:
            channel.kill()

    def _ensure_worker(self) -> Channel:
        if self._closed:
            raise self._closed_error()
        channel = self._holder[0]
        if channel is not None and channel.is_alive():
            return channel
        self._drop_worker()  # died while idle: its buffers are gone with it
        self._generation += 1
        started = time.perf_counter()
        where = f"{self.spec.address} worker start"
        try:
            channel = self._factory(self.spec)
        except Exception as exc:
            raise DeviceError(f"{where}: cannot start the worker "
                              f"({type(exc).__name__}: {exc})") from exc
        self._holder[0] = channel
        spec = self.spec
        try:
            self._exchange(channel, "worker start (Adapter.open)", "open",
                           (spec.adapter_path, spec.adapter_name, spec.index,
                            dict(spec.options)), max(self._slow_timeout, MIN_START_TIMEOUT))
        except BaseException as exc:
            self._drop_worker()  # a worker without a device is of no use
            if (isinstance(exc, DeviceCrashError) and isinstance(channel, ProcessChannel)
                    and channel.exitcode == 1 and (hint := main_guard_hint())):
                raise DeviceCrashError(f"{exc}. {hint}") from None
            raise
        self.start_seconds = time.perf_counter() - started
        return channel

    def _request(self, call: str, op: str, *args: Any, timeout: float | None = None,
                 generation: int | None = None) -> Any:
        """One request/reply; ``generation``: the buffers' generation, which must still run."""
        channel = self._ensure_worker()
        if generation is not None and generation != self._generation:
            raise self._stale(call, generation)
        return self._exchange(channel, call, op, args,
                              self.timeout if timeout is None else timeout)

    def _exchange(self, channel: Channel, call: str, op: str, args: tuple,
                  timeout: float) -> Any:
        address = self.spec.address
        generation = self._generation
        frees = (_drain(self._pending_buffers, generation),
                 _drain(self._pending_executables, generation))
        seq = next(self._seq)
        try:
            data = dumps((seq, op, args, frees))
        except Exception as exc:  # the caller's arguments: nothing was sent
            self._pending_buffers.extend((generation, k) for k in frees[0])
            self._pending_executables.extend((generation, k) for k in frees[1])
            raise unsendable(f"{address} {call}", op, args, exc) from exc
        try:
            channel.send(data)
            reply = channel.receive(None if timeout == float("inf") else timeout)
        except ChannelTimeout:
            self._drop_worker()
            raise DeviceTimeoutError(f"{address} {call} timed out after {timeout:g} s; the "
                                     "worker was killed and restarts on the next call") from None
        except ChannelClosed as exc:
            self._drop_worker()
            raise DeviceCrashError(f"{address} {call} failed: {exc.reason}; the worker "
                                   "restarts on the next call") from None
        except BaseException:  # e.g. KeyboardInterrupt: the reply would arrive out of step
            self._drop_worker()
            raise
        try:
            reply_seq, ok, value = pickle.loads(reply)
        except Exception as exc:
            raise DeviceError(f"{address} {call}: the worker's reply cannot be read "
                              f"({type(exc).__name__}: {exc})") from exc
        if reply_seq != seq:
            if reply_seq is None and not ok:
                raise rebuild_error(value, f"{address} {call}")
            self._drop_worker()
            raise DeviceError(f"{address} {call}: reply {reply_seq} to request {seq}; the "
                              "worker was killed")
        if not ok:
            raise rebuild_error(value, f"{address} {call}")
        return value

    def _closed_error(self, call: str = "") -> DeviceError:
        where = f"{self.spec.address} {call}" if call else self.spec.address
        return DeviceError(f"{where}: the device is closed (its buffers and executables "
                           "went with it)")

    def _stale(self, call: str, generation: int) -> DeviceError:
        return DeviceError(f"{self.spec.address} {call}: buffer from before the device "
                           f"restarted (it belongs to worker generation {generation}, which "
                           "is gone); upload it again")

    def _buffer_key(self, buffer: Buffer, call: str) -> int:
        where = f"{self.spec.address} {call}"
        if not isinstance(buffer, Buffer):
            raise InputBindingError(f"{where}: expected a Buffer, got {type(buffer).__name__}")
        if buffer.device is not self:
            owner = getattr(buffer.device, "address", "another device")
            if owner == self.spec.address:
                owner = f"another device instance at the same address ({owner})"
            raise InputBindingError(f"{where}: the buffer belongs to {owner}, not this one")
        if self._closed:
            raise self._closed_error(call)
        try:
            generation, key = buffer.handle
        except (TypeError, ValueError):
            raise InputBindingError(f"{where}: the buffer's handle is not one this device "
                                    "made; make buffers with Device.upload") from None
        if generation != self._live_generation():
            raise self._stale(call, generation)
        return key

    def _new_buffer(self, key: int, ttype: TensorType, checksum: int | None = None) -> Buffer:
        buffer = Buffer(self, ttype, (self._generation, key), checksum)
        weakref.finalize(buffer, _queue_free, self._pending_buffers,
                         [self._generation, key]).atexit = False
        return buffer

    # -- the Device contract

    @property
    def capabilities(self) -> Capabilities:
        with self._lock:
            if self._caps is None or self._caps[0] != self._live_generation():
                caps = self._request("Device.capabilities", "capabilities")
                self._caps = (self._generation, caps)
            return self._caps[1]

    def upload(self, array: np.ndarray) -> Buffer:
        with self._lock:
            return self._new_buffer(*self._request("Device.upload", "upload", array))

    def download(self, buffer: Buffer) -> np.ndarray:
        with self._lock:
            key = self._buffer_key(buffer, "Device.download")
            return self._request("Device.download", "download", key,
                                 generation=buffer.handle[0])

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        with self._lock:
            key = self._request("Device.compile", "compile", graph, options,
                                timeout=self._slow_timeout)
            return IsolatedExecutable(self, graph, options, self._generation, key)

    def worker_stats(self) -> dict[str, int]:
        """The worker's live ``buffers`` and ``executables`` (after pending frees),
        ``rss_bytes``, ``open_fds``, ``pid`` and ``generation``: for leak checks."""
        with self._lock:
            stats = dict(self._request("worker stats", "stats"))
            stats["generation"] = self._generation
            return stats

    def restart(self) -> None:
        """Stop the worker; the next call starts a fresh one."""
        with self._lock:
            self._drop_worker()

    def close(self) -> None:
        """Stop the worker, letting the adapter close its device (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            channel, self._holder[0] = self._holder[0], None
            self._caps = None
            if channel is None:
                return
            if channel.is_alive():
                with contextlib.suppress(Exception):
                    self._exchange(channel, "Device.close", "close", (),
                                   min(self.timeout, _CLOSE_WAIT))
            channel.close(_CLOSE_WAIT)
