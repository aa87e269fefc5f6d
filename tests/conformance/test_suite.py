"""The conformance suite end to end: the CLI, the report files and their schema,
case-set stability, manifests, and the pytest plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from polyhal.conformance.manifest import Entry, Manifest, read_manifest
from polyhal.conformance.profiles import get_profile
from polyhal.conformance.report import SCHEMA_PATH, write_report
from polyhal.conformance.runner import (
    CaseResult,
    apply_expectations,
    case_set_hash,
    generate_cases,
    run_suite,
)
from polyhal.errors import ConformanceError
from polyhal.hal import open_device


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyhal.cli", *args], capture_output=True,
                          text=True, cwd=cwd, check=False)


@pytest.fixture(scope="module")
def reference_report(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    folder = tmp_path_factory.mktemp("reference")
    result = _cli("conformance", "reference", "--profile", "ci", "--report", "out", "--quiet",
                  cwd=folder)
    return result, folder / "out"


def test_reference_passes_and_writes_three_files(reference_report):
    result, out = reference_report
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reference: PASS" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    doc = json.loads((out / "report.json").read_text())
    print(f"reference ci profile: {len(doc['cases'])} cases in {doc['duration_s']} s")
    listed = [c["id"] for c in doc["cases"] if c["outcome"] == "xfail"]
    skipped = doc["summary"]["not_applicable"]
    assert doc["summary"]["passed"] + len(listed) + skipped == len(doc["cases"]) > 1000
    assert all(case.startswith("onnx/test_training_dropout") for case in listed)
    assert {c["level"] for c in doc["cases"]} == {"L0", "L1", "L2", "L3", "L4-snn",
                                                  "L4-quantum", "L4-quant", "L5", "onnx"}
    assert {c["level"] for c in doc["cases"] if c["outcome"] == "not_applicable"} == {"L3"}
    onnx_cases = [c for c in doc["cases"] if c["level"] == "onnx"]
    passed = sum(c["outcome"] == "passed" for c in onnx_cases)
    print(f"onnx level: {len(onnx_cases)} cases, {passed} passed, {len(listed)} listed")
    assert passed / len(onnx_cases) >= 0.97
    for domain in ("core", "snn", "quant"):
        assert doc["coverage"][domain]["claimed"] == doc["coverage"][domain]["total"]


def test_report_validates_against_the_shipped_schema(reference_report):
    _, out = reference_report
    doc = json.loads((out / "report.json").read_text())
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema)
    broken = dict(doc, summary={**doc["summary"], "passed": -1})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_a_report_that_cannot_be_written_is_an_error_naming_the_path(tmp_path):
    report = run_suite("template", levels=["L0"], profile="ci", isolate=False)
    blocker = tmp_path / "taken"
    blocker.write_text("the user's file")
    with pytest.raises(ConformanceError, match=r"taken/report: cannot write the report"):
        write_report(report, blocker / "report")
    (tmp_path / "out" / "report.md").mkdir(parents=True)
    with pytest.raises(ConformanceError, match=r"out/report.md: cannot write the report"):
        write_report(report, tmp_path / "out")
    assert blocker.read_text() == "the user's file"


def test_case_set_hash_is_stable_across_runs(reference_report):
    _, out = reference_report
    doc = json.loads((out / "report.json").read_text())
    with open_device("reference") as device:
        cases = generate_cases(device.capabilities, ["L0", "L1", "L2", "L3", "L4-snn",
                                                     "L4-quantum", "L4-quant", "L5", "onnx"], "ci")
    assert case_set_hash(cases) == doc["case_set_hash"]
    assert [c.id for c in cases] == [c["id"] for c in doc["cases"]]


def test_template_passes_its_claimed_cases_and_shows_coverage(tmp_path):
    report = run_suite("template", profile="ci")
    assert report.ok, [(c.id, c.outcome, c.message) for c in report.cases if c.outcome != "passed"]
    assert report.summary["xfail"] == 0
    assert report.coverage["core"]["claimed_ops"] == ["core.Add", "core.MatMul", "core.Mul",
                                                      "core.Relu"]
    ops = {c.op for c in report.cases if c.level == "L1"}
    assert ops == {"core.Add", "core.MatMul", "core.Mul", "core.Relu"}
    assert {c.dtype for c in report.cases if c.level == "L1"} == {"float32", "float64"}
    assert any(c.id.startswith("L2/mlp/") for c in report.cases)
    assert not any(c.id.startswith("L2/cnn/") for c in report.cases)  # Conv is not claimed
    assert {c.id.split("/")[0] for c in report.cases} == {"L0", "L1", "L2", "L3", "L5", "onnx"}
    gradients = [c for c in report.cases if c.level == "L3"]
    assert {c.outcome for c in gradients} == {"passed", "not_applicable"}
    assert [c.id for c in gradients if c.outcome == "passed"] == ["L3/core.Mul/float32/rank2-0"]
    assert {c.op for c in report.cases if c.level == "onnx"} <= set(
        report.coverage["core"]["claimed_ops"])
    errors = [c for c in report.cases if c.id.startswith("L0/errors/")]
    assert {c.id for c in errors} == {"L0/errors/unclaimed-op", "L0/errors/unclaimed-dtype"}
    cycles = next(c for c in report.cases if c.id.startswith("L5/cycles/"))
    assert "growth over 1000 cycles" in cycles.message


def test_without_qiskit_the_reference_claims_no_quantum_op_and_its_cases_generate(
        monkeypatch):
    """The README's first command may run where qiskit is not installed."""
    from polyhal.adapters.reference import reference_capabilities
    from polyhal.conformance.levels import GENERATORS

    for module in ("qiskit", "qiskit_aer"):
        monkeypatch.setitem(sys.modules, module, None)
    reference_capabilities.cache_clear()
    try:
        caps = reference_capabilities()
        assert caps.ops and not [op for op in caps.ops if op.startswith("quantum.")]
        cases = generate_cases(caps, list(GENERATORS), "ci")
    finally:
        reference_capabilities.cache_clear()
    assert cases and not [c.id for c in cases if c.op and c.op.startswith("quantum.")]
    assert not [c.id for c in cases if c.level == "L4-quantum"]


