"""The host side of the simulation wrapper's DMA engine (``polyhal_fpga_sim``).

:func:`run_batch` runs a batch of commands the way a host runs them through
a board's DMA queue: it writes every command's words into the wrapper's
``dma_in`` memory and their word counts into its descriptor tables, starts
the engine, waits for one edge (``dma_done``) while the device runs the whole
batch at one word per cycle, and reads the captured words back. Python
touches the simulation once per batch (plus a memory write or read per
word, with no clock edge in between), not once per cycle.

Batches larger than the wrapper's ``DMA_WORDS`` / ``DMA_COMMANDS`` go in
several runs. The words move as binary strings through the handles' GPI
objects (cocotb's ``LogicArray`` conversion of a 1024-bit value costs three
times as much; cocotb is pinned to 2.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cocotb.triggers import FallingEdge, RisingEdge

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

    def _handle(self, memory: str, index: int) -> Any:
        handles = self._memory.setdefault(memory, [])
        while len(handles) <= index:
            handles.append(getattr(self.dut, memory)[len(handles)]._handle)
        return handles[index]

    def _write(self, memory: str, index: int, value: int, bits: int) -> None:
        self._handle(memory, index).set_signal_val_binstr(_DEPOSIT, format(value, f"0{bits}b"))

    def _read(self, memory: str, index: int) -> int:
        text = self._handle(memory, index).get_signal_val_binstr()
        try:
            return int(text, 2)
        except ValueError:
            raise RuntimeError(f"{memory}[{index}] holds undefined bits: {text[:64]}...") from None

    def chunks(self, batch: Sequence[tuple[Sequence[int], int]]) -> list[int]:
        """Where ``batch`` ((words in, words out) per command) is cut into runs: the
        index one past each run's last command."""
        cuts, words_in, words_out, count = [], 0, 0, 0
        for index, (words, out) in enumerate(batch):
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

    async def run(self, batch: Sequence[tuple[Sequence[int], int]]) -> list[list[int]]:
        """Run ``batch``: per command its words in and the number of words it answers
        (data, then the status word). Returns each run command's words out; a command
        whose status is not 0 is the last one run. Call and return at a falling edge."""
        results: list[list[int]] = []
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

    async def _run(self, batch: Sequence[tuple[Sequence[int], int]]) -> list[list[int]]:
        dut, position = self.dut, 0
        for index, (words, out) in enumerate(batch):
            self._write("dma_in_words", index, len(words), 32)
            self._write("dma_out_words", index, out, 32)
            for word in words:
                self._write("dma_in", position, int(word), self.bits)
                position += 1
        dut.dma_commands.value = len(batch)
        self._start ^= 1  # a toggle: two writes in one time step would keep only the last
        dut.dma_start.value = self._start
        await RisingEdge(dut.dma_done)
        await FallingEdge(dut.clk)
        ran, received = int(dut.dma_ran.value), int(dut.dma_received.value)
        words_out = [self._read("dma_out", i) for i in range(received)]
        results, position = [], 0
        for _, out in batch[:ran]:
            results.append(words_out[position:position + out])
            position += out
        return results
