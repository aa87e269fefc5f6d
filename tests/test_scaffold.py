"""polyhal new-adapter: the package it writes, and what it refuses."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

import pytest

from polyhal.cli import main
from polyhal.errors import PolyhalError
from polyhal.scaffold import AdapterNames, scaffold


def test_names_derive_from_the_adapter_name():
    names = AdapterNames.of("my-npu2")
    assert (names.distribution, names.package, names.class_prefix) == (
        "polyhal-my-npu2", "polyhal_my_npu2", "MyNpu2")


@pytest.mark.parametrize("name", ["", "Acme", "2fast", "acme_npu", "acme-", "a--b", "a b",
                                  "../x", "acme\n"])
def test_an_invalid_name_is_refused_naming_the_rule(name, tmp_path):
    with pytest.raises(PolyhalError, match="is not valid: use lower-case letters"):
        scaffold(name, tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_name_of_an_installed_adapter_is_refused(tmp_path):
    with pytest.raises(PolyhalError, match="'template' is already installed"):
        scaffold("template", tmp_path)
    assert not any(tmp_path.iterdir())


def test_an_existing_folder_is_never_overwritten(tmp_path):
    mine = tmp_path / "polyhal-acme" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("mine")
    assert main(["new-adapter", "acme", "--dir", str(tmp_path)]) == 2
    assert mine.read_text() == "mine" and len(list(mine.parent.iterdir())) == 1
    (tmp_path / "file").write_text("x")
    with pytest.raises(PolyhalError, match="is not a folder"):
        scaffold("acme", tmp_path / "file")


def test_the_package_is_complete_and_lint_clean(tmp_path, capsys):
    assert main(["new-adapter", "acme-npu", "--dir", str(tmp_path / "new")]) == 0
    assert "pip install -e" in capsys.readouterr().out
    root = tmp_path / "new" / "polyhal-acme-npu"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["README.md", "polyhal_acme_npu/__init__.py", "polyhal_acme_npu/adapter.py",
                     "polyhal_acme_npu/manifest.toml", "pyproject.toml",
                     "tests/test_conformance.py"]
    assert not [p for p in (tmp_path / "new").iterdir() if p != root]  # no staging left
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["polyhal.adapters"] == {
        "acme-npu": "polyhal_acme_npu.adapter:AcmeNpuAdapter"}
    assert tomllib.loads((root / "polyhal_acme_npu/manifest.toml").read_text()) == {
        "expected_failures": []}
    adapter = (root / "polyhal_acme_npu/adapter.py").read_text()
    assert len(adapter.splitlines()) < 100
    # every required hook of the contract is marked
    from polyhal.hal.checks import HOOKS

    for _, hook, required, _, _ in HOOKS:
        marked = any(hook in line and "REQUIRED" in line for line in adapter.splitlines())
        assert marked == required, hook
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), str(path))
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           "line-length = 100", str(root)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_generated_adapter_passes_the_contract_and_its_claims(tmp_path, monkeypatch):
    """Without installing it: import the generated module and grade it in-process."""
    from polyhal import hal
    from polyhal.conformance import run_suite

    scaffold("scaffolded", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "polyhal-scaffolded"))
    from polyhal_scaffolded import ScaffoldedAdapter

    assert hal.check_adapter_class(ScaffoldedAdapter).ok
    hal.register(ScaffoldedAdapter)
    try:
        report = run_suite("scaffolded", levels=["L0", "L1"], profile="ci", isolate=False)
    finally:
        hal.unregister("scaffolded")
        sys.modules.pop("polyhal_scaffolded.adapter", None)
        sys.modules.pop("polyhal_scaffolded", None)
    assert report.ok
    assert {c.outcome for c in report.cases} == {"passed"}
    assert sum(c.level == "L1" for c in report.cases) >= 20

