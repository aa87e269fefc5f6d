"""docs/adapter-guide.md, followed as a new user would: its commands, exactly, in a fresh venv."""

from __future__ import annotations

import re
from pathlib import Path

from polyhal.scaffold import render
from tests.fresh_venv import fresh_venv

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adapter-guide.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", GUIDE.read_text(), re.S | re.M)


def test_the_listing_is_what_new_adapter_writes():
    assert _blocks("python") == [render("acme")["polyhal_acme/adapter.py"]]


def test_the_guide_commands_work_in_a_fresh_venv(polyhal_wheel, tmp_path):
    # The guide's prerequisite: polyhal installed. The venv does not see this
    # machine's packages, so what the guide needs comes from polyhal's wheel.
    venv = fresh_venv(tmp_path / "venv", polyhal_wheel)
    work = tmp_path / "work"
    work.mkdir()
    result = venv.run("\n".join(_blocks("sh")), work)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    assert (work / "polyhal-acme" / "polyhal_acme" / "adapter.py").is_file()
    assert re.search(r"│ acme\s+│ 0\.1\.0\s+│ acme:0\s+│ acme \(numpy on the host\)\s+│ yes", out)
    assert "contract OK" in out and "implement next" in out
    assert re.search(r"acme: PASS \((\d+) passed, 0 failed", out)
    assert re.search(r"L0: (\d+) cases run, \1 passed \(100\.0%\)", out)
    assert re.search(r"L1: (\d+) cases run, \1 passed \(100\.0%\)", out)
    assert (work / "acme-report" / "report.html").is_file()
    assert "tanh_3 -> reference:0  (acme:0: core.Tanh is not claimed)" in out
    assert "acme (acme-report) passes 0 case(s) that template does not." in out
    assert re.search(r"^1 passed", out, re.M)  # the package's own test
