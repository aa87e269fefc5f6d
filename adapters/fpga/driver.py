"""The host driver: matrix operations as command batches for the device.

The tiler cuts a GEMM into chunks that fit the on-chip buffers (N in whole
column tiles, M in whole row tiles, K only when one column strip of B cannot
fit), packs each chunk into the device's layouts, and sends the whole
operation as one batch: per N chunk its weights (and requantization records)
once, then per M chunk the activations, GEMM, optionally REQUANT, and the
READ of the results. Every batch opens with a STATUS command, so the cycles
and MAC beats it took are exact differences of the device's counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from polyhal.errors import DeviceError, UnsupportedError
from polyhal.simulators.fpga import layout
from polyhal.simulators.fpga.protocol import BUFFER_WORDS, BufferId, Opcode, RequantFlag, Status
from polyhal.simulators.fpga.wire import Command, Reply


@runtime_checkable
class Link(Protocol):
    """What the driver needs of a device: its parameters and a command queue.

    :class:`~polyhal.simulators.fpga.link.SimulationLink` (the RTL under an HDL
    simulator) and :class:`~polyhal.simulators.fpga.model_link.ModelLink` (the
    golden model) implement it; a board driver implements it over the board's
    DMA queue (docs/fpga.md).
    """

    parameters: Mapping[str, int]
    """The device's HDL parameters (ROWS, COLS, WORD_BYTES, the buffer depths)."""
    generation: int
    """Incremented whenever the device starts afresh (its memories blank)."""

    def start(self) -> None:
        """Bring the device up unless it is up (may take long: builds, boots)."""

    def transact(self, commands: Sequence[Command]) -> list[Reply]:
        """Run ``commands`` in order and return one reply per command run; a command
        with a non-zero status ends the batch. A lost device is a DeviceError, and the
        next call starts it again."""

    def close(self) -> None:
        """Release the device."""


@dataclass(frozen=True)
class Requant:
    """Requantization of int32 results to int8, one parameter per column."""

    multiplier: np.ndarray
    shift: np.ndarray
    bias: np.ndarray | None
    zero_point: int
    rounding: str
    relu: bool

    @property
    def flags(self) -> int:
        """REQUANT's flags field."""
        return ((RequantFlag.RELU if self.relu else 0)
                | (RequantFlag.HALF_EVEN if self.rounding == "half_even" else 0)
                | (RequantFlag.BIAS if self.bias is not None else 0))

    def columns(self, start: int, stop: int, width: int) -> np.ndarray:
        """P records of columns ``start:stop``, padded to ``width`` records."""
        zero = np.zeros(stop - start, np.int32)
        bias = zero if self.bias is None else self.bias[start:stop]
        records = layout.pack_p(self.multiplier[start:stop], self.shift[start:stop], bias,
                                stop - start)
        return layout.pad_to(records, (width,))


@dataclass
class Counters:
    """What the device did since the last :meth:`Driver.reset_counters`."""

    cycles: int = 0
    mac_beats: int = 0
    commands: int = 0
    words_in: int = 0
    words_out: int = 0
    batches: int = 0
    per_batch: list[int] = field(default_factory=list)


