"""Training checkpoints: arrays and JSON metadata in one ``.npz`` file.

Writes are atomic: the file is written beside the target under a temporary
name, flushed to disk and renamed over it, so a run killed mid-write leaves
the previous checkpoint intact. Reading never unpickles (``allow_pickle`` is
off): a checkpoint holds numeric arrays and a JSON document only, and every
malformation is a :class:`~polyhal.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polyhal.errors import CheckpointError
from polyhal.files import write_atomically
from polyhal.ir.limits import current_limits

FORMAT = "polyhal-checkpoint"
VERSION = 1
_META = "__meta__"


@dataclass
class Checkpoint:
    """The contents of one checkpoint file."""

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
"""What a path that is neither a file nor a directory may be, as errors name it."""


def checkpoint_path(path: Any) -> Path:
    """``path`` as a :class:`~pathlib.Path`, when it names a regular file or nothing yet.

    Anything else at ``path`` is refused, since a write would replace it: a directory,
    a named pipe, a device, a socket, a symbolic link to one of those or to nothing.
    So is a path the system cannot take (a NUL byte, a name too long)."""
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise CheckpointError(f"checkpoint={path!r} must be a file path (str or os.PathLike)")
    try:
        target = Path(path)
    except TypeError:  # an os.PathLike whose __fspath__ gives bytes
        raise CheckpointError(f"checkpoint={path!r} must be a file path (str or "
                              "os.PathLike)") from None
    if "\0" in str(target):
        raise CheckpointError(f"checkpoint {str(target)!r}: a path cannot hold a NUL byte")
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target  # a new file (its folders are made when it is written)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {target}: cannot use this path "
                              f"({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(target)
        except (OSError, ValueError) as exc:
            reason = ("it points to nothing" if isinstance(exc, FileNotFoundError) else
                      f"cannot follow it: {getattr(exc, 'strerror', None) or exc}")
            raise CheckpointError(f"checkpoint {target} is a symbolic link and {reason}; "
                                  "name a regular file or a new path") from None
        _refuse_special(target, info.st_mode, "is a symbolic link to")
    else:
        _refuse_special(target, info.st_mode, "is")
    return target


def _refuse_special(target: Path, mode: int, verb: str) -> None:
    """Refuse anything but a regular file at ``target``, naming what it is."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise CheckpointError(f"checkpoint {target} {verb} a directory; name a file in it, "
                              f"e.g. {target / 'run.ckpt'}")
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    raise CheckpointError(f"checkpoint {target} {verb} {kind}, not a regular file; name a "
                          "regular file (or a new path, to write one), since a checkpoint is "
                          "never written over anything else")


def save_checkpoint(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
                    meta: Mapping[str, Any]) -> Path:
    """Write ``arrays`` and the JSON-serializable ``meta`` to ``path`` atomically."""
    target = checkpoint_path(path)
    if _META in arrays:
        raise CheckpointError(f"checkpoint {target}: array name {_META!r} is reserved")
    document = json.dumps({"format": FORMAT, "version": VERSION, **meta}, sort_keys=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, lambda stream: np.savez(
            stream, **{_META: np.frombuffer(document.encode(), np.uint8)},
            **{name: np.asarray(a) for name, a in arrays.items()}))
    except OSError as exc:
        raise CheckpointError(f"checkpoint {target}: cannot write it "
                              f"({exc.strerror or exc})") from None
    return target


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`. Its arrays may hold at
    most ``max_total_bytes`` and its metadata ``max_file_bytes`` of the current
    :class:`~polyhal.ir.Limits`, checked before anything is decompressed."""
    source = checkpoint_path(path)
    try:
        _check_sizes(source)
        with np.load(source, allow_pickle=False) as archive:
            names = list(archive.files)
            if _META not in names:
                raise CheckpointError(f"checkpoint {source}: not a polyhal checkpoint "
                                      f"(no {_META} entry)")
            meta = json.loads(bytes(archive[_META]).decode())
            arrays = {name: archive[name] for name in names if name != _META}
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {source} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, UnicodeDecodeError,
            RecursionError) as exc:
        raise CheckpointError(f"checkpoint {source} cannot be read: "
                              f"{exc or type(exc).__name__}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {source}: not a polyhal checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {source}: version {meta.get('version')!r} is not "
                              f"supported (this polyhal reads version {VERSION})")
    return Checkpoint(arrays, meta)


def _check_sizes(source: Path) -> None:
    """Refuse a checkpoint whose entries would decompress past the limits (the zip
    directory states each size, and reading stops there)."""
    with zipfile.ZipFile(source) as archive:
        sizes = {info.filename: info.file_size for info in archive.infolist()}
    limits = current_limits()
    total = sum(sizes.values())
    if total > limits.max_total_bytes:
        raise CheckpointError(f"checkpoint {source}: {total} bytes of arrays exceed the limit "
                              f"of {limits.max_total_bytes} (see polyhal.ir.Limits)")
    meta = sizes.get(f"{_META}.npy", 0)
    if meta > limits.max_file_bytes:
        raise CheckpointError(f"checkpoint {source}: {meta} bytes of metadata exceed the "
                              f"limit of {limits.max_file_bytes} (see polyhal.ir.Limits)")
