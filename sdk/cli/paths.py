"""The checks of the paths the command line writes (``--output``, ``--profile``,
``--report``, ``gen-docs``): what may be replaced, and folders that can be written."""

from __future__ import annotations

import os
from pathlib import Path

from polyhal.errors import PolyhalError
from polyhal.files import probe_writable


def check_target(path: Path, option: str, kept: dict[Path, str], overwrite: bool) -> None:
    """Refuse to write ``path`` when it is a symbolic link or not a plain file, one of
    ``kept`` (path: what it is), or an existing file without ``overwrite``."""
    if not os.path.lexists(path):
        return
    if path.is_symlink():
        raise PolyhalError(f"{option} {path}: is a symbolic link; polyhal never writes "
                           "through one (remove it, or choose another path)")
    if not path.is_file():
        raise PolyhalError(f"{option} {path}: exists and is not a file")
    role = next((role for other, role in kept.items()
                 if other.exists() and path.samefile(other)), None)
    if role is not None:
        raise PolyhalError(f"{option} {path}: is {role}; it is never overwritten")
    if not overwrite:
        raise PolyhalError(f"{option} {path}: the file exists; pass --overwrite to "
                           "replace it")


def check_trace_path(path: Path, kept: dict[Path, str], outputs: dict[str, Path],
                     overwrite: bool) -> None:
    """Refuse a ``--profile`` path that cannot be written, or that would replace
    what it must not (see :func:`check_target`), an output of this run included."""
    check_target(path, "--profile", kept, overwrite)
    if any(path.resolve() == output.resolve() for output in outputs.values()):
        raise PolyhalError(f"--profile {path}: is also the file of an --output array")
    if not path.parent.is_dir():
        missing = "is not a folder" if path.parent.exists() else "does not exist"
        raise PolyhalError(f"--profile {path}: {path.parent} {missing}")
    check_writable(path.parent, f"--profile {path}: the folder {path.parent}")


def writable_folder(folder: Path, option: str) -> Path:
    """``folder``, created if missing; a :class:`PolyhalError` naming ``option`` when
    it cannot be created or written."""
    if folder.exists() and not folder.is_dir():
        raise PolyhalError(f"{option} {folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolyhalError(f"{option} {folder}: cannot create the folder "
                           f"({exc.strerror or exc})") from None
    check_writable(folder, f"{option} {folder}: the folder")
    return folder


def check_writable(folder: Path, what: str) -> None:
    """A :class:`PolyhalError` starting with ``what`` unless a file can be made in
    ``folder`` (:func:`polyhal.files.probe_writable`)."""
    try:
        probe_writable(folder)
    except OSError as exc:
        raise PolyhalError(f"{what} is not writable ({exc.strerror or exc})") from None
