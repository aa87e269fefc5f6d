"""Opening the files a model is loaded from, safely.

A model path may name anything: a folder, a FIFO (opening it for reading would
wait for a writer forever), ``/dev/zero`` behind a symlink (its size is 0, its
content endless), or a string with a NUL byte. :func:`open_regular` opens
only regular files (after following symlinks) and :func:`read_limited` reads
at most the limit, each failure a :class:`SerializationError` or
:class:`LimitExceededError` naming the path.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from polyhal.errors import LimitExceededError, SerializationError

# Opening a FIFO without O_NONBLOCK waits for a writer; the flag does not change
# how a regular file reads. Windows has no FIFOs and no flag.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


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

