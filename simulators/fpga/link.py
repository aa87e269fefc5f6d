"""The host side of the link: one persistent simulation of the device.

:class:`SimulationLink` builds the RTL (cached), starts the simulator once in
its own process group with :mod:`polyhal.simulators.fpga.server` serving a
Unix socket, and sends it batches of commands. A simulator that dies, stops
answering or breaks the protocol becomes a :class:`~polyhal.errors.DeviceError`;
the link is then closed, and the next :meth:`SimulationLink.transact` starts a
fresh simulation (its :attr:`~SimulationLink.generation` tells callers that
the device's memories are blank again).

This is the one class a board driver replaces: a vendor keeps the commands
and layouts and swaps the socket for the board's DMA queue.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from polyhal.errors import DeviceError
from polyhal.simulators.fpga import wire
from polyhal.simulators.fpga.build import DEVICE, build, check_parameters, choose_simulator


class SimulationLink:
    """A device under RTL simulation, reached through its command stream."""

    def __init__(self, parameters: Mapping[str, int] | None = None,
                 simulator: str | None = None, *, timeout_s: float = 600.0,
                 start_timeout_s: float = 600.0) -> None:
        self.parameters = check_parameters(parameters, DEVICE)
        self.simulator = choose_simulator(simulator)
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.generation = 0
        """Incremented at every start: device memory is blank in a new generation."""
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._socket: socket.socket | None = None
        self._folder: Path | None = None

    @property
    def word_bytes(self) -> int:
        """Bytes per stream word."""
        return self.parameters["WORD_BYTES"]

    @property
    def pid(self) -> int | None:
        """The simulation's process id (its process group's leader), while it runs."""
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        """True while a simulation is started and alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Build (or find the cached build) and start the simulation unless it runs."""
        with self._lock:
            if not self.running:
                self._stop()
                self._start()

    def transact(self, commands: Sequence[wire.Command]) -> list[wire.Reply]:
        """Run ``commands`` in order; a command with a non-zero status ends the batch.

        A simulation that is not running (never started, or lost to a fault) is
        started first."""
        for command in commands:
            if len(command.payload) % self.word_bytes:
                raise ValueError(f"command {command.opcode}: a payload of "
                                 f"{len(command.payload)} bytes is not whole "
                                 f"{self.word_bytes}-byte words")
        with self._lock:
            self.start()
            return self._exchange(wire.encode_request(wire.BATCH, commands),
                                  f"{len(commands)} command(s)")

    def close(self) -> None:
        """End the simulation (politely if it still answers)."""
        with self._lock:
            if self.running and self._socket is not None:
                try:
                    self._socket.settimeout(10)
                    wire.send_frame(self._socket, wire.encode_request(wire.QUIT))
                    wire.recv_frame(self._socket)
                    self._process.wait(timeout=30)
                except (OSError, wire.WireError, subprocess.TimeoutExpired):
                    pass
            self._stop()

    def __enter__(self) -> SimulationLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _exchange(self, request: bytes, what: str) -> list[wire.Reply]:
        assert self._socket is not None
        try:
            self._socket.settimeout(self.timeout_s)
            wire.send_frame(self._socket, request)
            return wire.decode_reply(wire.recv_frame(self._socket))
        except TimeoutError as exc:
            raise self._fault(f"did not answer {what} within {self.timeout_s:g} s") from exc
        except (OSError, wire.WireError, ValueError) as exc:
            raise self._fault(f"failed during {what}: {exc}") from exc

    def _fault(self, problem: str) -> DeviceError:
        log = self._log_tail()
        self._stop()
        return DeviceError(f"fpga simulation ({self.simulator}) {problem}"
                           + (f"; its last output:\n{log}" if log else ""))

    def _start(self) -> None:
        build_dir = build(DEVICE, self.parameters, self.simulator)
        self._folder = Path(tempfile.mkdtemp(prefix="polyhal-fpga-"))
        address = str(self._folder / "link.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
        listener.listen(1)
        env = {**os.environ, wire.SOCKET_ENV: address}
        command = [sys.executable, "-m", "polyhal.simulators.fpga.launch", self.simulator,
                   str(build_dir), str(self._folder)]
        with open(self._folder / "simulation.log", "wb") as log:
            self._process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        self.generation += 1
        try:
            self._socket = self._accept(listener)
        finally:
            listener.close()

    def _accept(self, listener: socket.socket) -> socket.socket:
        deadline = time.monotonic() + self.start_timeout_s
        listener.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                connection, _ = listener.accept()
                return connection
            except TimeoutError:
                if not self.running:
                    raise self._fault("exited before it connected") from None
        raise self._fault(f"did not connect within {self.start_timeout_s:g} s")

    def _stop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            if self._process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._process = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _log_tail(self, lines: int = 20) -> str:
        if self._folder is None:
            return ""
        try:
            text = (self._folder / "simulation.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])
