"""The distribution maps every source folder onto the ``polyhal`` package."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"sdk": "polyhal", "adapters": "polyhal.adapters",
           "simulators": "polyhal.simulators", "conformance": "polyhal.conformance"}


def test_every_package_folder_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {v: k for k, v in FOLDERS.items()}
    expected = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).glob("**/__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            expected.add(".".join((package, *parts)))
    assert set(config["packages"]) == expected


def test_every_data_file_ships_with_its_package():
    """A file that is not Python (RTL sources, manifests, schemas) must match a
    package-data pattern of its package, or a wheel install runs without it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = config["package-data"]
    missing = []
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*"):
            if (path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts
                    or path.name.startswith(".")):
                continue
            home = path.parent
            while not (home / "__init__.py").is_file():
                home = home.parent
            name = ".".join((package, *home.relative_to(ROOT / folder).parts))
            relative = path.relative_to(home).as_posix()
            patterns = [*data.get("*", []), *data.get(name, [])]
            if not any(fnmatch(relative, p) and relative.count("/") == p.count("/")
                       for p in patterns):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in any package-data pattern: {missing}"



def test_the_wheel_installs_and_runs_in_a_fresh_venv(polyhal_wheel, tmp_path):
    """`python -m build` makes a wheel that works on its own: installed into a venv
    without this machine's packages, `polyhal devices` runs, every optional adapter
    saying why it is unavailable instead of failing to import."""
    from polyhal import __version__
    from tests.fresh_venv import fresh_venv

    venv = fresh_venv(tmp_path / "venv", polyhal_wheel)
    version = venv.run(["polyhal", "--version"], tmp_path)
    assert version.stdout.strip() == f"polyhal {__version__}", version.stderr
    devices = venv.run(["polyhal", "devices"], tmp_path)
    assert devices.returncode == 0 and devices.stderr == "", devices.stderr
    rows = {line.split("│")[1].strip(): line for line in devices.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    for always in ("reference", "template", "faulty"):
        assert "│ yes" in rows[always], devices.stdout
    for adapter, extra in (("cpu", "cpu"), ("fpga", "fpga"), ("neuro", "neuro"),
                           ("quantum", "quantum"), ("gpu-sim", "gpu")):
        assert "│ no " in rows[adapter], devices.stdout
        assert f"pip install 'polyhal[{extra}]'" in rows[adapter], devices.stdout
    # every level that can run here, the onnx level left out with why (no onnx package)
    graded = venv.run(["polyhal", "conformance", "template", "--profile", "ci", "--quiet"],
                      tmp_path)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert "level onnx left out: it takes its cases from the onnx package, which is not " \
           "installed: pip install 'polyhal[onnx]'" in graded.stdout
    assert "template: PASS" in graded.stdout and "  onnx:" not in graded.stdout
    # the package data came along: the scaffold's templates
    listing = venv.run(["python", "-c", "import polyhal.scaffold as s; "
                        "print(sorted(s.render('acme')))"], tmp_path)
    assert "polyhal_acme/manifest.toml" in listing.stdout, listing.stderr
