"""The worker side of an isolated device: a :class:`WorkerServer` that holds the real
device and answers requests, and the entry point of a worker process."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
from typing import Any

import numpy as np

from polyhal.errors import AdapterContractError, DeviceError, PolyhalError, VerificationError
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.checked import CheckedDevice, CheckedExecutable, open_checked, uncopyable
from polyhal.hal.contract import Buffer, CompileOptions, Device, Executable, Profile
from polyhal.hal.wire import dumps, encode_error
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.ops.registry import lookup

__all__ = ["WorkerServer", "load_adapter_class", "process_worker_main"]


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
            return dumps((seq, False, encode_error(exc)))
        try:
            return dumps((seq, True, value))
        except Exception as exc:
            error = DeviceError(f"the result of {op!r} cannot be sent back from the worker "
                                f"({type(exc).__name__}: {exc})")
            return dumps((seq, False, encode_error(error)))

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


def process_worker_main(conn: multiprocessing.connection.Connection) -> None:
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
