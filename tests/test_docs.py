"""Every Python code block in README.md and docs/ runs as written."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_ANY_BLOCK = re.compile(r"(?:^<!-- not run in the tests: (?P<why>[^\n]*?) -->\n)?"
                        r"^```(?P<language>\w+)\n(?P<code>.*?)^```", re.S | re.M)
OWN_TEST = {"docs/adapter-guide.md": "tests/test_adapter_guide.py runs its commands in a venv"}
"""Pages whose shell blocks another test runs, and where."""


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in _pages():
        for index, match in enumerate(_BLOCK.finditer(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{index}", match.group(1)))
    return found


def _units() -> list[tuple[str, list[tuple[str, str]]]]:
    """What runs, in order: each Python block on its own, except on a page with shell
    blocks, which runs whole, top to bottom in one folder, as a reader follows it (a
    shell block may use the files its Python blocks wrote)."""
    units = []
    for path in _pages():
        where = str(path.relative_to(ROOT))
        blocks = [(m["language"], m["code"]) for m in _ANY_BLOCK.finditer(path.read_text())
                  if m["language"] in ("python", "sh") and not m["why"]]
        has_shell = any(language == "sh" for language, _ in blocks)
        if where == "README.md" or where in OWN_TEST or not has_shell:
            python = [code for language, code in blocks if language == "python"]
            units += [(f"{where}#{i}", [("python", code)]) for i, code in enumerate(python)]
        else:
            units.append((where, blocks))
    return units


@pytest.mark.parametrize(("where", "blocks"), _units(), ids=[w for w, _ in _units()])
def test_code_block_runs(where, blocks, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for index, (language, code) in enumerate(blocks):
        script = tmp_path / f"block{index}.{'py' if language == 'python' else 'sh'}"
        script.write_text(code)
        if language == "python":
            runpy.run_path(str(script), run_name="__main__")
            continue
        result = subprocess.run(["bash", "-euo", "pipefail", str(script)], cwd=tmp_path,
                                capture_output=True, text=True, timeout=900,
                                env={**os.environ, "COLUMNS": "120"})
        assert result.returncode == 0, (f"{where}, shell block {index}:\n{code}\n"
                                        f"{result.stdout[-3000:]}{result.stderr[-3000:]}")


def test_every_code_block_is_of_a_language_the_tests_know():
    """python and sh blocks run (above), toml blocks parse (below), text and json blocks
    show output; a block in another language would silently go untested."""
    for path in _pages():
        for match in _ANY_BLOCK.finditer(path.read_text()):
            assert match["language"] in ("python", "sh", "toml", "text", "json"), (
                f"{path.name}: a {match['language']} block that no test runs")


def test_toml_blocks_parse():
    import tomllib

    for path in _pages():
        for match in _ANY_BLOCK.finditer(path.read_text()):
            if match["language"] == "toml":
                tomllib.loads(match["code"])


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
