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
