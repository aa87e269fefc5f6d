"""A fresh virtual environment with polyhal's wheel in it, as a new user would have.

The venv does not see this machine's packages: what polyhal needs comes from
the wheel's own dependencies, so a missing dependency or package-data file
fails here instead of in a user's hands.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(folder: Path) -> Path:
    """``python -m build --wheel`` of a copy of the checkout (building writes ``build/``
    and egg-info into the tree it builds); returns the wheel's path."""
    source = folder / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "site", "*.egg-info", "__pycache__", ".*cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(folder / "dist"),
                    str(source)], check=True, capture_output=True)
    wheels = list((folder / "dist").glob("polyhal-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@dataclass
class Venv:
    """A venv and the environment that runs commands in it (its ``bin`` first)."""

    path: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}/usr/bin:/bin", "VIRTUAL_ENV": str(self.path),
                "HOME": os.environ.get("HOME", "/tmp"), "COLUMNS": "200",
                **{k: v for k, v in os.environ.items() if k.startswith("PIP_")}}

    def pip_install(self, *targets: str | Path) -> None:
        subprocess.run([self.bin / "python", "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", *map(str, targets)], check=True,
                       capture_output=True, env=self.env)

    def run(self, command: list[str] | str, cwd: Path, timeout: float = 600,
            ) -> subprocess.CompletedProcess:
        """Run ``command`` (a list, or a bash script) in the venv; never raises on failure."""
        args = ["bash", "-euo", "pipefail", "-c", command] if isinstance(command, str) \
            else command
        return subprocess.run(args, cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=timeout)


def fresh_venv(path: Path, wheel: Path, extras: str = "") -> Venv:
    """A venv at ``path`` without this machine's packages, polyhal's wheel installed
    (with ``extras``, such as ``"onnx"``)."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    venv = Venv(path)
    venv.pip_install(f"{wheel}[{extras}]" if extras else wheel)
    return venv