class Driver:
    """Runs integer matrix work on a device behind ``link``."""

    def __init__(self, link: Link) -> None:
        params = link.parameters
        self.link = link
        self.rows, self.cols = params["ROWS"], params["COLS"]
        self.word = params["WORD_BYTES"]
        self.capacity = {b: params[name] * self.word for b, name in BUFFER_WORDS.items()}
        tile = {BufferId.A: self.rows, BufferId.B: self.cols,
                BufferId.C: 4 * self.rows * self.cols, BufferId.Q: self.rows * self.cols,
                BufferId.P: layout.P_RECORD.itemsize * self.cols}
        for buffer, need in tile.items():
            if self.capacity[buffer] < need:
                name = BUFFER_WORDS[buffer]
                raise UnsupportedError(
                    f"HDL parameter {name}={params[name]} is too small: the {buffer.name} "
                    f"buffer must hold one tile ({need} bytes, {self.word}-byte words)")
        self.counters = Counters()

    def reset_counters(self) -> None:
        """Start counting afresh."""
        self.counters = Counters()

    # ----------------------------------------------------------------- operations

    def gemm(self, a: np.ndarray, b: np.ndarray, requant: Requant | None = None
             ) -> np.ndarray:
        """``a [M, K] @ b [K, N]`` (int8) in int32, or requantized to int8."""
        (m, k), n = a.shape, b.shape[1]
        out = np.zeros((m, n), np.int8 if requant else np.int32)
        if m == 0 or n == 0:
            return out
        if k == 0:  # empty sums: nothing to multiply
            return self.requantize(out.astype(np.int32), requant) if requant else out
        k_chunk = self._k_chunk(k)
        if k > k_chunk:  # partial sums added here, wrapping as the device does
            acc = np.zeros((m, n), np.int64)
            for k0 in range(0, k, k_chunk):
                acc += self.gemm(a[:, k0:k0 + k_chunk], b[k0:k0 + k_chunk])
            acc32 = acc.astype(np.int32)  # wraps: numpy casts int64 -> int32 modulo 2^32
            return self.requantize(acc32, requant) if requant else acc32
        n_tiles, m_tiles = self._gemm_chunks(k, requant is not None)
        commands, reads = [], []
        for n0 in range(0, n, n_tiles * self.cols):
            n1 = min(n, n0 + n_tiles * self.cols)
            nt = layout.tiles(n1 - n0, self.cols)
            commands.append(self._write(BufferId.B, layout.pack_b(b[:, n0:n1], self.cols)))
            if requant:
                commands.append(self._write(BufferId.P, requant.columns(n0, n1, nt * self.cols)))
            for m0 in range(0, m, m_tiles * self.rows):
                m1 = min(m, m0 + m_tiles * self.rows)
                commands.append(self._write(BufferId.A, layout.pack_a(a[m0:m1], self.rows)))
                commands.append(Command(Opcode.GEMM, (layout.tiles(m1 - m0, self.rows), nt, k,
                                                      0, 0, 0)))
                if requant:
                    commands.append(self._requant(requant, m1 - m0, nt))
                commands.append(self._read(BufferId.Q if requant else BufferId.C,
                                           (m1 - m0) * nt * self.cols * (1 if requant else 4)))
                reads.append((m0, m1, n0, n1))
        self._unpack(self._transact([c for c in commands if c is not None]), reads, out)
        return out

    def requantize(self, x: np.ndarray, requant: Requant) -> np.ndarray:
        """``x [M, N]`` (int32) requantized to int8."""
        m, n = x.shape
        out = np.zeros((m, n), np.int8)
        if m == 0 or n == 0:
            return out
        n_tiles = max(1, min(layout.tiles(n, self.cols),
                             self.capacity[BufferId.P] // (layout.P_RECORD.itemsize * self.cols),
                             self.capacity[BufferId.C] // (4 * self.cols)))
        commands, reads = [], []
        for n0 in range(0, n, n_tiles * self.cols):
            n1 = min(n, n0 + n_tiles * self.cols)
            nt = layout.tiles(n1 - n0, self.cols)
            rows = max(1, min(self.capacity[BufferId.C] // (4 * nt * self.cols),
                              self.capacity[BufferId.Q] // (nt * self.cols)))
            commands.append(self._write(BufferId.P, requant.columns(n0, n1, nt * self.cols)))
            for m0 in range(0, m, rows):
                m1 = min(m, m0 + rows)
                commands.append(self._write(BufferId.C, layout.pack_c(x[m0:m1, n0:n1],
                                                                      self.cols)))
                commands.append(self._requant(requant, m1 - m0, nt))
                commands.append(self._read(BufferId.Q, (m1 - m0) * nt * self.cols))
                reads.append((m0, m1, n0, n1))
        self._unpack(self._transact(commands), reads, out)
        return out

    # ------------------------------------------------------------------ planning

    def _k_chunk(self, k: int) -> int:
        """The longest K the A and B buffers hold with one row and one column tile."""
        return max(1, min(k, self.capacity[BufferId.A] // self.rows,
                          self.capacity[BufferId.B] // self.cols))

    def _gemm_chunks(self, k: int, requant: bool) -> tuple[int, int]:
        """Column tiles per N chunk and row tiles per M chunk for inner dimension ``k``."""
        tile_c = self.rows * self.cols * 4
        n_tiles = min(self.capacity[BufferId.B] // (k * self.cols),
                      self.capacity[BufferId.C] // tile_c)
        if requant:
            n_tiles = min(n_tiles, self.capacity[BufferId.P]
                          // (layout.P_RECORD.itemsize * self.cols))
        n_tiles = max(1, n_tiles)
        m_tiles = min(self.capacity[BufferId.A] // (self.rows * k),
                      self.capacity[BufferId.C] // (tile_c * n_tiles))
        if requant:
            m_tiles = min(m_tiles, self.capacity[BufferId.Q] // (self.rows * self.cols * n_tiles))
        return n_tiles, max(1, m_tiles)

    # ------------------------------------------------------------------ commands

    def _write(self, buffer: BufferId, data: np.ndarray) -> Command | None:
        payload = layout.words(data, self.word)
        if not payload:
            return None
        return Command(Opcode.WRITE, (buffer, 0, len(payload) // self.word), payload)

    def _read(self, buffer: BufferId, size: int) -> Command:
        return Command(Opcode.READ, (buffer, 0, layout.tiles(size, self.word)))

    def _requant(self, requant: Requant, rows: int, n_tiles: int) -> Command:
        return Command(Opcode.REQUANT, (rows, n_tiles, requant.zero_point & 0xFF,
                                        requant.flags, 0, 0, 0))

    def _transact(self, commands: list[Command]) -> list[Reply]:
        batch = [Command(Opcode.STATUS), *commands]
        replies = self.link.transact(batch)
        failed = [(c, r) for c, r in zip(batch, replies, strict=False) if r.code != Status.OK]
        if failed or len(replies) != len(batch):
            cmd, reply = failed[0] if failed else (None, None)
            what = (f"{Opcode(cmd.opcode).name} {list(cmd.args)} answered status "
                    f"{_status_name(reply.code)}" if cmd else
                    f"{len(replies)} replies to {len(batch)} commands")
            raise DeviceError(f"fpga: {what}")
        start, end = replies[0], replies[-1]
        c = self.counters
        c.cycles += end.cycle - start.cycle
        c.per_batch.append(end.cycle - start.cycle)
        c.mac_beats += end.mac_beats - start.mac_beats
        c.commands += len(commands)
        c.words_in += sum(1 + len(cmd.payload) // self.word for cmd in commands)
        c.words_out += sum(len(r.data) // self.word + 1 for r in replies)
        c.batches += 1
        return replies[1:]

    def _unpack(self, replies: list[Reply], reads: list[tuple[int, int, int, int]],
                out: np.ndarray) -> None:
        data = [r.data for r in replies if r.status[0] == Opcode.READ]
        unpack = layout.unpack_q if out.dtype == np.int8 else layout.unpack_c
        for (m0, m1, n0, n1), chunk in zip(reads, data, strict=True):
            out[m0:m1, n0:n1] = unpack(chunk, m1 - m0, n1 - n0, self.cols)


def _status_name(code: int) -> str:
    try:
        return Status(code).name
    except ValueError:
        return str(code)
