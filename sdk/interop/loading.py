"""Loading a model file of any supported format by its extension."""

from __future__ import annotations

import os
from pathlib import Path

from polyhal.errors import SerializationError, UnsupportedError
from polyhal.ir.graph import Graph
from polyhal.ir.serialize import load


def load_model(path: str | os.PathLike[str]) -> Graph:
    """Load ``path``: a polyhal ``.json`` model (with its ``.npz`` beside it) or an
    ``.onnx`` model (see :func:`polyhal.interop.onnx.load_onnx`)."""
    path = Path(path)
    if path.suffix == ".json":
        return load(path)
    if path.suffix == ".onnx":
        try:
            from polyhal.interop.onnx import load_onnx
        except ImportError as exc:
            raise UnsupportedError(f"{path}: reading ONNX models needs the onnx package "
                                   f"(pip install 'polyhal[onnx]'): {exc}") from None
        return load_onnx(path)
    raise SerializationError(f"{path}: unknown model format {path.suffix or '(no extension)'!r}"
                             "; polyhal reads .json and .onnx models")
