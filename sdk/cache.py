"""Where polyhal keeps what it builds once and reuses across processes, and how it
writes a file so that a failure never leaves half of one."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from polyhal.errors import PolyhalError

CACHE_ENV = "POLYHAL_CACHE_DIR"
"""The variable that moves every cache (default: ``~/.cache/polyhal``)."""


def cache_dir(component: str, create: bool = True) -> Path:
    """The folder of one component's cache: ``$POLYHAL_CACHE_DIR/<component>`` (a
    leading ``~`` expanded) or ``~/.cache/polyhal/<component>``, made when ``create``;
    a folder that cannot be made is a :class:`PolyhalError` naming the variable."""
    raw = os.environ.get(CACHE_ENV)
    root = Path(raw).expanduser() if raw else Path.home() / ".cache" / "polyhal"
    path = root / component
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            source = f"{CACHE_ENV}={raw!r}" if raw else "the default cache folder"
            raise PolyhalError(f"{source}: cannot create the cache folder {path} "
                               f"({exc.strerror or exc}); point {CACHE_ENV} at a "
                               "writable folder") from None
    return path


def write_atomically(path: str | os.PathLike[str],
                     data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Write ``data`` (bytes, or a function writing to a binary stream) to ``path``
    through a temporary file in the same folder, renamed over ``path`` at the end:
    a failure leaves ``path`` as it was, and a symbolic link at ``path`` is replaced,
    never written through. The file gets the permissions of any new file.
    Raises the ``OSError`` of a failed write."""
    path = Path(path)
    # O_EXCL with a random name, not mkstemp: the file gets the umask's permissions
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
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
