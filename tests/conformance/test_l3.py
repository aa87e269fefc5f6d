"""Level L3: which gradient cases exist, how a defect only gradients reach is
graded, how cases that do not apply are reported, and the training steps."""

from __future__ import annotations

import json
from collections import Counter

import jsonschema
import pytest

from polyhal import hal
from polyhal.conformance import run_suite, write_report
from polyhal.conformance.levels import GENERATORS, l3
from polyhal.conformance.manifest import Entry
from polyhal.conformance.profiles import get_profile
from polyhal.conformance.report import SCHEMA_PATH
from polyhal.conformance.runner import (
    CaseResult,
    apply_expectations,
    execute_case,
    generate_cases,
)
from polyhal.conformance.tolerances import BY_DTYPE, GRADIENT_SCALE, LOOSER_SCALE
from polyhal.hal import open_device
from polyhal.ir import DType

from . import gradient_adapters as adapters


@pytest.fixture(scope="module")
def reference_cases():
    with open_device("reference") as device:
        return generate_cases(device.capabilities, ["L3"], "ci")


@pytest.fixture
def registered():
    names = []

    def add(cls):
        hal.register(cls, replace=True)
        names.append(cls.name)
        return cls

    yield add
    for name in names:
        hal.unregister(name)


def test_ci_takes_one_dtype_and_two_shape_classes_of_each_op(reference_cases):
    assert "L3" in GENERATORS
    ops = [c for c in reference_cases if c.op and c.op.startswith(("core.", "snn."))]
    per_op = Counter(c.op for c in ops)
    assert max(per_op.values()) == 2
    # Ops whose first input is a float take float32; others (Where, DequantizeLinear)
    # their first claimed dtype.
    assert {c.dtype for c in ops if not c.not_applicable and c.op != "core.Where"} == {"float32"}
    assert {c.shape_class for c in ops if c.op in ("core.Add", "core.Tanh", "core.Conv")} == {
        "rank2", "broadcast", "rank4"}
    assert not any(c.op == "core.Add" and c.dtype == "int32" for c in reference_cases)
    tanh = next(c for c in reference_cases if c.id == "L3/core.Tanh/float32/rank2-0")
    assert [v.name for v in tanh.graph.inputs] == ["x0", "cotangent_" + tanh.graph.outputs[0].name]
    assert [v.name for v in tanh.graph.outputs][1:] == ["grad_x0"]
    assert len(tanh.inputs) == 2 and len(tanh.expected) == 2
    models = {c.id for c in reference_cases if c.shape_class == "model"
              and not c.not_applicable}
    assert models == {f"L3/{m}/{d}/batch-0" for m in ("mlp", "cnn", "attention")
                      for d in ("bfloat16", "float16", "float32", "float64")}
    cnn = next(c for c in reference_cases if c.id == "L3/cnn/float32/batch-0")
    assert {"grad_k1", "grad_w", "grad_x"} <= {v.name for v in cnn.graph.outputs}


def test_l3_derives_its_op_gradients_from_the_cases_l1_made(monkeypatch):
    from polyhal.conformance.levels import l1

    made = Counter()
    original = l1.op_case

    def counting(op, dtype, shape_class, variant, sample, *args, **kwargs):
        made[(op.qualified_name, dtype, shape_class, variant)] += 1
        return original(op, dtype, shape_class, variant, sample, *args, **kwargs)

    monkeypatch.setattr(l1, "op_case", counting)
    with open_device("reference") as device:
        caps = device.capabilities
    both = generate_cases(caps, ["L1", "L3"], "ci")
    assert made and max(made.values()) == 1  # each L1 case made once, for both levels
    forwards = {c.id.replace("L3/", "L1/", 1) for c in both  # op cases ("domain.Op")
                if c.level == "L3" and c.graph and "." in c.op}
    assert forwards and forwards <= {c.id for c in both if c.level == "L1"}
    made.clear()
    alone = generate_cases(caps, ["L3"], "ci")  # a new call makes its cases anew
    assert made and [c.id for c in alone] == [c.id for c in both if c.level == "L3"]


def test_ops_without_a_gradient_are_not_applicable_with_the_reason(reference_cases):
    reasons = {c.id: c.not_applicable for c in reference_cases if c.not_applicable}
    assert "not differentiable" in reasons["L3/core.Floor/float32/rank2-0"]
    assert "no floating-point output" in reasons["L3/core.ArgMax/float32/rank2-0"]
    assert "spiking ops" in reasons["L3/snn-mlp/float32/batch-0"]
    assert all(c.graph is None for c in reference_cases if c.not_applicable)


