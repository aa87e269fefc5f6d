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
- :class:`Channel` — the transport to one worker *generation*: ``send``
  (bytes), ``receive(timeout)`` (bytes, or :class:`ChannelTimeout` /
  :class:`ChannelClosed`), ``is_alive``, ``kill``, ``close``. Requests and
  replies are pickled by the proxy, so a channel only moves bytes.
  :class:`ProcessChannel` (a ``spawn`` process and a pipe) is the default;
  :class:`polyhal.hal.remote.RayChannel` (a Ray actor wrapping
  :class:`WorkerServer`) is the other; any ``WorkerSpec -> Channel`` callable can
  be passed as ``channel_factory=`` to :class:`IsolatedDevice`.
- :class:`WorkerServer` — the worker side, transport-free: it opens the
  device and turns request bytes into reply bytes.

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

import atexit
import contextlib
import importlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import weakref
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.errors import (
    AdapterContractError,
    DeviceCrashError,
    DeviceError,
    DeviceTimeoutError,
    InputBindingError,
    PolyhalError,
    VerificationError,
)
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.checked import CheckedDevice, CheckedExecutable, open_checked, uncopyable
from polyhal.hal.contract import Buffer, CompileOptions, Device, Executable, Profile
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.ops.registry import lookup

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
_EXIT_WAIT = 1.0  # seconds the interpreter-exit hook waits for all workers together


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


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


_ARGUMENTS = {
    "open": ("the adapter class", "the adapter name", "the index", "options"),
    "compile": ("the graph", "the CompileOptions"),
    "upload": ("the array",),
    "execute": ("the executable", "arrays"),
}
"""What the arguments of each request are called in the error for one that cannot be sent."""


def _unsendable(where: str, op: str, args: tuple, exc: Exception) -> PolyhalError:
    """The caller's error for a request ``op`` whose ``args`` cannot be pickled: a
    :class:`PolyhalError` naming the innermost argument that cannot (an
    :class:`InputBindingError` for an array; one that cannot be copied for want of
    memory names its shape and size). Called only once pickling failed."""
    names = _ARGUMENTS.get(op, ())
    found = None
    for index, arg in enumerate(args):
        found = _unpicklable(arg, names[index] if index < len(names) else f"argument {index}")
        if found is not None:
            break
    name, value, error = found or ("the request", args, exc)
    if isinstance(value, np.ndarray) and isinstance(error, MemoryError):
        return uncopyable(where, value, error, name)
    kind = InputBindingError if isinstance(value, np.ndarray) else PolyhalError
    return kind(f"{where}: {name} cannot be sent to the device's worker process, as it "
                f"cannot be pickled ({type(error).__name__}: {error})")


def _unpicklable(value: Any, name: str, depth: int = 0
                 ) -> tuple[str, Any, Exception] | None:
    """The innermost part of ``value`` (called ``name``) that cannot be pickled, with its
    name and the error, looking ``depth`` levels down at most; ``None`` when ``value``
    pickles."""
    try:
        _dumps(value)
    except Exception as exc:
        for part_name, part in _parts(value, name) if depth < 4 else ():
            found = _unpicklable(part, part_name, depth + 1)
            if found is not None:
                return found
        return name, value, exc
    return None


def _parts(value: Any, name: str) -> list[tuple[str, Any]]:
    """The named parts of a container that the requests send."""
    if isinstance(value, CompileOptions):
        return [("CompileOptions.precision", value.precision),
                *((f"CompileOptions.extra[{key!r}]", item) for key, item in value.extra.items())]
    if isinstance(value, Mapping):
        return [(f"{name}[{key!r}]", item) for key, item in value.items()]
    if isinstance(value, list | tuple):
        return [(f"{name}[{index}]", item) for index, item in enumerate(value)]
    return []


# --------------------------------------------------------------------------- errors


ErrorPayload = tuple[tuple[tuple[str, str], ...], str, str]
"""An exception as plain strings (always picklable): its classes, most derived first, as
``(module, qualname)``; its message; its traceback text."""


