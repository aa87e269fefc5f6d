"""Where polyhal keeps what it builds once and reuses across processes.

Writing a cache file whole or not at all is :func:`polyhal.files.write_atomically`.
A cache is never a reason for a run to fail: what builds into a cache asks
:func:`writable_cache_dir`, which falls back to a folder of the process's own."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

from polyhal.errors import PolyhalError
from polyhal.files import probe_writable

CACHE_ENV = "POLYHAL_CACHE_DIR"
"""The variable that moves every cache (default: ``~/.cache/polyhal``)."""

_private: dict[str, Path] = {}
"""Per component, the folder of this process's own used when its cache cannot be written."""
_private_lock = threading.Lock()


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
            raise PolyhalError(f"{_source()}: cannot create the cache folder {path} "
                               f"({exc.strerror or exc}); point {CACHE_ENV} at a "
                               "writable folder") from None
    return path


def writable_cache_dir(component: str, who: str) -> Path:
    """:func:`cache_dir` of ``component`` if a file can be created in it; else a
    temporary folder of this process's own (one per component, removed at exit),
    with one warning naming ``who``, the reason and that folder.

    A read-only home or a ``POLYHAL_CACHE_DIR`` naming a file only costs the reuse
    of what is built, never the run:

    >>> folder = writable_cache_dir("neuro", "neuro")      # doctest: +SKIP
    """
    path = cache_dir(component, create=False)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe_writable(path)  # a read-only folder exists, yet fails here
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the variable
        reason = getattr(exc, "strerror", None) or str(exc)
        return private_cache_dir(component, f"{who}: the cache folder {path} cannot be "
                                            f"written ({reason}; it is {_source()})")
    return path


def private_cache_dir(component: str, problem: str) -> Path:
    """This process's own folder for ``component`` (removed at exit), made on first use
    with a warning that starts with ``problem``: where to build when the cache
    cannot be written."""
    with _private_lock:
        folder = _private.get(component)
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix=f"polyhal-cache-{component}-"))
            _private[component] = folder
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            warnings.warn(f"{problem}; building for this process only, in {folder} "
                          f"(removed at exit); point {CACHE_ENV} at a writable folder to "
                          "keep what is built", stacklevel=3)
    return folder


def _source() -> str:
    """Where the cache root comes from, for a message."""
    raw = os.environ.get(CACHE_ENV)
    return f"{CACHE_ENV}={raw!r}" if raw else "the default cache folder"
