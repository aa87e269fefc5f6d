"""Reading and writing the files a user names, safely.

A path to read may name anything: a folder, a FIFO (opening it for reading would
wait for a writer forever), ``/dev/zero`` behind a symlink (its size is 0, its
content endless), or a string with a NUL byte. :func:`open_regular` opens
only regular files (after following symlinks) and :func:`read_limited` reads
at most the limit, each failure a :class:`SerializationError` or
:class:`LimitExceededError` naming the path.

A file to write is replaced whole or not at all: :func:`write_atomically`
writes a temporary file beside it and renames it over the target.

>>> write_atomically("model.bin", b"weights")            # doctest: +SKIP
>>> read_limited("model.bin", 2**20, "model file")       # doctest: +SKIP
b'weights'
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from polyhal.errors import LimitExceededError, SerializationError

# Opening a FIFO without O_NONBLOCK waits for a writer; the flag does not change
# how a regular file reads. Windows has no FIFOs and no flag.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
# O_EXCL: a fresh file, never one planted (or linked) at the temporary name.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
_MAX_STEM = 200  # of the temporary file's name: a long target name must still fit NAME_MAX


def display(path: str | os.PathLike[str]) -> str:
    """``path`` for an error message (quoted when it holds a NUL byte, which
    would otherwise vanish from a terminal)."""
    text = os.fspath(path)
    return repr(text) if "\x00" in text else text


def open_regular(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file (symlinks are
    followed); else a :class:`SerializationError` "cannot read ``what``"."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise SerializationError(f"{display(path)}: cannot read {what} "
                                 f"({exc.strerror or exc})") from None
    except ValueError:  # a NUL byte in the path
        raise SerializationError(f"{display(path)}: cannot read {what} (the path holds a "
                                 "NUL byte)") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise SerializationError(f"{display(path)}: cannot read {what} "
                                 f"({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise SerializationError(f"{display(path)}: cannot read {what} ({kind})")
    return os.fdopen(fd, "rb")


def read_limited(path: str | os.PathLike[str], limit: int, what: str, hint: str = "") -> bytes:
    """The bytes of the regular file at ``path``; a :class:`LimitExceededError`
    (followed by ``hint``) if it holds more than ``limit`` bytes, never reading
    more than ``limit + 1`` of them."""
    with open_regular(path, what) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= limit:
            try:
                data = fh.read(size + 1)  # not read(limit + 1): it allocates all of that
                if len(data) > size:  # a file that grows, or one in /proc that says 0 bytes
                    data += fh.read(limit + 1 - len(data))
            except OSError as exc:
                raise SerializationError(f"{display(path)}: cannot read {what} "
                                         f"({exc.strerror or exc})") from None
            size = len(data)
    if size > limit:
        raise LimitExceededError(f"{display(path)}: {size} bytes exceed the {what} limit of "
                                 f"{limit}{hint}")
    return data


def write_atomically(path: str | os.PathLike[str],
                     data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Write ``data`` (bytes, or a function writing to a binary stream) to ``path``
    through a temporary file in the same folder, flushed to disk and renamed over
    ``path`` at the end: a failure (an exception from ``data`` included) leaves
    ``path`` as it was and no temporary file behind. A symbolic link at ``path`` is
    replaced, never written through; anything else but a regular file there (a folder,
    a FIFO, a device such as ``/dev/null``, a socket) is left alone: a
    ``FileExistsError``. The file gets the permissions of any new
    file (the umask's), not the ``0600`` of :func:`tempfile.mkstemp`.

    Raises the ``OSError`` of a failed write; it names ``path``, never the
    temporary file."""
    path = Path(path)
    _check_replaceable(path)
    temporary = path.with_name(f".{path.name[:_MAX_STEM]}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(temporary, _CREATE_FLAGS, 0o666)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    try:
        with os.fdopen(fd, "wb") as stream:
            if isinstance(data, bytes):
                stream.write(data)
            else:
                data(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def _check_replaceable(path: Path) -> None:
    """Raise ``FileExistsError`` if something other than a regular file or a symbolic
    link is at ``path``: renaming a file over a FIFO or a device node would replace it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except ValueError:  # a NUL byte in the path
        raise OSError(errno.EINVAL, "the path holds a NUL byte", display(path)) from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise FileExistsError(errno.EEXIST, f"{kind}, which is not replaced", os.fspath(path))


def probe_writable(folder: str | os.PathLike[str]) -> None:
    """Raise the ``OSError`` of creating a file in ``folder`` (one is made and removed
    at once): permission bits do not tell, for root or in /proc."""
    with tempfile.TemporaryFile(dir=folder):
        pass