def test_an_unclaimed_dtype_case_is_of_a_claimed_op():
    from polyhal.conformance.levels import l0

    with open_device("template") as device:
        caps = device.capabilities
    case = next(c for c in l0.generate(caps, get_profile("ci"))
                if c.id == "L0/errors/unclaimed-dtype")
    assert case.op in caps.ops and case.dtype not in {d.value for d in caps.ops[case.op]}


def test_manifest_turns_failures_into_xfail_and_passes_into_xpass(tmp_path):
    manifest_file = tmp_path / "manifest.toml"
    manifest_file.write_text('expected_failures = [\n'
                             '  { id = "L1/core.Add/*", reason = "adder is broken" },\n]\n')
    manifest = read_manifest(manifest_file)
    failed = CaseResult("L1/core.Add/float32/rank1-0", "L1", "core.Add", "float32", "rank1",
                        "failed", message="1 of 6 elements differ")
    graded = apply_expectations(failed, manifest.match(failed.id), None)
    assert graded.outcome == "xfail" and "adder is broken" in graded.message
    passed = CaseResult("L1/core.Add/float32/rank1-0", "L1", "core.Add", "float32", "rank1",
                        "passed")
    assert apply_expectations(passed, manifest.match(passed.id), None).outcome == "xpass"
    unsettled = Entry("L1/core.Add/*", "the spec is open here")
    assert apply_expectations(CaseResult("L1/core.Add/x", "L1", None, None, None, "passed"),
                              None, unsettled).outcome == "passed"
    assert Manifest("none").match("anything") is None


@pytest.mark.parametrize("text", ["expected_failures = 3", "expected_failures = [{id = 'x'}]",
                                  "expected_failures = [", "expected_failures = [{id = 'x', "
                                  "reason = ''}]"])
def test_malformed_manifest_is_a_conformance_error(tmp_path, text):
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    with pytest.raises(ConformanceError, match=r"manifest\.toml"):
        read_manifest(path)


def test_pytest_plugin_runs_the_cases(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "polyhal.conformance", "--adapter",
         "template", "--conformance-level", "L0", "--conformance-level", "L2",
         "--conformance-level", "L3", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
    assert " skipped" in result.stdout  # the L3 cases that do not apply to the template
    assert "failed" not in result.stdout.splitlines()[-1]


def test_onnx_level_without_onnx_is_a_clear_error(monkeypatch):
    import importlib.util

    from polyhal.conformance.levels import onnx_node

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnx" else real(name, *a))
    with open_device("reference") as device, pytest.raises(ConformanceError,
                                                           match=r"polyhal\[onnx\]"):
        list(onnx_node.generate(device.capabilities, get_profile("ci")))
