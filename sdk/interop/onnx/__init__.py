"""ONNX models in and out of polyhal (needs the ``onnx`` extra: ``pip install polyhal[onnx]``).

>>> from polyhal.interop.onnx import load_onnx, save_onnx   # doctest: +SKIP
>>> graph = load_onnx("model.onnx")                         # doctest: +SKIP
>>> save_onnx(graph, "copy.onnx")                           # doctest: +SKIP

:func:`load_onnx` reads ``ai.onnx`` opsets 7 to the newest the installed onnx
knows, rewriting old op versions into the current semantics; :func:`to_onnx`
and :func:`save_onnx` write one ``ai.onnx`` opset. See ``docs/onnx.md``.
"""

from polyhal.interop.onnx.exporter import export_opset, save_onnx, to_onnx
from polyhal.interop.onnx.importer import load_onnx
from polyhal.interop.onnx.versions import (
    MIN_EXPORT_OPSET,
    MIN_IMPORT_OPSET,
    ORT_MAX_OPSET,
    max_export_opset,
    newest_opset,
)

__all__ = ["MIN_EXPORT_OPSET", "MIN_IMPORT_OPSET", "ORT_MAX_OPSET", "export_opset", "load_onnx",
           "max_export_opset", "newest_opset", "save_onnx", "to_onnx"]
