"""The fpga adapter in the conformance suite: L0 and L4-quant bit for bit, coverage
naming the claimed ops, and a device with a requantizer defect that L4-quant fails."""

from __future__ import annotations

from typing import Any

from polyhal import hal
from polyhal.adapters.fpga import CAPABILITIES, FpgaAdapter, FpgaDevice, FpgaExecutable
from polyhal.conformance import run_suite
from polyhal.hal import CompileOptions, Executable
from polyhal.ir import Graph


class HalfUpOnlyExecutable(FpgaExecutable):
    """A requantizer that always rounds half up (ignores ``rounding="half_even"``)."""

    def __init__(self, device: FpgaDevice, graph: Graph) -> None:
        super().__init__(device, graph)
        for step in self.steps:
            step.attrs = {**step.attrs, "rounding": "half_up"}
            if step.requant is not None:
                node, attrs = step.requant
                step.requant = (node, {**attrs, "rounding": "half_up"})


class HalfUpOnlyDevice(FpgaDevice):
    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        super().compile(graph, options)  # the same checks
        return HalfUpOnlyExecutable(self, graph)


class HalfUpOnlyAdapter(FpgaAdapter):
    name = "fpga-half-up"
    device_class = HalfUpOnlyDevice
    executable_class = HalfUpOnlyExecutable

    def open(self, index: int = 0, **options: Any) -> FpgaDevice:
        opened = FpgaAdapter.open(self, index, **options)
        opened.__class__ = HalfUpOnlyDevice
        return opened


def test_fpga_passes_l0_and_l4_quant_bit_exactly():
    report = run_suite("fpga", levels=["L0", "L4-quant"], profile="ci")
    bad = [(c.id, c.outcome, c.message) for c in report.cases if c.outcome != "passed"]
    assert report.ok and not bad, bad
    levels = {c.level for c in report.cases}
    assert levels == {"L0", "L4-quant"}
    quant = [c for c in report.cases if c.level == "L4-quant"]
    assert len(quant) >= 20
    assert all(c.max_abs_err == 0 for c in quant if c.max_abs_err is not None)
    ids = {c.id for c in quant}
    assert {"L4-quant/MatMulInteger/int8/wrap-128", "L4-quant/MatMulInteger/int8/empty-k",
            "L4-quant/Requantize/int8/ties-half_even"} <= ids, sorted(ids)
    claimed = {op for domain in report.coverage.values() for op in domain["claimed_ops"]}
    assert claimed == set(CAPABILITIES.ops)


def test_a_requantizer_that_ignores_half_even_fails_l4_quant():
    hal.register(HalfUpOnlyAdapter, replace=True)
    try:
        report = run_suite("fpga-half-up", levels=["L4-quant"], profile="ci", isolate=False)
    finally:
        hal.unregister(HalfUpOnlyAdapter.name)
    failed = {c.id for c in report.cases if c.outcome == "failed"}
    assert not report.ok
    assert "L4-quant/Requantize/int8/ties-half_even" in failed, sorted(failed)
    assert not any(i.endswith("half_up") for i in failed)
