"""The host <-> simulation wire format: length-prefixed binary frames on a socket.

A request carries a batch of device commands, each an opcode, seven argument
fields and a payload of whole stream words; the reply carries, per command
run, its status fields and the data words it read. Plain integers and bytes:
nothing on the wire is ever evaluated or unpickled.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

ARGS = 7
"""Argument fields of a command header (fields 1..7)."""
STATUS_FIELDS = 8
"""Status-word fields returned per command (fields 0..7)."""

BATCH, QUIT = 1, 3
"""Request kinds."""

SOCKET_ENV = "POLYHAL_FPGA_SOCKET"
"""The environment variable that gives the simulation the host's socket address."""

_MAX_FRAME = 1 << 31


@dataclass(frozen=True)
class Command:
    """One device command: ``opcode``, its argument fields and payload words (bytes)."""

    opcode: int
    args: tuple[int, ...] = ()
    payload: bytes = b""


@dataclass(frozen=True)
class Reply:
    """What one command returned: its status word's fields and the data it read."""

    status: tuple[int, ...]
    data: bytes

    @property
    def code(self) -> int:
        """The status code (0 = ok)."""
        return self.status[1]

    @property
    def cycle(self) -> int:
        """The device's cycle counter when the command completed."""
        return self.status[2] | self.status[3] << 32

    @property
    def mac_beats(self) -> int:
        """The device's MAC-beat counter when the command completed."""
        return self.status[4] | self.status[5] << 32

    @property
    def cycles(self) -> int:
        """Cycles the command took on the device."""
        return self.status[6]


class WireError(Exception):
    """The peer closed the connection or sent a malformed frame."""


def encode_request(kind: int, commands: Sequence[Command] = ()) -> bytes:
    """A request frame's body."""
    parts = [struct.pack("<II", kind, len(commands))]
    for cmd in commands:
        args = tuple(cmd.args) + (0,) * (ARGS - len(cmd.args))
        if len(args) != ARGS or not all(0 <= a < 1 << 32 for a in args):
            raise ValueError(f"command {cmd.opcode}: arguments {cmd.args} are not "
                             f"{ARGS} unsigned 32-bit fields")
        parts.append(struct.pack(f"<I{ARGS}II", cmd.opcode, *args, len(cmd.payload)))
        parts.append(cmd.payload)
    return b"".join(parts)


def decode_request(body: bytes) -> tuple[int, list[Command]]:
    """The kind and commands of a request frame's body (:class:`WireError` when it is
    malformed)."""
    try:
        return _decode_request(body)
    except struct.error as exc:
        raise WireError(f"truncated request: {exc}") from exc


def _decode_request(body: bytes) -> tuple[int, list[Command]]:
    kind, count = struct.unpack_from("<II", body)
    offset, commands = 8, []
    head = struct.Struct(f"<I{ARGS}II")
    for _ in range(count):
        opcode, *fields = head.unpack_from(body, offset)
        offset += head.size
        size = fields.pop()
        commands.append(Command(opcode, tuple(fields), body[offset:offset + size]))
        offset += size
    if offset != len(body):
        raise WireError(f"request has {len(body) - offset} trailing bytes")
    return kind, commands


def encode_reply(replies: Sequence[Reply]) -> bytes:
    """A reply frame's body."""
    parts = [struct.pack("<I", len(replies))]
    for reply in replies:
        parts.append(struct.pack(f"<{STATUS_FIELDS}II", *reply.status, len(reply.data)))
        parts.append(reply.data)
    return b"".join(parts)


def decode_reply(body: bytes) -> list[Reply]:
    """The replies of a reply frame's body (:class:`WireError` when it is malformed)."""
    try:
        return _decode_reply(body)
    except struct.error as exc:
        raise WireError(f"truncated reply: {exc}") from exc


def _decode_reply(body: bytes) -> list[Reply]:
    (count,), offset, replies = struct.unpack_from("<I", body), 4, []
    head = struct.Struct(f"<{STATUS_FIELDS}II")
    for _ in range(count):
        *status, size = head.unpack_from(body, offset)
        offset += head.size
        replies.append(Reply(tuple(status), body[offset:offset + size]))
        offset += size
    if offset != len(body):
        raise WireError(f"reply has {len(body) - offset} trailing bytes")
    return replies


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Send one frame."""
    sock.sendall(struct.pack("<Q", len(body)) + body)


def recv_frame(sock: socket.socket) -> bytes:
    """Receive one frame (raises :class:`WireError` when the peer is gone)."""
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size > _MAX_FRAME:
        raise WireError(f"frame of {size} bytes exceeds the limit of {_MAX_FRAME}")
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise WireError("the simulation closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
