"""Where polyhal keeps what it builds once and reuses across processes.

Writing a cache file whole or not at all is :func:`polyhal.files.write_atomically`."""

from __future__ import annotations

import os
from pathlib import Path

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

