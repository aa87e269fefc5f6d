"""Reading NIR's HDF5 files into ``nir`` objects, checked field by field.

The file is read with h5py, never through code it names: only hard links are
followed (no external links, no virtual datasets), only numeric and string
datasets are read, and every dataset is checked against the load limits
*before* it is decompressed, so a small file cannot inflate into a huge
tensor. Each node is then built by the ``nir`` class of its type; a field
that is missing, unknown or malformed is a :class:`SerializationError` naming
the node and the field.

A file whose HDF5 metadata is damaged on purpose can make libhdf5 itself
loop (seen reading a damaged variable-length string dataset), in C, below
anything Python can interrupt: :func:`read_nir_file` therefore parses in a
worker process that is stopped after a timeout
(:func:`polyhal.interop.worker.call_with_timeout`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import h5py
import nir
import numpy as np

from polyhal.errors import (
    LimitExceededError,
    PolyhalError,
    SerializationError,
    VerificationError,
    shown,
)
from polyhal.interop.nir.primitives import check_supported
from polyhal.interop.nir.structure import MAX_DEPTH
from polyhal.interop.worker import call_with_timeout
from polyhal.ir.limits import Limits

_SHAPE_FIELD = {"Input": "shape", "Output": "shape"}
"""Types whose file field differs from the constructor: Input/Output store ``shape``."""
_OPTIONAL = {"Conv1d": {"input_shape"}, "Conv2d": {"input_shape"}, "Flatten": {"input_type"}}
"""Fields a file may omit although the constructor has no default."""
_CONV_INTS = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "input_shape": 0}
_INT_FIELDS = {"Input": {"shape": 0}, "Output": {"shape": 0}, "Conv1d": _CONV_INTS,
               "Conv2d": _CONV_INTS, "SumPool2d": {"kernel_size": 1, "stride": 1, "padding": 0},
               "Flatten": {"start_dim": None, "end_dim": None, "input_type": 0}}
"""Fields that hold integers (a padding may also be a string), with their least value
(None: any), checked before nir computes shapes from them."""
MAX_STRING_BYTES = 1024
"""Bytes of one fixed-length string in a NIR file (a node type, a node name)."""
MAX_EDGES = 1 << 20
"""Edges of one NIR graph (also bounded by the square of ``Limits.max_nodes``)."""


def read_nir_file(path: str | os.PathLike[str], limits: Limits) -> nir.NIRGraph:
    """The NIR graph in the file at ``path``, read without executing anything from it,
    in a worker process stopped after ``limits.max_parse_seconds``.

    Errors do not repeat ``path``: :func:`~polyhal.interop.nir.load_nir` adds it.
    """
    return call_with_timeout(_read, (Path(path), limits), "reading the NIR file",
                             limits.max_parse_seconds)


def _read(path: Path, limits: Limits) -> nir.NIRGraph:
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise SerializationError("cannot read NIR file (not a regular file)")
    except OSError as exc:
        raise SerializationError(f"cannot read NIR file ({exc.strerror or exc})") from None
    except ValueError:
        raise SerializationError("cannot read NIR file (the path holds a NUL byte)") from None
    if size > limits.max_total_bytes:
        raise LimitExceededError(f"the file's {size} bytes exceed the limit of "
                                 f"{limits.max_total_bytes} (see polyhal.ir.Limits)")
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise SerializationError(f"not a NIR file (HDF5 cannot open it: {exc})") from None
    try:
        # nir's node classes compute output shapes from the file's sizes with numpy,
        # which warns of overflow on stderr; the sizes are checked after the read
        with handle, np.errstate(all="ignore"):
            return _Reader(limits).graph(_child(handle, "node", "the file"), "", 0)
    except PolyhalError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        raise SerializationError(f"the NIR file is damaged or truncated "
                                 f"({type(exc).__name__}: {exc})") from None


def _child(group: h5py.Group, key: str, where: str) -> Any:
    """``group[key]`` through a hard link only; a SerializationError if it is absent."""
    link = group.get(key, getlink=True)
    if link is None:
        raise SerializationError(f"{where} has no {key!r} entry")
    if not isinstance(link, h5py.HardLink):
        raise SerializationError(f"{where}: {key!r} is a {type(link).__name__}; NIR files hold "
                                 "their data in the file itself")
    return group[key]


def _label(path: str) -> str:
    return f"NIR node {path!r}" if path else "the NIR graph"


class _Reader:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total_bytes = 0
        self.nodes = 0

    def value(self, dataset: Any, where: str, max_strings: int = 1) -> Any:
        """A dataset's content: a str, a number, an array of numbers or of at most
        ``max_strings`` str (each Python object costs far more than its bytes in the file)."""
        if not isinstance(dataset, h5py.Dataset):
            raise SerializationError(f"{where} is a group, expected a value")
        if dataset.is_virtual:
            raise SerializationError(f"{where} is a virtual dataset (it points at other files)")
        text = h5py.check_string_dtype(dataset.dtype) is not None
        if not text and dataset.dtype.kind not in "biuf":
            raise SerializationError(f"{where} has element type {dataset.dtype}; NIR stores "
                                     "numbers and strings")
        self.limits.check_shape(dataset.shape, where)
        if text:
            _check_strings(dataset, where, max_strings)
        self.total_bytes += dataset.size * dataset.dtype.itemsize
        if self.total_bytes > self.limits.max_total_bytes:
            raise LimitExceededError(f"{where}: the file's tensors exceed "
                                     f"{self.limits.max_total_bytes} bytes in total")
        data = dataset[()]
        if not text:
            return data
        if isinstance(data, bytes):
            return _decode(data, where)
        return np.vectorize(lambda b: _decode(b, where), otypes=[object])(data)

    def graph(self, group: Any, path: str, depth: int) -> nir.NIRGraph:
        where = _label(path)
        if depth > MAX_DEPTH:
            raise SerializationError(f"{where}: subgraphs nest deeper than {MAX_DEPTH} levels")
        if not isinstance(group, h5py.Group):
            raise SerializationError(f"{where} is a value, expected a group")
        if depth == 0:
            kind = self.kind(group, where)
            if kind != "NIRGraph":
                raise SerializationError(f"the file holds a single {kind!r} node, not a NIRGraph;"
                                         " polyhal loads graphs (wrap it: NIRGraph.from_list)")
        nodes_group = _child(group, "nodes", where)
        if not isinstance(nodes_group, h5py.Group):
            raise SerializationError(f"{where}: 'nodes' is a value, expected a group")
        nodes = {}
        for key in nodes_group:
            self.nodes += 1
            if self.nodes > self.limits.max_nodes:
                raise LimitExceededError(f"{where}: more than {self.limits.max_nodes} nodes")
            inner = f"{path}.{key}" if path else key
            nodes[key] = self.node(_child(nodes_group, key, where), inner, depth)
        edges = self.edges(_child(group, "edges", where), where)
        return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)

    def kind(self, group: Any, where: str) -> str:
        """The ``type`` of a node or graph: one string."""
        kind = self.value(_child(group, "type", where), f"{where}: 'type'")
        if not isinstance(kind, str):
            raise SerializationError(f"{where}: 'type' must be a string, got "
                                     f"{_describe(kind)}")
        return kind

    def edges(self, dataset: Any, where: str) -> list[tuple[str, str]]:
        max_edges = min(self.limits.max_nodes ** 2, MAX_EDGES)
        data = self.value(dataset, f"{where}: 'edges'", max_strings=2 * max_edges)
        if isinstance(data, np.ndarray) and data.size == 0:
            return []
        if not (isinstance(data, np.ndarray) and data.ndim == 2 and data.shape[1] == 2
                and data.dtype == object):
            raise SerializationError(f"{where}: 'edges' must be pairs of node names, got "
                                     f"{np.shape(data)}")
        return [(str(a), str(b)) for a, b in data]

    def node(self, group: Any, path: str, depth: int) -> nir.NIRNode:
        where = _label(path)
        if not isinstance(group, h5py.Group):
            raise SerializationError(f"{where} is a value, expected a group")
        kind = self.kind(group, where)
        if kind == "NIRGraph":
            return self.graph(group, path, depth + 1)
        check_supported(kind, path)
        cls = getattr(nir, kind)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "metadata"}
        if kind in _SHAPE_FIELD:
            fields = {"shape": None}
        given = {key: self.value(_child(group, key, where), f"{where}: field {key!r}")
                 for key in group if key not in ("type", "metadata")}
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise SerializationError(f"{where} ({kind}): unknown field {unknown[0]!r} (nir "
                                     f"{nir.__version__} knows {', '.join(sorted(fields))})")
        for name, spec in fields.items():
            required = spec is None or (spec.default is dataclasses.MISSING
                                        and spec.default_factory is dataclasses.MISSING)
            if name not in given and required and name not in _OPTIONAL.get(kind, ()):
                raise SerializationError(f"{where} ({kind}) has no field {name!r}")
        for name, least in _INT_FIELDS.get(kind, {}).items():
            if name in given:
                _check_ints(given[name], least, f"{where} ({kind}): field {name!r}")
        return _construct(kind, cls, given, where)


def _construct(kind: str, cls: type, given: dict[str, Any], where: str) -> nir.NIRNode:
    if kind == "Input":
        kwargs: dict[str, Any] = {"input_type": {"input": given["shape"]}}
    elif kind == "Output":
        kwargs = {"output_type": {"output": given["shape"]}}
    elif kind == "Flatten":
        kwargs = {**given, "input_type": {"input": given.get("input_type")}}
    elif kind in ("Conv1d", "Conv2d"):
        kwargs = {"input_shape": None, **given}
    else:
        kwargs = given
    try:
        return cls(**kwargs)
    except (AssertionError, ValueError, TypeError, IndexError, AttributeError, OverflowError,
            ZeroDivisionError) as exc:
        raise VerificationError(f"{where} ({kind}): nir rejects its fields: "
                                f"{exc or type(exc).__name__}") from None


def _decode(data: Any, where: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except (UnicodeDecodeError, TypeError):
        raise SerializationError(f"{where}: a string is not valid UTF-8") from None


def _check_strings(dataset: Any, where: str, max_strings: int) -> None:
    """Refuse a string dataset with more or longer strings than ``where`` can hold,
    before anything is read or decompressed."""
    if dataset.size > max_strings:
        raise LimitExceededError(f"{where} holds {dataset.size} strings, more than the "
                                 f"{max_strings} it may")
    if dataset.dtype.itemsize > MAX_STRING_BYTES and dataset.dtype.kind == "S":
        raise LimitExceededError(f"{where} holds strings of {dataset.dtype.itemsize} bytes, "
                                 f"more than the limit of {MAX_STRING_BYTES}")


def _check_ints(value: Any, least: int | None, where: str) -> None:
    """A VerificationError naming ``where`` unless ``value`` is a string (a padding
    mode, checked by nir) or finite integers of at least ``least``."""
    if isinstance(value, str):
        return
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" or not np.all(np.isfinite(array)) \
            or not np.all(array == np.round(array)) \
            or (least is not None and np.any(array < least)):
        expected = "integers" if least is None else f"integers >= {least}"
        raise VerificationError(f"{where} must hold {expected}, got {_describe(value)}")


def _describe(value: Any) -> str:
    """``value`` for an error message, short even when it is a large array."""
    if isinstance(value, np.ndarray):
        if value.size > 8:
            return f"an array of shape {list(value.shape)}"
        return str(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    return shown(value)
