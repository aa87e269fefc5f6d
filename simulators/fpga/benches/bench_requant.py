"""Bench of polyhal_requant: LANES pipelined requantizer lanes, checked against
golden.requantize_scalar (quant.Requantize, bit-exact) with a fixed latency of
four cycles, the tag riding along; random and corner-case entries, a new one
(or a bubble) every cycle, per-entry flags and zero points."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge

from polyhal.simulators.fpga import golden as g
from polyhal.simulators.fpga.benches.common import (
    pack_lanes,
    params,
    reset,
    rngs,
    start_clock,
    unpack_lanes,
)

LATENCY = 4
INT32 = (-(2**31), 2**31 - 1)
M_MAX = 2**31 - 1


def _entry(rnd: random.Random, lanes: int, corner: Iterator[tuple[int, int, int, int]],
           ) -> dict[str, Any]:
    """One entry's inputs: corner cases first, then random ones of several kinds."""
    xs, ms, ss, bs = [], [], [], []
    for _ in range(lanes):
        case = next(corner, None)
        if case is None:
            kind = rnd.random()
            if kind < 0.35:      # the pass's multipliers, realistic shifts
                case = (rnd.randint(*INT32), rnd.randint(2**30, M_MAX), rnd.randint(28, 45),
                        rnd.randint(*INT32))
            elif kind < 0.6:     # small values: ties and exact rounding
                case = (rnd.randint(-40, 40), rnd.randint(1, 8), rnd.randint(0, 4),
                        rnd.randint(-8, 8))
            elif kind < 0.8:     # the edges of every range
                case = (rnd.choice([*INT32, 0, 1, -1, rnd.randint(*INT32)]),
                        rnd.choice([0, 1, M_MAX, 2**30, rnd.randint(0, M_MAX)]),
                        rnd.choice([0, 1, 2, 31, 32, 62, 63, rnd.randint(0, 63)]),
                        rnd.choice([*INT32, 0, rnd.randint(*INT32)]))
            else:                # anything in range
                case = (rnd.randint(*INT32), rnd.randint(0, M_MAX), rnd.randint(0, 63),
                        rnd.randint(*INT32))
        xs.append(case[0])
        ms.append(case[1])
        ss.append(case[2])
        bs.append(case[3])
    return {"x": xs, "mult": ms, "shift": ss, "bias": bs, "bias_en": rnd.getrandbits(1),
            "half_even": rnd.getrandbits(1), "relu": rnd.getrandbits(1),
            "zp": rnd.choice([0, -128, 127, -1, 1, rnd.randint(-128, 127)]),
            "tag": 0}


def expected(e: dict[str, Any]) -> list[int]:
    """golden.requantize_scalar for every lane of entry ``e``."""
    rounding = "half_even" if e["half_even"] else "half_up"
    return [g.requantize_scalar(x, m, s, b if e["bias_en"] else 0, e["zp"], rounding,
                                e["relu"])
            for x, m, s, b in zip(e["x"], e["mult"], e["shift"], e["bias"], strict=True)]


def drive(dut: Any, e: dict[str, Any] | None) -> None:
    """Present entry ``e`` (None: a bubble with stale operands)."""
    dut.in_valid.value = int(e is not None)
    if e is None:
        return
    dut.in_x.value = pack_lanes(e["x"], 32)
    dut.in_mult.value = pack_lanes(e["mult"], 32)
    dut.in_shift.value = pack_lanes(e["shift"], 6)
    dut.in_bias.value = pack_lanes(e["bias"], 32)
    dut.in_bias_en.value = e["bias_en"]
    dut.in_half_even.value = e["half_even"]
    dut.in_relu.value = e["relu"]
    dut.in_zp.value = e["zp"] & 0xFF
    dut.in_tag.value = e["tag"]


async def run_entries(dut: Any, entries: list[dict[str, Any] | None]) -> int:
    """Feed one entry (or bubble) per cycle and check every output; the count checked."""
    p = params()
    lanes, tag_w = p["LANES"], p["TAG_W"]
    # Entry i is presented before falling edge i + 1 and comes out at edge i + LATENCY.
    pipe: list[dict[str, Any] | None] = [None] * (LATENCY - 1)
    checked = 0
    for i, e in enumerate([*entries, *([None] * LATENCY)]):
        drive(dut, e)
        await FallingEdge(dut.clk)
        pipe.append(e)
        want = pipe.pop(0)
        valid = int(dut.out_valid.value)
        assert valid == int(want is not None), f"cycle {i}: out_valid {valid}"
        if want is not None:
            got = unpack_lanes(dut.out_y.value.to_unsigned(), 8, lanes)
            tag = dut.out_tag.value.to_unsigned()
            assert tag == want["tag"] % (1 << tag_w), f"cycle {i}: tag {tag}, sent {want['tag']}"
            gold = expected(want)
            for lane in range(lanes):
                assert got[lane] == gold[lane], (
                    f"cycle {i} lane {lane}: y {got[lane]}, golden {gold[lane]} for x "
                    f"{want['x'][lane]} multiplier {want['mult'][lane]} shift "
                    f"{want['shift'][lane]} bias {want['bias'][lane]} (enabled "
                    f"{want['bias_en']}) zero_point {want['zp']} half_even "
                    f"{want['half_even']} relu {want['relu']}")
            checked += 1
    return checked


async def start(dut: Any) -> None:
    """Clock, idle inputs, reset; returns at a falling edge."""
    start_clock(dut)
    dut.in_valid.value = 0
    dut.rst.value = 1
    drive(dut, {"x": [0], "mult": [0], "shift": [0], "bias": [0], "bias_en": 0,
                "half_even": 0, "relu": 0, "zp": 0, "tag": 0})
    dut.in_valid.value = 0
    await reset(dut)
    await FallingEdge(dut.clk)
    assert not int(dut.out_valid.value), "out_valid after reset"


@cocotb.test()
async def corners_all_flags(dut: Any) -> None:
    """Every golden.REQUANT_CORNERS case under all 8 flag combinations and the
    extreme zero points."""
    await start(dut)
    rnd, _ = rngs(dut, "requant_corners_all_flags")
    lanes = params()["LANES"]
    corners = g.REQUANT_CORNERS
    entries: list[dict[str, Any] | None] = []
    tag = 0
    for flags in range(8):
        for zp in (0, -128, 127, -3, 5):
            for start_i in range(0, len(corners), lanes):
                chunk = [corners[(start_i + j) % len(corners)] for j in range(lanes)]
                e = _entry(rnd, lanes, iter(chunk))
                e.update(bias_en=flags >> 2 & 1, half_even=flags >> 1 & 1, relu=flags & 1,
                         zp=zp, tag=tag)
                tag += 1
                entries.append(e)
    n = await run_entries(dut, entries)
    dut._log.info("%d entries of %d lanes checked", n, lanes)


@cocotb.test()
async def random_stream(dut: Any) -> None:
    """Random entries with random bubbles, flags and zero points per entry."""
    await start(dut)
    rnd, _ = rngs(dut, "requant_random_stream")
    lanes = params()["LANES"]
    entries: list[dict[str, Any] | None] = []
    for i in range(400):
        if rnd.random() < 0.2:
            entries.append(None)
            continue
        e = _entry(rnd, lanes, iter(()))
        e["tag"] = rnd.getrandbits(params()["TAG_W"]) if i % 3 else i
        entries.append(e)
    n = await run_entries(dut, entries)
    dut._log.info("%d entries of %d lanes checked", n, lanes)