def encode_error(exc: BaseException) -> ErrorPayload:
    """``exc`` as an :data:`ErrorPayload`, to send to another process (the worker's
    errors here; :mod:`polyhal.conformance.parallel`'s too)."""
    cls = type(exc)
    classes = tuple((c.__module__, c.__qualname__) for c in cls.__mro__
                    if c not in (BaseException, Exception, object))
    try:
        message = str(exc)
    except Exception:
        message = f"<{cls.__name__} with an unprintable message>"
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:
        text = f"{cls.__name__}: {message}\n"
    return classes, message, text


def _loaded_class(module: str, qualname: str) -> type | None:
    # Only classes already loaded here: rebuilding an error must never import (an
    # adapter's modules may need the worker's environment, e.g. numba's simulator).
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def rebuild_error(payload: ErrorPayload, where: str) -> PolyhalError:
    """The caller-side exception for an error the worker reported: the same
    ``PolyhalError`` class (or its nearest base loaded here) with the same message;
    anything else as a ``DeviceError`` naming the type and carrying the traceback."""
    classes, message, text = payload
    for module, qualname in classes:
        cls = _loaded_class(module, qualname)
        if cls is None or not issubclass(cls, PolyhalError):
            continue
        try:
            exc = cls(message)
        except Exception:
            continue
        if isinstance(exc, PolyhalError):
            exc.worker_traceback = text  # type: ignore[attr-defined]
            return exc
    module, qualname = classes[0] if classes else ("builtins", "Exception")
    name = qualname if module == "builtins" else f"{module}.{qualname}"
    exc = DeviceError(f"{where} raised {name}: {message}\n"
                      f"worker traceback:\n{text.rstrip()}")
    exc.worker_traceback = text  # type: ignore[attr-defined]
    return exc


# --------------------------------------------------------------------------- channels


class ChannelTimeout(Exception):
    """No reply came within the timeout (the worker may still be running)."""


class ChannelClosed(Exception):
    """The worker is gone (exited, killed, or the connection broke); ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class WorkerSpec:
    """What a channel factory needs to start a worker for one device."""

    adapter_path: str
    """``module:qualname`` of the adapter class."""
    adapter_name: str
    index: int
    options: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    """Set in the worker's environment before it imports anything heavy."""

    @property
    def address(self) -> str:
        """``ADAPTER:INDEX``."""
        return f"{self.adapter_name}:{self.index}"


class Channel(ABC):
    """The transport to one worker generation. A channel moves pickled bytes: one
    request, then its reply. A channel factory (``WorkerSpec -> Channel``) starts
    the worker with ``spec.env`` applied; the first request is ``open``."""

    @abstractmethod
    def send(self, data: bytes) -> None:
        """Send one request; raise :class:`ChannelClosed` if the worker is gone."""

    @abstractmethod
    def receive(self, timeout: float | None) -> bytes:
        """The next reply; :class:`ChannelTimeout` after ``timeout`` seconds (None: wait
        forever), :class:`ChannelClosed` if the worker dies first."""

    @abstractmethod
    def is_alive(self) -> bool:
        """True while the worker runs."""

    @abstractmethod
    def kill(self, wait: bool = True) -> None:
        """Stop the worker now (idempotent); ``wait=False`` must not block (finalizers)."""

    def close(self, timeout: float) -> None:
        """Stop the worker after it has been asked to close; kill it after ``timeout`` s."""
        self.kill()


_live_channels: set[Channel] = set()
_live_lock = threading.Lock()


def describe_exit(code: int | None, process: str = "worker") -> str:
    """How ``process`` ended, from its exit code (negative: a signal)."""
    if code is None:
        return f"the {process} is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"{process} killed by signal {-code} ({name})"
    return f"{process} exited with exit code {code}"


