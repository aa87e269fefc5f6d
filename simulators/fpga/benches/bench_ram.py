"""Bench of polyhal_ram: the simple dual-port RAM behind every buffer, checked
against a word-image model: contents start cleared, writes honour the lane
enables, reads have one cycle of latency and return the old word when the same
address is written in the same cycle."""

from __future__ import annotations

from typing import Any

import cocotb
from cocotb.triggers import FallingEdge

from polyhal.simulators.fpga.benches.common import params, rngs, start_clock


class RamModel:
    """The RAM as DEPTH words of LANES lanes of WIDTH / LANES bits (lane l is
    bits [l*LW +: LW], as the device's little-endian entries)."""

    def __init__(self, width: int, lanes: int, depth: int) -> None:
        self.width, self.lanes, self.depth = width, lanes, depth
        self.lane_bits = width // lanes
        self.words = [0] * depth

    def write(self, we: int, addr: int, data: int) -> None:
        """One clock edge's write."""
        mask = 0
        for lane in range(self.lanes):
            if we >> lane & 1:
                mask |= ((1 << self.lane_bits) - 1) << (lane * self.lane_bits)
        self.words[addr] = (self.words[addr] & ~mask) | (data & mask)


async def start(dut: Any) -> tuple[RamModel, dict[str, int]]:
    """Clock and idle ports; returns at a falling edge."""
    p = params()
    start_clock(dut)
    dut.we.value = 0
    dut.waddr.value = 0
    dut.wdata.value = 0
    dut.raddr.value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    return RamModel(p["WIDTH"], p["LANES"], p["DEPTH"]), p


@cocotb.test()
async def starts_cleared(dut: Any) -> None:
    """Every word reads zero before any write (both simulators, no X)."""
    model, p = await start(dut)
    rngs(dut, "ram_starts_cleared")
    for addr in range(p["DEPTH"] + 1):
        if addr < p["DEPTH"]:
            dut.raddr.value = addr
        await FallingEdge(dut.clk)
        if addr:
            got = dut.rdata.value.to_unsigned()
            assert got == model.words[addr - 1] == 0, f"word {addr - 1} reads {got:#x}"


@cocotb.test()
async def random_traffic(dut: Any) -> None:
    """Random writes (random lane enables, all lanes, none) and reads every cycle,
    the same address often on both ports; a full write and read-back at the end."""
    model, p = await start(dut)
    rnd, _ = rngs(dut, "ram_random_traffic")
    depth, lanes, width = p["DEPTH"], p["LANES"], p["WIDTH"]
    full = (1 << lanes) - 1
    for cycle in range(1500):
        we = rnd.choice([0, full, rnd.getrandbits(lanes), 1 << rnd.randrange(lanes)])
        waddr = rnd.randrange(depth)
        raddr = waddr if rnd.random() < 0.3 else rnd.randrange(depth)
        data = rnd.getrandbits(width)
        dut.we.value = we
        dut.waddr.value = waddr
        dut.wdata.value = data
        dut.raddr.value = raddr
        await FallingEdge(dut.clk)
        # The edge just passed read raddr before writing: rdata is the old word.
        want = model.words[raddr]
        model.write(we, waddr, data)
        got = dut.rdata.value.to_unsigned()
        assert got == want, f"cycle {cycle}: read {raddr} gave {got:#x}, model {want:#x}"
    dut.we.value = 0
    for addr in range(depth):
        dut.raddr.value = addr
        await FallingEdge(dut.clk)
        got = dut.rdata.value.to_unsigned()
        assert got == model.words[addr], f"word {addr} reads {got:#x}"
