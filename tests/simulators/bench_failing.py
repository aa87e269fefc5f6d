"""A bench that fails on purpose: tests/simulators/test_fpga_rtl.py runs it through
build.run_bench to show that a failing bench fails its pytest test (its module
name does not start with ``test_``, so pytest does not collect it)."""

from __future__ import annotations

from typing import Any

import cocotb
from cocotb.triggers import Timer

MESSAGE = "deliberate failure 4242"


@cocotb.test()
async def passes(dut: Any) -> None:
    """A test that passes, so the run has one of each."""
    await Timer(1, unit="ns")


@cocotb.test()
async def fails_on_purpose(dut: Any) -> None:
    """A test that fails with MESSAGE."""
    await Timer(1, unit="ns")
    assert 1 + 1 == 3, MESSAGE
