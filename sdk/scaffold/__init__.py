"""``polyhal new-adapter``: scaffold an out-of-tree adapter package.

The package it writes installs with ``pip install -e``, registers its adapter
through the ``polyhal.adapters`` entry point, claims four float32 ops computed
with numpy, and passes L0 and its claimed L1 cases as generated. Its layout::

    polyhal-NAME/
        pyproject.toml             the entry point
        README.md
        polyhal_NAME/adapter.py    the adapter, required hooks marked REQUIRED
        polyhal_NAME/manifest.toml expected conformance failures
        tests/test_conformance.py  runs conformance on the adapter
"""

from __future__ import annotations

import contextlib
import os
import string
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from polyhal import __version__
from polyhal.errors import PolyhalError
from polyhal.hal.checks import ADAPTER_NAME

# target path in the package -> template file (".in" files are string.Template)
_FILES = {
    "pyproject.toml": "pyproject.toml.in",
    "README.md": "README.md.in",
    "{package}/__init__.py": "package_init.py.in",
    "{package}/adapter.py": "adapter.py.in",
    "{package}/manifest.toml": "manifest.toml",
    "tests/test_conformance.py": "test_conformance.py.in",
}


@dataclass(frozen=True)
class AdapterNames:
    """The names derived from an adapter name such as ``my-npu``."""

    name: str  # the adapter, as in `polyhal devices`: my-npu
    distribution: str  # the pip package: polyhal-my-npu
    package: str  # the import package: polyhal_my_npu
    class_prefix: str  # MyNpu, as in MyNpuAdapter

    @classmethod
    def of(cls, name: str) -> AdapterNames:
        """Derive the names; an invalid adapter name is a :class:`PolyhalError`."""
        if not ADAPTER_NAME.fullmatch(name) or name.endswith("-") or "--" in name:
            raise PolyhalError(f"adapter name {name!r} is not valid: use lower-case letters, "
                               "digits and single hyphens, starting with a letter (e.g. acme-npu)")
        words = name.split("-")
        return cls(name, f"polyhal-{name}", "polyhal_" + "_".join(words),
                   "".join(w.capitalize() for w in words))


def render(name: str) -> dict[str, str]:
    """The scaffold's files for adapter ``name``: relative path -> text."""
    names = AdapterNames.of(name)
    values = {"name": names.name, "package": names.package,
              "class_prefix": names.class_prefix, "polyhal_version": _release(__version__)}
    files = resources.files(__package__) / "files"
    rendered = {}
    for target, source in _FILES.items():
        text = (files / source).read_text(encoding="utf-8")
        if source.endswith(".in"):
            text = string.Template(text).substitute(values)
        rendered[target.format(package=names.package)] = text
    return rendered


def scaffold(name: str, parent: Path | str = ".") -> Path:
    """Write the package for adapter ``name`` as ``parent/polyhal-NAME``; returns its path.

    Refuses a name an installed adapter already has (whatever ``POLYHAL_ADAPTERS``
    selects) and an existing target that is not an empty folder (nothing of the
    user's is overwritten). The files are written to a temporary folder first and
    moved into place, so a failure leaves nothing behind, not even the folders
    made for ``parent``; it is a :class:`PolyhalError` naming the path."""
    names = AdapterNames.of(name)
    _check_name_is_free(name)
    files = render(name)
    parent = Path(parent)
    target = parent / names.distribution
    made = _missing_folders(parent)
    try:
        _check_target(parent, target)
        parent.mkdir(parents=True, exist_ok=True)
        _write_package(files, parent, target, names.distribution)
    except OSError as exc:
        for folder in made:  # innermost first; each is empty again
            with contextlib.suppress(OSError):
                folder.rmdir()
        where = exc.filename or parent
        if f"{os.sep}.{names.distribution}-" in str(where):  # in the staging folder
            where = parent
        raise PolyhalError(f"cannot write the {name!r} adapter package {target}: {where}: "
                           f"{exc.strerror or exc}; nothing was written") from None
    return target


def _check_name_is_free(name: str) -> None:
    """A :class:`PolyhalError` when an installed adapter (a registered one, or any
    entry point, even one ``POLYHAL_ADAPTERS`` leaves out) is called ``name``."""
    from importlib import metadata

    from polyhal.hal import ENTRY_POINT_GROUP, adapters

    if name in adapters():
        raise PolyhalError(f"an adapter named {name!r} is already installed "
                           f"({adapters()[name].__module__}): choose another name")
    entry = next((e for e in metadata.entry_points(group=ENTRY_POINT_GROUP)
                  if e.name == name), None)
    if entry is not None:
        raise PolyhalError(f"an adapter named {name!r} is already installed ({entry.value}, "
                           "left out of this process by POLYHAL_ADAPTERS): choose another "
                           "name")


def _check_target(parent: Path, target: Path) -> None:
    """Refuse a ``target`` that is not an empty folder, or a ``parent`` that is not one."""
    if target.is_symlink():
        raise PolyhalError(f"{target} is a symbolic link: nothing was written")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise PolyhalError(f"{target} already exists and is not an empty folder: "
                           "nothing was written")
    if parent.exists() and not parent.is_dir():
        raise PolyhalError(f"--dir {parent} is not a folder")


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, innermost first."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _write_package(files: dict[str, str], parent: Path, target: Path,
                   distribution: str) -> None:
    """Write ``files`` in a temporary folder in ``parent``, then rename it ``target``
    (replacing an empty folder)."""
    with tempfile.TemporaryDirectory(dir=parent, prefix=f".{distribution}-") as tmp:
        staging = Path(tmp) / distribution
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        os.replace(staging, target)


def _release(version: str) -> str:
    """The release part of a version (``0.1.0.dev3`` -> ``0.1.0``), for a ``>=`` pin."""
    parts = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(part)
    return ".".join(parts) or "0"
