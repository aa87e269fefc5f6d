"""Shared helpers of the benches: the seed, the build parameters, a clock, reset."""

from __future__ import annotations

import json
import os
import random
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

ENV_SEED = "POLYHAL_FPGA_SEED"
ENV_PARAMS = "POLYHAL_FPGA_PARAMS"
DEFAULT_SEED = 20240601


def seed() -> int:
    """The bench seed (``$POLYHAL_FPGA_SEED``, else a fixed default)."""
    return int(os.environ.get(ENV_SEED, DEFAULT_SEED))


def rngs(dut: Any, salt: str) -> tuple[random.Random, np.random.Generator]:
    """Python and numpy generators for one test, logged with the seed."""
    s = seed()
    dut._log.info("seed %d (set %s to reproduce)", s, ENV_SEED)
    mixed = (s * 1_000_003 + sum(map(ord, salt))) % 2**32
    return random.Random(mixed), np.random.default_rng(mixed)


def params() -> dict[str, int]:
    """The HDL parameters of the build under test (set by build.run_bench)."""
    return {k: int(v) for k, v in json.loads(os.environ.get(ENV_PARAMS, "{}")).items()}


def as_signed(v: int, bits: int) -> int:
    """Two's complement value of the low ``bits`` of ``v``."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


CLOCK_NS = 10
"""The clock period the benches of modules without their own clock use."""


def start_clock(dut: Any) -> None:
    """Drive ``dut.clk`` with a 10 ns clock (the simulator's own clock driver, so a
    long ``Timer`` runs without a Python callback per cycle)."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns", impl="gpi").start())


async def reset(dut: Any, cycles: int = 2) -> None:
    """Hold ``dut.rst`` high for ``cycles`` cycles; returns at a falling edge."""
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    for _ in range(cycles):
        await FallingEdge(dut.clk)
    dut.rst.value = 0


def rand_int8(rnd: random.Random) -> int:
    """A random int8, the extremes -128 and 127 a quarter of the time."""
    return rnd.choice((-128, 127)) if rnd.random() < 0.25 else rnd.randint(-128, 127)


def pack_lanes(values: list[int], bits: int) -> int:
    """Little-endian lanes of ``bits`` bits each (two's complement) as one integer."""
    word = 0
    for i, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (bits * i)
    return word


def unpack_lanes(word: int, bits: int, count: int, signed: bool = True) -> list[int]:
    """The inverse of :func:`pack_lanes`."""
    out = [(int(word) >> (bits * i)) & ((1 << bits) - 1) for i in range(count)]
    return [as_signed(v, bits) for v in out] if signed else out


def known(value: Any) -> int:
    """A signal value as an unsigned int; 0 while it holds X or Z bits."""
    return value.to_unsigned() if value.is_resolvable else 0
