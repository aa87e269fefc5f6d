"""docs/adapter-guide.md, followed as a new user would: its commands, exactly, in a fresh venv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from polyhal.scaffold import render

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adapter-guide.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", GUIDE.read_text(), re.S | re.M)


def test_the_listing_is_what_new_adapter_writes():
    assert _blocks("python") == [render("acme")["polyhal_acme/adapter.py"]]


def test_the_guide_commands_work_in_a_fresh_venv(tmp_path):
    # The guide's prerequisite: polyhal installed in the user's environment. The
    # venv sees this machine's packages (numpy, ...) but gets its own polyhal and
    # console script, so what the guide installs goes into the venv only.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True,
                   capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    script = "\n".join(_blocks("sh"))
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "COLUMNS": "200",
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                            capture_output=True, text=True, timeout=600)
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
    # installed into the venv, not into the environment running these tests
    listed = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True,
                            text=True, check=True).stdout
    assert "polyhal-acme" not in listed and "polyhal_acme" not in listed
