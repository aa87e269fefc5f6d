"""The distribution maps every source folder onto the ``polyhal`` package."""

from __future__ import annotations

import tomllib
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
