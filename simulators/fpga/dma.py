"""The host side of the simulation wrapper's DMA engine (``polyhal_fpga_sim``).

:func:`run_batch` runs a batch of commands the way a host runs them through
a board's DMA queue: it writes every command's words into the wrapper's
``dma_in`` memory and their word counts into its descriptor tables, starts
the engine, waits for one edge (``dma_done``) while the device runs the whole
batch at one word per cycle, and reads the captured words back. Python
touches the simulation once per batch (plus a memory write or read per
word, with no clock edge in between), not once per cycle.

Batches larger than the wrapper's ``DMA_WORDS`` / ``DMA_COMMANDS`` go in
several runs. Words are little-endian byte strings here; they move as binary
strings through the handles' GPI objects, converted for a whole run at once
with numpy (cocotb's ``LogicArray`` conversion of a 1024-bit value costs
several times as much; cocotb is pinned to 2.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from cocotb.triggers import FallingEdge, RisingEdge

from polyhal.simulators.fpga import stream

_DEPOSIT = 0  # cocotb's _GPISetAction.DEPOSIT


class Dma:
    """The DMA engine of one ``polyhal_fpga_sim`` instance."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        self.bits = len(dut.in_data)
        self.words = int(dut.DMA_WORDS.value)
        self.commands = int(dut.DMA_COMMANDS.value)
        self._memory: dict[str, list[Any]] = {}
        self._start = 0

    async def reset(self) -> None:
        """Reset the device with the engine idle (:func:`~polyhal.simulators.fpga.stream.
        reset`); returns at a falling edge."""
        self.dut.dma_start.value = self._start = 0
        self.dut.dma_commands.value = 0
        await stream.reset(self.dut)

    def _handle(self, memory: str, index: int) -> Any:
        handles = self._memory.setdefault(memory, [])
        while len(handles) <= index:
            handles.append(getattr(self.dut, memory)[len(handles)]._handle)
        return handles[index]

    def _write(self, memory: str, index: int, text: str) -> None:
        self._handle(memory, index).set_signal_val_binstr(_DEPOSIT, text)

    def _bits(self, data: bytes) -> str:
        """``data`` (whole words, little-endian) as one string of each word's bits,
        most significant first."""
        width = self.bits // 8
        octets = np.frombuffer(data, np.uint8).reshape(-1, width)[:, ::-1]
        return (np.unpackbits(octets, axis=1) + ord("0")).tobytes().decode("ascii")

    def _bytes(self, texts: list[str]) -> bytes:
        """The inverse of :meth:`_bits` for a list of words' bit strings."""
        if not texts:
            return b""
        digits = np.frombuffer("".join(texts).encode("ascii"), np.uint8) - ord("0")
        if digits.max() > 1:
            raise RuntimeError("dma_out holds undefined (x/z) bits")
        octets = np.packbits(digits.reshape(len(texts), self.bits), axis=1)
        return octets[:, ::-1].tobytes()

    def chunks(self, batch: Sequence[tuple[bytes, int]]) -> list[int]:
        """Where ``batch`` ((bytes in, words out) per command) is cut into runs: the
        index one past each run's last command."""
        width = self.bits // 8
        cuts, words_in, words_out, count = [], 0, 0, 0
        for index, (data, out) in enumerate(batch):
            words = range(len(data) // width)
            if max(len(words), out) > self.words:
                raise ValueError(f"command {index} moves {max(len(words), out)} words; the "
                                 f"DMA engine holds {self.words}")
            if count and (words_in + len(words) > self.words or words_out + out > self.words
                          or count == self.commands):
                cuts.append(index)
                words_in = words_out = count = 0
            words_in += len(words)
            words_out += out
            count += 1
        return [*cuts, len(batch)]

    async def run(self, batch: Sequence[tuple[bytes, int]]) -> list[bytes]:
        """Run ``batch``: per command its words in (header and payload, as bytes) and
        the number of words it answers (data, then the status word). Returns each run
        command's words out, as bytes; a command whose status is not 0 is the last one
        run. Call and return at a falling edge."""
        results: list[bytes] = []
        if not batch:
            return results
        start = 0
        for stop in self.chunks(batch):
            done = await self._run(batch[start:stop])
            results += done
            if len(done) < stop - start:  # a command failed: the rest is not run
                break
            start = stop
        return results

    async def _run(self, batch: Sequence[tuple[bytes, int]]) -> list[bytes]:
        dut, bits, width = self.dut, self.bits, self.bits // 8
        text = self._bits(b"".join(data for data, _ in batch))
        position = 0
        for index, (data, out) in enumerate(batch):
            self._write("dma_in_words", index, format(len(data) // width, "032b"))
            self._write("dma_out_words", index, format(out, "032b"))
            for _ in range(len(data) // width):
                self._write("dma_in", position, text[position * bits:(position + 1) * bits])
                position += 1
        dut.dma_commands.value = len(batch)
        self._start ^= 1  # a toggle: two writes in one time step would keep only the last
        dut.dma_start.value = self._start
        await RisingEdge(dut.dma_done)
        await FallingEdge(dut.clk)
        ran, received = int(dut.dma_ran.value), int(dut.dma_received.value)
        data = self._bytes([self._handle("dma_out", i).get_signal_val_binstr()
                            for i in range(received)])
        results, position = [], 0
        for _, out in batch[:ran]:
            results.append(data[position * width:(position + out) * width])
            position += out
        return results
