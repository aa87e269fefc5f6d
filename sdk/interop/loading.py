"""Loading a model file of any supported format by its extension."""

from __future__ import annotations

import os
from pathlib import Path

from polyhal.errors import SerializationError
from polyhal.ir.graph import Graph
from polyhal.ir.serialize import load


def load_model(path: str | os.PathLike[str]) -> Graph:
    """Load ``path``: a polyhal ``.json`` model (with its ``.npz`` beside it)."""
    path = Path(path)
    if path.suffix == ".json":
        return load(path)
    raise SerializationError(f"{path}: unknown model format {path.suffix or '(no extension)'!r}"
                             "; polyhal reads .json models")
