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


def test_the_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    """`python -m build` makes a wheel that works on its own: installed into a venv
    without this machine's packages, `polyhal devices` runs, every optional adapter
    saying why it is unavailable instead of failing to import."""
    import shutil
    import subprocess
    import sys

    source = tmp_path / "src"  # a copy: building writes build/ and egg-info in the tree
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "site", "*.egg-info", "__pycache__", ".*cache"))
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"),
                    str(source)], check=True, capture_output=True)
    wheels = list((tmp_path / "dist").glob("polyhal-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    subprocess.run([bin_dir / "python", "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", wheels[0]], check=True, capture_output=True)
    from polyhal import __version__

    run = {"capture_output": True, "text": True, "check": True, "cwd": tmp_path,
           "env": {"PATH": f"{bin_dir}:/usr/bin:/bin", "COLUMNS": "200"}}
    version = subprocess.run([bin_dir / "polyhal", "--version"], **run).stdout
    assert version.strip() == f"polyhal {__version__}"
    devices = subprocess.run([bin_dir / "polyhal", "devices"], **run)
    assert devices.stderr == ""
    rows = {line.split("│")[1].strip(): line for line in devices.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    for always in ("reference", "template", "faulty"):
        assert "│ yes" in rows[always], devices.stdout
    assert "│ no " in rows["cpu"] and "numba" in rows["cpu"], devices.stdout
    # the package data came along: the scaffold's templates and the adapters' manifests
    listing = subprocess.run([bin_dir / "python", "-c", "import polyhal.scaffold as s; "
                              "print(sorted(s.render('acme')))"], **run).stdout
    assert "polyhal_acme/manifest.toml" in listing
