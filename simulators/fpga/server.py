"""The simulation side of the link: a cocotb test that serves device commands.

Started once per open device (by :mod:`polyhal.simulators.fpga.launch`), it
connects to the host's socket, resets the device and then runs each batch of
commands it receives through the wrapper's DMA engine
(:mod:`polyhal.simulators.fpga.dma`), and answers with their status words and
data. While it waits for the host the simulation does not advance. It ends
when the host says so or goes away.
"""

from __future__ import annotations

import os
import socket

import cocotb

from polyhal.simulators.fpga import wire
from polyhal.simulators.fpga.dma import Dma
from polyhal.simulators.fpga.golden import fields_to_word
from polyhal.simulators.fpga.protocol import Opcode
from polyhal.simulators.fpga.stream import read_in_range, word_bytes


def _bytes_in(cmd: wire.Command, word_bytes: int) -> bytes:
    """A command's words as bytes: its header, then its payload."""
    header = fields_to_word([cmd.opcode, *cmd.args]).to_bytes(word_bytes, "little")
    return header + cmd.payload


def _answer_words(dut, cmd: wire.Command) -> int:
    """How many words the device answers ``cmd`` with: a READ in range its data, and
    every command its status word."""
    if cmd.opcode != Opcode.READ:
        return 1
    buffer, address, count = [*cmd.args, 0, 0, 0][:3]
    return 1 + (count if read_in_range(dut, buffer, address, count) else 0)


async def _run(dut, dma: Dma, commands: list[wire.Command], width: int
               ) -> list[wire.Reply]:
    batch = [(_bytes_in(cmd, width), _answer_words(dut, cmd)) for cmd in commands]
    replies = []
    for data in await dma.run(batch):
        status = data[-width:]
        fields = tuple(int.from_bytes(status[4 * i:4 * i + 4], "little")
                       for i in range(wire.STATUS_FIELDS))
        replies.append(wire.Reply(fields, data[:-width]))
    return replies


@cocotb.test()
async def serve(dut) -> None:
    """Serve the host until it quits or disconnects."""
    width = word_bytes(dut)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ[wire.SOCKET_ENV])
    dma = Dma(dut)
    await dma.reset()
    try:
        while True:
            try:
                kind, commands = wire.decode_request(wire.recv_frame(sock))
            except wire.WireError:
                return  # the host went away: end the simulation
            if kind == wire.QUIT:
                wire.send_frame(sock, wire.encode_reply([]))
                return
            wire.send_frame(sock, wire.encode_reply(await _run(dut, dma, commands, width)))
    finally:
        sock.close()