def _main_guard_hint() -> str:
    """What most often kills a spawned worker before it answers: ``spawn`` runs the top
    level of the parent's main script in the worker first, and a script that starts
    devices there makes the worker start one too, which multiprocessing refuses."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return ""
    return (f"A worker first runs the top level of the main script "
            f"({os.path.basename(path)}); if it opens devices or runs conformance outside "
            "`if __name__ == \"__main__\":`, move that work under it")


_BOOTSTRAP = """\
import os
os.environ.update(env)
from polyhal.hal.isolation import _process_worker_main
_process_worker_main(conn)
"""
# The worker's entry point is ``exec(_BOOTSTRAP, ...)``: a builtin, so unpickling it
# in the child imports nothing, and the environment is set before polyhal (and so
# numpy and the adapter's libraries) is imported.


class ProcessChannel(Channel):
    """A worker in a ``spawn``-started local process, spoken to over a pipe."""

    def __init__(self, spec: WorkerSpec) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        env = {str(k): str(v) for k, v in spec.env.items()}
        self._process = ctx.Process(
            target=exec, args=(_BOOTSTRAP, {"env": env, "conn": child_conn}),
            name=f"polyhal-worker-{spec.address}", daemon=False)
        try:
            self._process.start()
        except BaseException:
            parent_conn.close()
            raise
        finally:
            child_conn.close()  # the worker has its copy: EOF here means it is gone
        self._conn = parent_conn
        self._pid = os.getpid()
        self.pid = self._process.pid
        with _live_lock:
            _live_channels.add(self)

    def send(self, data: bytes) -> None:
        try:
            self._conn.send_bytes(data)
        except (OSError, EOFError, ValueError) as exc:
            raise ChannelClosed(self._reason_after_eof()) from exc

    def receive(self, timeout: float | None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        sentinel = self._process.sentinel
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait([self._conn, sentinel], left)
            if self._conn in ready:
                try:
                    return self._conn.recv_bytes()
                except (OSError, EOFError) as exc:
                    raise ChannelClosed(self._reason_after_eof()) from exc
            if sentinel in ready:
                # Exited: a reply written just before exiting is still readable.
                if self._conn.poll(0):
                    continue
                raise ChannelClosed(self._reason_after_eof())
            if deadline is not None and time.monotonic() >= deadline:
                raise ChannelTimeout()

    def _reason_after_eof(self) -> str:
        self._process.join(2.0)
        if self._process.is_alive():  # the pipe broke but the process lingers
            self.kill()
            return "the connection to the worker broke; worker killed"
        return describe_exit(self._process.exitcode)

    @property
    def exitcode(self) -> int | None:
        """The worker's exit code (``None`` while it runs; negative: killed by a signal)."""
        return self._process.exitcode

    def is_alive(self) -> bool:
        return os.getpid() == self._pid and self._process.is_alive()

    def kill(self, wait: bool = True) -> None:
        if os.getpid() != self._pid:  # a forked copy: the process is not ours
            return
        with contextlib.suppress(Exception):
            self._conn.close()
        with contextlib.suppress(Exception):
            if self._process.exitcode is None:
                self._process.terminate()
                if wait:
                    self._process.join(1.0)
                    if self._process.exitcode is None:
                        self._process.kill()
                        self._process.join(1.0)
        if wait or self._process.exitcode is not None:
            with _live_lock:
                _live_channels.discard(self)

    def close(self, timeout: float) -> None:
        if os.getpid() != self._pid:
            return
        with contextlib.suppress(Exception):
            self._conn.close()  # EOF: an idle worker closes its device and exits
        with contextlib.suppress(Exception):
            self._process.join(timeout)
        self.kill()


def _stop_all_workers() -> None:
    """At interpreter exit: ask every worker to stop, then kill the stragglers."""
    with _live_lock:
        channels = list(_live_channels)
    for channel in channels:
        if isinstance(channel, ProcessChannel):
            with contextlib.suppress(Exception):
                channel._conn.close()
    deadline = time.monotonic() + _EXIT_WAIT
    for channel in channels:
        if isinstance(channel, ProcessChannel):
            with contextlib.suppress(Exception):
                channel._process.join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(Exception):
            channel.kill()


