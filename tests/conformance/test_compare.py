"""``polyhal conformance --compare A B``: adapters, report files, and bad input."""

from __future__ import annotations

import json
import re

import pytest

from polyhal.cli import main
from polyhal.conformance.compare import load_report
from polyhal.errors import PolyhalError


def test_two_adapters_are_compared_both_ways(capsys):
    assert main(["conformance", "--compare", "reference", "template", "--level", "L1",
                 "--profile", "ci", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "template passes 0 case(s) that reference does not." in out
    counts = re.fullmatch(r"reference: (\d+) cases, \1 passed; template: (\d+) cases, \2 "
                          r"passed", out.splitlines()[0])
    assert counts is not None
    reference_only = int(counts[1]) - int(counts[2])
    assert f"reference passes {reference_only} case(s) that template does not:" in out
    assert "  core.Tanh float32 (" in out and "[template: missing]" in out


def test_a_report_file_is_one_side(tmp_path, capsys):
    assert main(["conformance", "template", "--level", "L1", "--profile", "ci", "--quiet",
                 "--report", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    assert main(["conformance", "--compare", str(tmp_path / "t"), "template", "--level", "L1",
                 "--profile", "ci"]) == 0
    out = capsys.readouterr().out
    assert "passes 0 case(s) that template does not." in out
    assert "template passes 0 case(s) that template (" in out


def test_malformed_reports_are_named(tmp_path, capsys):
    with pytest.raises(PolyhalError, match="cannot read report"):
        load_report(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PolyhalError, match=r"bad\.json is not JSON"):
        load_report(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"cases": 3}))
    with pytest.raises(PolyhalError, match=r"other\.json is not a conformance report: at "):
        load_report(tmp_path / "other.json")
    assert main(["conformance", "cpu", "--compare", "a.json", "b.json"]) == 2
    assert "takes its two sides only" in capsys.readouterr().err
    assert main(["conformance", "--compare", str(tmp_path / "bad.json"), "template"]) == 2
    assert "bad.json is not JSON" in capsys.readouterr().err
