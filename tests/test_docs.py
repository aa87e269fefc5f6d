"""Every Python code block in README.md and docs/ runs as written."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for index, match in enumerate(_BLOCK.finditer(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{index}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[w for w, _ in _blocks()])
def test_code_block_runs(where, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "block.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")


def test_op_reference_is_current():
    result = subprocess.run([sys.executable, "-m", "polyhal.cli", "gen-docs", "--check",
                             "--out", str(ROOT / "docs" / "ops.md"),
                             "--hal", str(ROOT / "docs" / "hal.md")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_contract_reference_is_generated_and_checked(tmp_path, capsys):
    from polyhal.cli import main
    from polyhal.hal.contract_doc import BEGIN, END

    page = (ROOT / "docs" / "hal.md").read_text()
    start, end = page.index(BEGIN), page.index(END)
    assert "- `upload`, **required**: `def upload(self, array: np.ndarray) -> Buffer`. Copy a " \
           "host array to the device." in page[start:end]
    assert "- `tags: frozenset[str]`:" in page[start:end]  # Capabilities, from its docstrings
    stale = tmp_path / "hal.md"
    stale.write_text(page.replace("Copy a host array to the device.", "Old text."))
    ops_page = tmp_path / "ops.md"
    ops_page.write_text((ROOT / "docs" / "ops.md").read_text())
    args = ["gen-docs", "--out", str(ops_page), "--hal", str(stale)]
    assert main([*args, "--check"]) == 1
    assert f"{stale} is stale" in capsys.readouterr().err
    assert main(args) == 0 and stale.read_text() == page
    stale.write_text("# no markers\n")
    assert main(args) == 2
    assert "no generated contract region" in capsys.readouterr().err


def test_readme_example_prints_the_graph(tmp_path, monkeypatch, capsys):
    where, code = _blocks()[0]
    assert where == "README.md#0"
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("graph mlp(x: float32[batch, 4]) -> (probs: float32[batch, 3]) {")
    assert (tmp_path / "mlp.json").is_file() and (tmp_path / "mlp.npz").is_file()