# Registered after multiprocessing's own exit hook (imported above), so it runs first.
atexit.register(_stop_all_workers)


# --------------------------------------------------------------------------- worker side


def load_adapter_class(path: str, who: str) -> type:
    """Import the adapter class at ``module:qualname`` and register it here (a process
    that hosts a device may not have it registered); ``who`` names the importer in the
    ``DeviceError`` raised when it cannot be imported."""
    from polyhal.hal.registry import register

    module, _, qualname = path.partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except Exception as exc:
        raise DeviceError(f"{who} cannot import the adapter class {path} "
                          f"({type(exc).__name__}: {exc}); an adapter must be defined at "
                          "module level to be hosted in another process") from exc
    with contextlib.suppress(PolyhalError):  # already registered under that name
        register(cls, replace=True)
    return cls


class WorkerServer:
    """The worker side of an isolated device, independent of the transport.

    ``handle(request bytes) -> reply bytes``. A request is ``(seq, op, args, frees)``
    where ``frees`` is ``(buffer ids, executable ids)`` to drop before the op; a reply
    is ``(seq, True, value)`` or ``(seq, False, ErrorPayload)``.
    """

    def __init__(self) -> None:
        self.checked: CheckedDevice | None = None
        """The open device (``.inner``), wrapped in the contract's checks (see
        :meth:`op_execute`)."""
        self.buffers: dict[int, Buffer] = {}
        self.executables: dict[int, CheckedExecutable] = {}
        """The device's executables, each wrapped in the contract's checks."""
        self.closed = False
        self._ids = itertools.count(1)

    def handle(self, data: bytes) -> bytes:
        seq = None
        try:
            seq, op, args, (free_buffers, free_executables) = pickle.loads(data)
            for i in free_buffers:
                self.buffers.pop(i, None)
            for i in free_executables:
                self.executables.pop(i, None)
            method = getattr(self, f"op_{op}", None)
            if method is None:
                raise DeviceError(f"unknown worker request {op!r}")
            value = method(*args)
        except Exception as exc:
            return _dumps((seq, False, encode_error(exc)))
        try:
            return _dumps((seq, True, value))
        except Exception as exc:
            error = DeviceError(f"the result of {op!r} cannot be sent back from the worker "
                                f"({type(exc).__name__}: {exc})")
            return _dumps((seq, False, encode_error(error)))

    def _device(self) -> Device:
        return self._checked().inner

    def _checked(self) -> CheckedDevice:
        if self.checked is None:
            raise DeviceError("the worker has no open device")
        return self.checked

    def _add_buffer(self, buffer: Any, where: str) -> tuple[int, TensorType, int | None]:
        if not isinstance(buffer, Buffer):
            raise AdapterContractError(f"{where} returned {type(buffer).__name__}, not a Buffer")
        if not isinstance(buffer.type, TensorType):
            raise AdapterContractError(f"{where} returned a buffer whose type is "
                                       f"{type(buffer.type).__name__}, not a TensorType")
        key = next(self._ids)
        self.buffers[key] = buffer
        return key, buffer.type, buffer.checksum

    def _buffer(self, key: int) -> Buffer:
        try:
            return self.buffers[key]
        except KeyError:
            raise DeviceError(f"the worker has no buffer {key} (already freed?)") from None

    def _executable(self, key: int) -> CheckedExecutable:
        try:
            return self.executables[key]
        except KeyError:
            raise DeviceError(f"the worker has no executable {key} (already freed?)") from None

    # The requests. Each returns something picklable.

    def op_open(self, adapter_path: str, name: str, index: int, options: dict) -> int:
        cls = load_adapter_class(adapter_path, f"{name}:{index}: the worker")
        self.checked = CheckedDevice(open_checked(cls(), index, options), f"{name}:{index}")
        return os.getpid()

    def op_capabilities(self) -> Capabilities:
        return self._device().capabilities

    def op_upload(self, array: np.ndarray) -> tuple[int, TensorType, int | None]:
        checked = self._checked()  # the caller's side checked the array
        try:
            buffer = checked.inner.upload(array)
        except MemoryError as exc:  # the caller's array is too large to copy here
            raise uncopyable(checked._upload_where, array, exc) from exc
        return self._add_buffer(buffer, "Device.upload")

    def op_download(self, key: int) -> np.ndarray:
        return self._device().download(self._buffer(key))

    def op_compile(self, graph: Graph, options: CompileOptions) -> int:
        checked = self._checked()
        for node in graph.nodes:  # an unpickled graph is not verified again here
            if lookup(node.op, node.domain) is None:
                raise VerificationError(
                    f"graph {graph.name!r}: node {node.name!r} ({node.qualified_op}): unknown "
                    f"op {node.qualified_op} in the device's worker process (an op "
                    "registered at run time exists only in the process that registered it)")
        executable = checked.inner.compile(graph, options)
        if not isinstance(executable, Executable):
            raise AdapterContractError(f"Device.compile returned {type(executable).__name__}, "
                                       "not an Executable")
        key = next(self._ids)
        self.executables[key] = CheckedExecutable(checked, executable, graph)
        return key

    def op_run(self, key: int, inputs: list[int]
               ) -> list[tuple[int, TensorType, int | None]]:
        executable = self._executable(key).inner  # the caller's side checks the run
        outputs = executable.run([self._buffer(i) for i in inputs])
        if not isinstance(outputs, list | tuple):
            raise AdapterContractError(f"Executable.run returned {type(outputs).__name__}, "
                                       "not a list of buffers")
        return [self._add_buffer(b, "Executable.run") for b in outputs]

    def op_execute(self, key: int, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Upload, run and download here, each call checked as the caller's side checks
        it (:meth:`CheckedExecutable.run_arrays`): no buffer outlives the request."""
        return self._executable(key).run_arrays(arrays)

    def op_profile(self, key: int) -> Profile | None:
        return self._executable(key).inner.profile()

    def op_free(self) -> None:
        """Nothing but the frees that ride along with every request."""

    def op_stats(self) -> dict[str, int]:
        return {"buffers": len(self.buffers), "executables": len(self.executables),
                "rss_bytes": _rss_bytes(), "open_fds": _open_fds(), "pid": os.getpid()}

    def op_close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Drop every table and close the device (idempotent)."""
        self.closed = True
        self.buffers.clear()
        self.executables.clear()
        checked, self.checked = self.checked, None
        if checked is not None:
            checked.inner.close()


def _rss_bytes() -> int:
    """The worker's resident memory (-1 where it cannot be told)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the peak, not current
        return peak if sys.platform == "darwin" else peak * 1024
    except Exception:
        return -1


def _open_fds() -> int:
    """The worker's open file descriptors (-1 where it cannot be told)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(folder))
    return -1


def _watch_parent(parent: int) -> None:
    # A hung worker never reads its pipe's EOF, so it also watches its parent.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(70)


def _process_worker_main(conn: multiprocessing.connection.Connection) -> None:
    """The worker process: serve requests from ``conn`` until ``close`` or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True,
                     name="polyhal-parent-watch").start()
    server = WorkerServer()
    try:
        while not server.closed:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                break
            reply = server.handle(data)
            try:
                conn.send_bytes(reply)
            except (EOFError, OSError):
                break
    finally:
        if not server.closed:
            with contextlib.suppress(Exception):
                server.shutdown()
        conn.close()


# --------------------------------------------------------------------------- caller side


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
                    and channel.exitcode == 1 and (hint := _main_guard_hint())):
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
            data = _dumps((seq, op, args, frees))
        except Exception as exc:  # the caller's arguments: nothing was sent
            self._pending_buffers.extend((generation, k) for k in frees[0])
            self._pending_executables.extend((generation, k) for k in frees[1])
            raise _unsendable(f"{address} {call}", op, args, exc) from exc
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
