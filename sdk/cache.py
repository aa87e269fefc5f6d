"""Where polyhal keeps what it builds once and reuses across processes."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "POLYHAL_CACHE_DIR"
"""The variable that moves every cache (default: ``~/.cache/polyhal``)."""


def cache_dir(component: str, create: bool = True) -> Path:
    """The folder of one component's cache: ``$POLYHAL_CACHE_DIR/<component>`` or
    ``~/.cache/polyhal/<component>`` (made when ``create``)."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "polyhal"
    path = Path(root) / component
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