def test_gradient_tolerance_scales_the_forward_one(reference_cases):
    tanh = next(c for c in reference_cases if c.id == "L3/core.Tanh/float32/rank2-0")
    assert tanh.tolerance.atol == pytest.approx(BY_DTYPE[DType.FLOAT32].atol * GRADIENT_SCALE)
    conv = next(c for c in reference_cases if c.id == "L3/core.Conv/float32/rank4-0")
    assert conv.tolerance.rtol == pytest.approx(BY_DTYPE[DType.FLOAT32].rtol * GRADIENT_SCALE
                                                * LOOSER_SCALE)
    # A float16 model's gradient is graded at float16's tolerance, not float32's.
    half = next(c for c in reference_cases if c.id == "L3/mlp/float16/batch-0")
    assert half.tolerance.atol > 100 * tanh.tolerance.atol


def test_a_device_whose_scatter_add_assigns_fails_the_gradients_of_gathers(registered):
    registered(adapters.ScatterAssignAdapter)
    report = run_suite("scatter-assign", levels=["L1", "L3"], profile="ci")
    outcomes = {c.id: c.outcome for c in report.cases}
    assert outcomes["L1/core.GatherElements/float32/rank2-0"] == "passed"
    assert outcomes["L3/core.GatherElements/float32/rank2-0"] == "failed"
    assert outcomes["L3/core.Tanh/float32/rank2-0"] == "passed"
    failed = next(c for c in report.cases if c.id == "L3/core.GatherElements/float32/rank2-0")
    assert "outside atol" in failed.message and failed.max_abs_err > failed.tolerance["atol"]
    assert not report.ok


def test_a_device_that_replays_its_first_run_fails_the_training_steps(registered):
    registered(adapters.ReplayingAdapter)
    report = run_suite("replaying", levels=["L3"], profile="ci")
    bad = {c.id: c.message for c in report.cases if c.outcome not in ("passed",
                                                                     "not_applicable")}
    assert list(bad) == ["L3/sgd-momentum/float32/mlp-0"]
    assert "losses:" in bad["L3/sgd-momentum/float32/mlp-0"]
    assert "new_w1:" in bad["L3/sgd-momentum/float32/mlp-0"]


def test_ops_a_device_does_not_claim_make_gradients_not_applicable(registered, tmp_path):
    registered(adapters.TrainingOpsAdapter)
    report = run_suite("training-ops", levels=["L3"], profile="ci")
    assert report.ok, [(c.id, c.message) for c in report.cases if c.outcome != "passed"
                       and c.outcome != "not_applicable"]
    assert report.summary["not_applicable"] > 0
    outcomes = {c.id: c.outcome for c in report.cases}
    assert outcomes["L3/sgd-momentum/float32/mlp-0"] == "passed"
    assert outcomes["L3/core.Tanh/float32/rank2-0"] == "passed"
    uncovered = [c for c in report.cases if "does not claim" in c.message]
    assert uncovered and all(c.outcome == "not_applicable" for c in uncovered)
    assert all("is not claimed" in c.message for c in uncovered)
    write_report(report, tmp_path)
    doc = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    assert doc["summary"]["not_applicable"] == len(
        [c for c in doc["cases"] if c["outcome"] == "not_applicable"])
    markdown = (tmp_path / "report.md").read_text()
    assert "## Not applicable" in markdown
    assert "## Cases not passed" not in markdown


def test_a_manifest_entry_leaves_a_case_that_does_not_apply_alone():
    result = CaseResult("L3/core.Floor/float32/rank2-0", "L3", "core.Floor", "float32",
                        "rank2", "not_applicable", message="no gradient")
    entry = Entry("L3/*", "gradients are broken")
    assert apply_expectations(result, entry, None).outcome == "not_applicable"


@pytest.mark.parametrize("adapter", ["reference", "cpu"])
def test_the_training_steps_pass_on(adapter):
    with open_device(adapter, isolate=False) as device:
        case = next(c for c in l3.generate(device.capabilities, get_profile("ci"))
                    if c.op == "sgd-momentum")
        result = execute_case(case, device)
    assert result.outcome == "passed", result.message
    assert result.message.startswith("4 steps, loss")
    assert result.max_abs_err < case.tolerance.atol
