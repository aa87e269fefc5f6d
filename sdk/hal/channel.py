"""Channels: the transport between an isolated device and its worker.

A :class:`Channel` moves pickled bytes to one worker *generation* and back: one
request, then its reply (:mod:`polyhal.hal.wire` pickles them). A channel
factory (``WorkerSpec -> Channel``) starts the worker with ``spec.env`` applied.
:class:`ProcessChannel` (a ``spawn`` process and a pipe) is the default;
:class:`polyhal.hal.remote.RayChannel` is the other. Every process worker still
running at interpreter exit is asked to stop, then killed.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Channel", "ChannelClosed", "ChannelTimeout", "ProcessChannel", "WorkerSpec",
           "describe_exit", "main_guard_hint"]

_EXIT_WAIT = 1.0  # seconds the interpreter-exit hook waits for all workers together


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


def main_guard_hint() -> str:
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
from polyhal.hal.worker import process_worker_main
process_worker_main(conn)
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
