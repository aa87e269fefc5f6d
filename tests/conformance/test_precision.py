"""Conformance in a precision mode: every compile in the mode, float32 cases graded at
the mode's tolerance, L0-L2 only, and only on devices that offer the mode."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal.conformance import run_suite
from polyhal.conformance.cases import Case
from polyhal.conformance.precision import graded_in
from polyhal.conformance.tolerances import Tolerance, precision_tolerance
from polyhal.errors import ConformanceError


def _case(dtype: str, shape_class: str = "rank2", level: str = "L1") -> Case:
    return Case(f"{level}/core.MatMul/{dtype}/{shape_class}-0", level, "core.MatMul", dtype,
                shape_class, expected=[np.zeros(2, dtype)], tolerance=Tolerance(1e-5, 1e-5))


def test_float32_cases_get_the_modes_tolerance_and_others_keep_theirs():
    widened = graded_in(_case("float32"), "bf16")
    assert widened.tolerance == precision_tolerance("core.MatMul", "bf16")
    assert graded_in(_case("float64"), "bf16").tolerance == Tolerance(1e-5, 1e-5)
    assert graded_in(_case("float32"), "fp32").tolerance == Tolerance(1e-5, 1e-5)
    model = graded_in(_case("float32", "model", "L2"), "fp16")
    assert model.tolerance.atol == pytest.approx(
        10 * precision_tolerance("core.MatMul", "fp16").atol)
    assert "outside its storage" in graded_in(_case("float32", "special"), "fp16").not_applicable
    assert "round to infinity" in graded_in(_case("float32", "special"), "tf32").not_applicable
    assert not graded_in(_case("float64", "special"), "fp16").not_applicable


def test_a_mode_the_device_does_not_offer_or_a_level_it_cannot_grade_is_refused():
    with pytest.raises(ConformanceError, match="cpu does not offer precision 'fp16'"):
        run_suite("cpu", levels=["L1"], precision="fp16")
    with pytest.raises(ConformanceError, match="grades levels L0, L1, L2 only, not L3"):
        run_suite("gpu-sim", levels=["L3"], precision="bf16")


def test_gpu_sim_passes_l1_and_l2_in_bf16():
    report = run_suite("gpu-sim", levels=["L1", "L2"], profile="ci", precision="bf16")
    bad = [(c.id, c.outcome, c.message) for c in report.cases
           if c.outcome not in ("passed", "not_applicable")]
    assert report.ok and not bad, bad[:10]
    assert report.precision == "bf16"
    loose = precision_tolerance("core.MatMul", "bf16").as_dict()
    matmul = [c for c in report.cases if c.id == "L1/core.MatMul/float32/rank2-0"]
    assert matmul and matmul[0].tolerance == loose
    skipped = [c for c in report.cases if c.outcome == "not_applicable"]
    assert skipped and all(c.shape_class == "special" and c.dtype == "float32"
                           for c in skipped)
