"""Bench of polyhal_pe: one processing element, checked cycle by cycle against an
integer model (operands and control passed on one cycle later, int8 x int8
products accumulated with int32 wrap, the tile's sum captured on its last beat),
whose sums are golden.gemm_int8's dot products."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, Timer

from polyhal.simulators.fpga import golden as g
from polyhal.simulators.fpga.benches.common import (
    CLOCK_NS,
    rand_int8,
    reset,
    rngs,
    start_clock,
)


@dataclass
class PeModel:
    """The PE's registers after each rising edge."""

    acc: int = 0
    result: int = 0
    out: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)   # a, b, v, f, l

    def step(self, a: int, b: int, v: int, f: int, l: int) -> None:
        """One rising edge with these inputs (rst low)."""
        self.out = (a & 0xFF, b & 0xFF, v, f, l)
        if v:
            total = int(g.wrap_int32((0 if f else self.acc) + a * b))
            self.acc = total
            if l:
                self.result = total


def drive(dut: Any, a: int, b: int, v: int, f: int, l: int) -> None:
    """Present one cycle's inputs (call at a falling edge)."""
    dut.a_in.value = a & 0xFF
    dut.b_in.value = b & 0xFF
    dut.v_in.value = v
    dut.f_in.value = f
    dut.l_in.value = l


def check(dut: Any, model: PeModel, where: str) -> None:
    """Compare the PE's outputs with the model's registers."""
    got = (dut.a_out.value.to_unsigned(), dut.b_out.value.to_unsigned(),
           int(dut.v_out.value), int(dut.f_out.value), int(dut.l_out.value))
    assert got == model.out, f"{where}: outputs {got}, model {model.out}"
    result = dut.result.value.to_signed()
    assert result == model.result, f"{where}: result {result}, model {model.result}"


async def start(dut: Any) -> PeModel:
    """Start the clock, reset, and return the model of the reset PE."""
    start_clock(dut)
    drive(dut, 0, 0, 0, 0, 0)
    dut.rst.value = 1
    await reset(dut)
    model = PeModel()
    await FallingEdge(dut.clk)
    model.step(0, 0, 0, 0, 0)
    check(dut, model, "after reset")
    return model


@cocotb.test()
async def random_beats(dut: Any) -> None:
    """Random operands (extremes included) and random valid / first / last bits."""
    model = await start(dut)
    rnd, _ = rngs(dut, "pe_random_beats")
    for cycle in range(600):
        beat = (rand_int8(rnd), rand_int8(rnd), int(rnd.random() < 0.7),
                int(rnd.random() < 0.15), int(rnd.random() < 0.2))
        drive(dut, *beat)
        await FallingEdge(dut.clk)
        model.step(*beat)
        check(dut, model, f"cycle {cycle} inputs {beat}")


@cocotb.test()
async def tiles(dut: Any) -> None:
    """Tiles of K beats with bubbles: the result is golden.gemm_int8's dot product,
    held while the next tile accumulates; -128 x -128 and 127 x -128 products."""
    model = await start(dut)
    rnd, rng = rngs(dut, "pe_tiles")
    lengths = [1, 2, 3, 7, 16, 33] + [rnd.randint(1, 40) for _ in range(10)]
    for t, k in enumerate(lengths):
        if t == 0:
            a = np.full(k, -128, np.int8)
            b = np.full(k, -128, np.int8)
        elif t == 1:
            a, b = np.array([127, -128], np.int8), np.array([-128, -128], np.int8)
        else:
            a = rng.integers(-128, 128, k, dtype=np.int8)
            b = rng.integers(-128, 128, k, dtype=np.int8)
        want = int(g.gemm_int8(a.reshape(1, k), b.reshape(k, 1))[0, 0])
        held = model.result
        for i in range(k):
            while rnd.random() < 0.2:          # a bubble: nothing accumulates
                beat = (rand_int8(rnd), rand_int8(rnd), 0, 0, 0)
                drive(dut, *beat)
                await FallingEdge(dut.clk)
                model.step(*beat)
                check(dut, model, f"tile {t} bubble")
            beat = (int(a[i]), int(b[i]), 1, int(i == 0), int(i == k - 1))
            drive(dut, *beat)
            await FallingEdge(dut.clk)
            model.step(*beat)
            check(dut, model, f"tile {t} beat {i}")
            if i < k - 1:
                assert dut.result.value.to_signed() == held, f"tile {t}: result changed early"
        assert dut.result.value.to_signed() == want, f"tile {t} (K={k}): not the dot product"


async def long_tile(dut: Any, model: PeModel, a: int, b: int, k: int) -> None:
    """One tile of ``k`` equal beats, the middle ones run with a single Timer."""
    drive(dut, a, b, 1, 1, 0)
    await FallingEdge(dut.clk)
    drive(dut, a, b, 1, 0, 0)
    # To 2 ns before the falling edge after k - 2 rising edges (a Timer ending on a
    # falling edge races with it), then to that edge.
    await Timer((k - 2) * CLOCK_NS - 2, unit="ns")
    await FallingEdge(dut.clk)
    drive(dut, a, b, 1, 0, 1)
    await FallingEdge(dut.clk)
    drive(dut, 0, 0, 0, 0, 0)
    await FallingEdge(dut.clk)
    model.result = model.acc = int(g.wrap_int32(k * a * b))
    model.out = (0, 0, 0, 0, 0)
    check(dut, model, f"tile of {k} beats of {a} x {b}")


@cocotb.test()
async def accumulator_wraps(dut: Any) -> None:
    """int32 wrap-around both ways: 2^17 - 1 beats of -128 x -128 reach 2^31 - 16384
    (the largest sum of such beats that fits), 2^17 beats reach 2^31 (wraps to
    -2^31), 132200 beats of 127 x -128 pass -2^31 (wraps to a positive sum)."""
    model = await start(dut)
    rngs(dut, "pe_accumulator_wraps")
    for a, b, k in ((-128, -128, 2**17 - 1), (-128, -128, 2**17), (127, -128, 132200)):
        await long_tile(dut, model, a, b, k)
    assert model.result > 0 and dut.result.value.to_signed() == model.result
