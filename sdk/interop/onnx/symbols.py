"""ONNX value types and symbolic dims in polyhal terms.

ONNX names a symbolic dim with any string (``dim_param``: ``"batch size"``,
``"N+1"``, ``"unk__12"``); polyhal symbols are identifiers that start with a
letter. :class:`Symbols` maps each distinct ``dim_param`` to one valid symbol
(the same string always to the same symbol, different strings to different
symbols) and makes fresh symbols for dims that have neither a value nor a
param.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from onnx import TypeProto

from polyhal.errors import LimitExceededError, SerializationError, UnsupportedError
from polyhal.interop.onnx.dtypes import to_dtype
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.limits import Limits

_USER_SYMBOL = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_MAX_SYMBOL = 64

Declared = tuple[DType, list[D.Dim | None] | None]
"""A declared type: the dtype and, when the rank is known, each dim (``None``: unknown)."""


def sanitize(text: str) -> str:
    """``text`` as a polyhal symbol: invalid characters become ``_``, and a symbol that
    would not start with a letter gets a ``d`` in front."""
    symbol = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:_MAX_SYMBOL]
    if not symbol or not symbol[0].isalpha():
        symbol = "d" + ("_" + symbol if symbol else "")
    return symbol


class Symbols:
    """The symbols of one model, assigned to its ``dim_param`` strings."""

    def __init__(self, params: Iterable[str]) -> None:
        self._map: dict[str, str] = {}
        self._used: set[str] = set()
        ordered = list(dict.fromkeys(params))
        # Valid symbols keep their names; the others take what is left.
        for text in ordered:
            if _USER_SYMBOL.fullmatch(text) and len(text) <= _MAX_SYMBOL:
                self._map[text] = text
                self._used.add(text)
        for text in ordered:
            if text not in self._map:
                self._map[text] = self._claim(sanitize(text))

    def _claim(self, base: str) -> str:
        name, k = base, 1
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        return name

    def param(self, text: str) -> str:
        """The symbol of ``dim_param`` ``text``."""
        if text not in self._map:
            self._map[text] = self._claim(sanitize(text))
        return self._map[text]

    def fresh(self, stem: str) -> str:
        """A new symbol for a dim with neither a value nor a param."""
        return self._claim(sanitize(stem))


def declared_type(type_proto: TypeProto, where: str, symbols: Symbols,
                  limits: Limits) -> Declared:
    """The dtype and dims of a tensor ``type_proto`` (dims ``None`` for unknown rank)."""
    kind = type_proto.WhichOneof("value")
    if kind is None:
        raise SerializationError(f"{where} has no type")
    if kind != "tensor_type":
        raise UnsupportedError(f"{where} is a {kind.replace('_type', '')}, not a tensor; "
                               "polyhal supports tensor values only")
    tensor = type_proto.tensor_type
    dtype = to_dtype(tensor.elem_type, where)
    if not tensor.HasField("shape"):
        return dtype, None
    if len(tensor.shape.dim) > limits.max_rank:
        raise LimitExceededError(f"{where}: rank {len(tensor.shape.dim)} exceeds the limit of "
                                 f"{limits.max_rank}")
    dims: list[D.Dim | None] = []
    for dim in tensor.shape.dim:
        which = dim.WhichOneof("value")
        if which == "dim_value":
            if dim.dim_value < 0:
                raise SerializationError(f"{where}: dim {dim.dim_value} is negative")
            dims.append(int(dim.dim_value))
        elif which == "dim_param" and dim.dim_param:
            dims.append(symbols.param(dim.dim_param))
        else:
            dims.append(None)
    return dtype, dims


def dim_params(type_protos: Iterable[TypeProto]) -> list[str]:
    """Every ``dim_param`` the tensor types mention, in order."""
    found = []
    for t in type_protos:
        if t.WhichOneof("value") == "tensor_type" and t.tensor_type.HasField("shape"):
            found.extend(d.dim_param for d in t.tensor_type.shape.dim
                         if d.WhichOneof("value") == "dim_param" and d.dim_param)
    return found
