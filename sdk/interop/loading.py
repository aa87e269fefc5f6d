"""Loading a model file of any supported format by its extension."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from polyhal.errors import SerializationError, UnsupportedError
from polyhal.ir.graph import Graph
from polyhal.ir.serialize import load

NIR_OPTIONS = ("dt", "method", "reset", "dtype", "limits")
"""Keyword arguments of :func:`load_model` for ``.nir`` models (see ``load_nir``)."""


def load_model(path: str | os.PathLike[str], **options: Any) -> Graph:
    """Load ``path``: a polyhal ``.json`` model (with its ``.npz`` beside it), an
    ``.onnx`` model (see :func:`polyhal.interop.onnx.load_onnx`) or a ``.nir`` model
    (see :func:`polyhal.interop.nir.load_nir`), which needs ``dt=`` and takes
    ``method=``, ``reset=``, ``dtype=`` and ``limits=``.

    >>> graph = load_model("network.nir", dt=1e-3, method="exact")  # doctest: +SKIP
    """
    if not isinstance(path, str | os.PathLike):
        raise SerializationError(f"load_model: expected a file path, got {type(path).__name__}")
    path = Path(path)
    if path.suffix == ".nir":
        return _load_nir(path, options)
    if options:
        raise SerializationError(f"{path}: option {', '.join(sorted(options))} applies to "
                                 ".nir models only")
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
                             "; polyhal reads .json, .onnx and .nir models")


def _load_nir(path: Path, options: dict[str, Any]) -> Graph:
    unknown = sorted(set(options) - set(NIR_OPTIONS))
    if unknown:
        raise SerializationError(f"{path}: unknown option {unknown[0]!r} for NIR models "
                                 f"(known: {', '.join(NIR_OPTIONS)})")
    if options.get("dt") is None:
        raise SerializationError(f"{path}: a NIR model carries no time step; pass dt (seconds), "
                                 "e.g. load_model(path, dt=1e-3) or polyhal run --dt 1e-3")
    try:
        from polyhal.interop.nir import load_nir
    except ImportError as exc:
        raise UnsupportedError(f"{path}: reading NIR models needs the nir and h5py packages "
                               f"(pip install 'polyhal[neuro]'): {exc}") from None
    return load_nir(path, **{k: v for k, v in options.items() if v is not None})
