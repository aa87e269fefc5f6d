"""The host side of the device's word streams, as cocotb coroutines.

It drives ``polyhal_fpga_sim`` exactly as the host link does (docs/fpga.md):
inputs are driven and outputs sampled on the FALLING edge of ``clk`` (the
device moves a word on a rising edge where valid and ready are both high, so
a value seen at a falling edge is the one the next rising edge uses); a
command's words go back to back; while the device computes, the host waits on
a rising edge of ``out_valid`` rather than polling every cycle, so the
simulator free-runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from cocotb.triggers import FallingEdge, RisingEdge

from polyhal.simulators.fpga.golden import fields_to_word, word_to_fields
from polyhal.simulators.fpga.protocol import BufferId, Opcode
from polyhal.simulators.fpga.protocol import Status as Code
from polyhal.simulators.fpga.wire import STATUS_FIELDS

# The protocol's numbers under the short names the benches use.
OP_WRITE, OP_READ, OP_GEMM, OP_REQUANT, OP_STATUS = (int(op) for op in Opcode)
BUF_A, BUF_B, BUF_C, BUF_P, BUF_Q = (int(buf) for buf in BufferId)
STATUS_OK, STATUS_UNKNOWN_OPCODE, STATUS_OUT_OF_RANGE, STATUS_BAD_ARGUMENTS = (
    int(code) for code in Code)


class Status(NamedTuple):
    """A decoded status word."""

    opcode: int          #: field 0, the opcode echoed
    status: int          #: field 1: 0 ok, 1 unknown opcode, 2 out of range, 3 bad arguments
    cycle: int           #: fields 2-3, the cycle counter when the word was produced
    mac_beats: int       #: fields 4-5, array beats computed since reset
    cycles: int          #: field 6, the cycles this command took

    @classmethod
    def from_fields(cls, f: Sequence[int]) -> Status:
        """Decode the 32-bit fields of a status word."""
        return cls(f[0], f[1], f[2] | (f[3] << 32), f[4] | (f[5] << 32), f[6])


def word_bytes(dut: Any) -> int:
    """The device's stream word width in bytes."""
    return len(dut.in_data) // 8


async def reset(dut: Any, cycles: int = 4) -> None:
    """Hold ``rst`` for ``cycles`` cycles with the streams idle; returns at a falling edge."""
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    dut.in_valid.value = 0
    dut.in_data.value = 0
    dut.out_ready.value = 0
    for _ in range(cycles):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


async def send_words(dut: Any, words: Sequence[int]) -> None:
    """Send ``words`` back to back. Call and return at a falling edge of ``clk``."""
    for word in words:
        while not dut.in_ready.value:
            dut.in_valid.value = 0
            await FallingEdge(dut.clk)
        dut.in_data.value = int(word)
        dut.in_valid.value = 1
        await FallingEdge(dut.clk)      # the rising edge in between took it
    dut.in_valid.value = 0


async def receive_words(dut: Any, n: int) -> list[int]:
    """Receive ``n`` words. Call and return at a falling edge of ``clk``."""
    words: list[int] = []
    if n <= 0:
        return words
    dut.out_ready.value = 1
    while True:
        if dut.out_valid.value:
            words.append(dut.out_data.value.to_unsigned())
            await FallingEdge(dut.clk)  # the word moves on the rising edge in between
            if len(words) == n:
                break
        else:
            await RisingEdge(dut.out_valid)
            await FallingEdge(dut.clk)
    dut.out_ready.value = 0
    return words


def buffer_words(dut: Any) -> dict[int, int]:
    """The buffers' depths in words: the wrapper's parameters (read once per handle)."""
    cached = getattr(dut, "_polyhal_buffer_words", None)
    if cached is None:
        names = ("A_WORDS", "B_WORDS", "C_WORDS", "P_WORDS", "Q_WORDS")
        cached = {buf: int(getattr(dut, name).value) for buf, name in enumerate(names)}
        dut._polyhal_buffer_words = cached
    return cached


def read_in_range(dut: Any, buf: int, addr: int, n: int) -> bool:
    """Whether READ (buf, addr, n) is in range on this device, so that it sends data."""
    depth = buffer_words(dut).get(int(buf))
    return depth is not None and (n == 0 or addr + n <= depth)


async def command(dut: Any, opcode: int, args: Sequence[int] = (),
                  payload: Sequence[int] = (), data_words: int | None = None,
                  ) -> tuple[list[int], list[int]]:
    """Run one command; return its status word's fields 0..7 and its data words.

    It sends the header (``args`` are fields 1..) and the payload back to back,
    then reads the data words (a READ in range: ``args[2]`` of them; an
    out-of-range READ sends none, judged from the buffer depths, or pass
    ``data_words``) and the status word. Call and return at a falling edge of
    ``clk`` (after :func:`reset`). :meth:`Status.from_fields` decodes the fields.
    """
    if data_words is None:
        data_words = 0
        if opcode == OP_READ:
            f = [*(int(a) & 0xFFFFFFFF for a in args), 0, 0, 0][:3]
            data_words = f[2] if read_in_range(dut, *f) else 0
    await send_words(dut, [fields_to_word([opcode, *args]), *payload])
    words = await receive_words(dut, data_words + 1)
    return word_to_fields(words[-1], STATUS_FIELDS), words[:-1]
