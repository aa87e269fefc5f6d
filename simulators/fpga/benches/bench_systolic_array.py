"""Bench of polyhal_systolic_array: tiles of int8 beats in, int32 rows out, checked
against golden.gemm_int8 (every row of every tile, in order, at the documented
latency: row r of a tile whose last beat is presented in cycle t, counting
cycles from falling edge to falling edge, is presented in cycle t + COLS + 1 + r)."""

from __future__ import annotations

import random
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, Timer

from polyhal.simulators.fpga import golden as g
from polyhal.simulators.fpga.benches.common import (
    CLOCK_NS,
    pack_lanes,
    params,
    rand_int8,
    reset,
    rngs,
    start_clock,
    unpack_lanes,
)


class Array:
    """Drives the array one beat per cycle and records every row it presents."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        p = params()
        self.r, self.c = p["ROWS"], p["COLS"]
        self.cycle = 0                                  # falling edges since start
        self.prev_last = -(1 << 30)                     # cycle of the last tile's last beat
        self.rows: list[tuple[int, list[int]]] = []     # (cycle, lanes) presented
        self.expected: list[tuple[int, list[int]]] = []

    def idle(self) -> None:
        """A bubble with no operands."""
        self.beat(0, 0, 0, [0] * self.r, [0] * self.c)

    def beat(self, valid: int, first: int, last: int, a: list[int], b: list[int]) -> None:
        """Present one beat (call at a falling edge)."""
        d = self.dut
        d.in_valid.value = valid
        d.in_first.value = first
        d.in_last.value = last
        d.in_a.value = pack_lanes(a, 8)
        d.in_b.value = pack_lanes(b, 8)

    async def tick(self) -> None:
        """Wait for the next falling edge and record a row presented there."""
        await FallingEdge(self.dut.clk)
        self.cycle += 1
        self.sample()

    def sample(self) -> None:
        """Record the row on the outputs, if any."""
        if int(self.dut.out_valid.value):
            self.rows.append((self.cycle, unpack_lanes(self.dut.out_data.value.to_unsigned(),
                                                       32, self.c)))

    async def bubble(self, rnd: random.Random) -> None:
        """One cycle of an invalid beat with random operands (they must not count)."""
        self.beat(0, 0, 0, [rand_int8(rnd) for _ in range(self.r)],
                  [rand_int8(rnd) for _ in range(self.c)])
        await self.tick()

    async def tile(self, a: np.ndarray, b: np.ndarray, rnd: random.Random,
                   bubbles: float = 0.0) -> None:
        """Send tile ``a [R, K] x b [K, C]`` with random bubbles and expect its rows.

        The array's contract: a tile's last beat comes at least max(ROWS, COLS)
        cycles after the previous tile's (bubbles are added before it if needed).
        """
        k = a.shape[1]
        for i in range(k):
            while rnd.random() < bubbles:
                await self.bubble(rnd)
            if i == k - 1:
                while self.cycle - self.prev_last < max(self.r, self.c):
                    await self.bubble(rnd)
            self.beat(1, int(i == 0), int(i == k - 1), [int(v) for v in a[:, i]],
                      [int(v) for v in b[i]])
            last_cycle = self.cycle           # the cycle this beat is presented in
            await self.tick()
        self.prev_last = last_cycle
        want = g.gemm_int8(a, b)
        self.expected += [(last_cycle + self.c + 1 + r, [int(v) for v in want[r]])
                          for r in range(self.r)]

    async def drain(self) -> None:
        """Idle until every expected row had time to leave, then compare."""
        self.idle()
        for _ in range(self.r + self.c + 4):
            await self.tick()
        assert len(self.rows) == len(self.expected), \
            f"{len(self.rows)} rows presented, {len(self.expected)} expected"
        for i, (got, want) in enumerate(zip(self.rows, self.expected, strict=True)):
            assert got[1] == want[1], f"row {i}: {got[1]}, golden {want[1]}"
            assert got[0] == want[0], f"row {i} presented in cycle {got[0]}, not {want[0]}"
        self.rows.clear()
        self.expected.clear()


async def start(dut: Any) -> Array:
    """Clock, reset; the driver at a falling edge with the array idle."""
    start_clock(dut)
    arr = Array(dut)
    arr.idle()
    dut.rst.value = 1
    await reset(dut)
    await FallingEdge(dut.clk)
    assert not int(dut.out_valid.value), "out_valid after reset"
    return arr


@cocotb.test()
async def tiles_back_to_back(dut: Any) -> None:
    """Random tiles of max(ROWS, COLS) beats or more, back to back, bubbles inside."""
    arr = await start(dut)
    rnd, rng = rngs(dut, "array_tiles_back_to_back")
    r, c = arr.r, arr.c
    kmin = max(r, c)
    for t in range(12):
        k = rnd.choice([1, 2, kmin, kmin + 1, rnd.randint(1, 3 * kmin)])
        a = rng.integers(-128, 128, (r, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, c), dtype=np.int8)
        await arr.tile(a, b, rnd, bubbles=0.25 if t % 3 == 2 else 0.0)
    await arr.drain()


@cocotb.test()
async def extremes(dut: Any) -> None:
    """All -128 x -128 products, 127 x -128 mixes, zeros and single-beat tiles."""
    arr = await start(dut)
    rnd, _ = rngs(dut, "array_extremes")
    r, c = arr.r, arr.c
    kmin = max(r, c)
    for k in (1, kmin, 3 * kmin):
        a = np.full((r, k), -128, np.int8)
        b = np.full((k, c), -128, np.int8)
        await arr.tile(a, b, rnd)
        a[0] = 127
        b[:, 0] = 127
        await arr.tile(a, b, rnd)
        await arr.tile(np.zeros((r, k), np.int8), b, rnd)
    await arr.drain()


@cocotb.test()
async def accumulators_wrap(dut: Any) -> None:
    """One tile of 132200 beats (a single Timer for the middle ones): lanes of
    -128 x -128 wrap past 2^31 - 1, 127 x -128 past -2^31, 127 x 127 stay below."""
    arr = await start(dut)
    rngs(dut, "array_accumulators_wrap")
    r, c = arr.r, arr.c
    k = 132200
    col_a = [-128] * r
    col_a[0] = 127
    row_b = [-128] * c
    row_b[0] = 127
    arr.beat(1, 1, 0, col_a, row_b)
    await arr.tick()
    arr.beat(1, 0, 0, col_a, row_b)
    # To 2 ns before the falling edge after k - 2 more beats, then to that edge
    # (no row is presented meanwhile: the previous tiles are long gone).
    await Timer((k - 2) * CLOCK_NS - 2, unit="ns")
    await FallingEdge(dut.clk)
    arr.cycle += k - 2
    arr.beat(1, 0, 1, col_a, row_b)
    last_cycle = arr.cycle
    await arr.tick()
    want = g.wrap_int32(np.outer(np.array(col_a, np.int64), np.array(row_b, np.int64)) * k)
    arr.expected += [(last_cycle + c + 1 + i, [int(v) for v in want[i]]) for i in range(r)]
    await arr.drain()
    if r > 1 and c > 1:
        assert int(want[1, 1]) != 16384 * k and int(want[0, 1]) != -16256 * k
