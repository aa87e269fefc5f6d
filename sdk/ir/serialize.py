"""Versioned JSON + ``.npz`` serialization of graphs.

``save(graph, "model.json")`` writes the structure to ``model.json`` and every
tensor (constants and tensor attributes) to ``model.npz`` beside it. The JSON
records each tensor's dtype and shape, so bfloat16 survives (it is stored as
its raw 16-bit pattern). Both files are written atomically.

``load("model.json")`` never executes code from the files: the npz is read
with ``allow_pickle=False``, every tensor's header is checked against the JSON
and against :class:`~polyhal.ir.Limits` *before* its data is read, and the JSON
is validated field by field; every problem is a :class:`SerializationError`
(or :class:`LimitExceededError`) naming the file and the field.
"""

from __future__ import annotations

import io
import json
import lzma
import math
import os
import tokenize
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from polyhal.errors import IRError, LimitExceededError, SerializationError, shown
from polyhal.files import display, open_regular, read_limited, write_atomically
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ir.limits import Limits, current_limits
from polyhal.ir.types import TensorType

FORMAT_NAME = "polyhal.graph"
FORMAT_VERSION = 1

_CHUNK_BYTES = 1 << 20
"""Tensor data is read into its array in chunks of this size (no second copy)."""
_DAMAGED = (ValueError, OSError, EOFError, SyntaxError, RuntimeError, zipfile.BadZipFile,
            zlib.error, lzma.LZMAError, tokenize.TokenError)
"""What zipfile, its decompressors and numpy's npy-header parser raise on a damaged npz
(RuntimeError for an encrypted entry, its subclass NotImplementedError for an unknown
compression method)."""


# ----------------------------------------------------------------- writing

def _storage(array: np.ndarray) -> np.ndarray:
    """The array as stored in the npz: bfloat16 as its uint16 bit pattern."""
    if DType.from_numpy(array.dtype) is DType.BFLOAT16:
        return np.array(array, order="C").view(np.uint16)
    return np.array(array, order="C")


def _encode_float(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)  # 'nan', 'inf', '-inf'


def _encode_attr(value: Any, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    if isinstance(value, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = value
        return {"tensor": _tensor_ref(key, value)}
    if isinstance(value, DType):
        return {"dtype": value.value}
    if isinstance(value, bool | int):
        return {"int": int(value)}
    if isinstance(value, float):
        return {"float": _encode_float(value)}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, tuple):
        if all(isinstance(v, int) for v in value):
            return {"ints": list(value)}
        if all(isinstance(v, int | float) for v in value):
            return {"floats": [_encode_float(float(v)) for v in value]}
        if all(isinstance(v, str) for v in value):
            return {"strings": list(value)}
    raise SerializationError(f"cannot serialize attribute value {value!r}")


def _tensor_ref(key: str, array: np.ndarray) -> dict[str, Any]:
    return {"key": key, "dtype": DType.from_numpy(array.dtype).value,
            "shape": [int(d) for d in array.shape]}


def _value_doc(value: Value) -> dict[str, Any]:
    return {"name": value.name, "dtype": value.type.dtype.value, "shape": list(value.type.shape)}


def to_document(graph: Graph) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON document of ``graph`` and the tensors it refers to by key."""
    tensors: dict[str, np.ndarray] = {}
    constants = []
    for name, array in graph.constants.items():
        key = f"t{len(tensors)}"
        tensors[key] = array
        constants.append({"name": name, **_tensor_ref(key, array)})
    nodes = [{
        "name": n.name, "domain": n.domain, "op": n.op, "inputs": list(n.inputs),
        "outputs": [_value_doc(o) for o in n.outputs],
        "attrs": {k: _encode_attr(v, tensors) for k, v in sorted(n.attrs.items())},
    } for n in graph.nodes]
    doc = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name,
           "doc": graph.doc, "inputs": [_value_doc(v) for v in graph.inputs],
           "outputs": [_value_doc(v) for v in graph.outputs], "constants": constants,
           "nodes": nodes}
    return doc, tensors


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; a failure is a :class:`SerializationError`
    naming ``path``."""
    try:
        write_atomically(path, data)
    except OSError as exc:
        raise SerializationError(f"{display(path)}: cannot write the file "
                                 f"({exc.strerror or exc})") from None


def tensors_path(json_path: str | os.PathLike[str]) -> Path:
    """Where the tensors of the model at ``json_path`` live: the same stem, ``.npz``."""
    return Path(json_path).with_suffix(".npz")


def save(graph: Graph, path: str | os.PathLike[str]) -> Path:
    """Write ``graph`` to ``path`` (JSON) and its tensors beside it (``.npz``)."""
    if not isinstance(graph, Graph):
        raise SerializationError(f"save: expected a Graph, got {type(graph).__name__}")
    if not isinstance(path, str | os.PathLike):
        raise SerializationError(f"save: expected a file path ending in .json, got "
                                 f"{type(path).__name__}")
    path = Path(path)
    if "\x00" in str(path):
        raise SerializationError(f"save: the path {display(path)} holds a NUL byte")
    if path.suffix != ".json":
        raise SerializationError(f"{path}: a polyhal model file must end in .json")
    doc, tensors = to_document(graph)
    buffer = io.BytesIO()
    np.savez(buffer, **{k: _storage(v) for k, v in tensors.items()})
    _write(tensors_path(path), buffer.getvalue())
    _write(path, json.dumps(doc, indent=1).encode())
    return path


# ----------------------------------------------------------------- reading

class _Reader:
    """Validates a JSON document field by field, naming the field on error."""

    def __init__(self, source: str, limits: Limits) -> None:
        self.source = source
        self.limits = limits

    def fail(self, where: str, message: str) -> SerializationError:
        return SerializationError(f"{self.source}: {where}: {message}")

    def get(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str,
            default: Any = ...) -> Any:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object, got {type(obj).__name__}")
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(f"{where}.{key}", "missing")
        value = obj[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool
                                           and bool not in _as_tuple(kind)):
            names = "/".join(k.__name__ for k in _as_tuple(kind))
            raise self.fail(f"{where}.{key}", f"expected {names}, got {type(value).__name__}")
        return value

    def list_of(self, obj: Any, key: str, where: str) -> list[Any]:
        return self.get(obj, key, list, where)

    def tensor_type(self, obj: Any, where: str) -> TensorType:
        dtype = DType.parse(self.get(obj, "dtype", str, where), f"{self.source}: {where}.dtype")
        shape = self.get(obj, "shape", list, where)
        if len(shape) > self.limits.max_rank:
            raise LimitExceededError(f"{self.source}: {where}.shape: rank {len(shape)} exceeds "
                                     f"the limit of {self.limits.max_rank}")
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, int | str):
                raise self.fail(f"{where}.shape", f"dimension {d!r} is not an int or symbol")
        try:
            return TensorType(dtype, tuple(shape))
        except LimitExceededError as exc:
            raise LimitExceededError(f"{self.source}: {where}.shape: {exc}") from None
        except IRError as exc:
            raise self.fail(f"{where}.shape", str(exc)) from None

    def value(self, obj: Any, where: str) -> Value:
        return self.build(Value, where, self.get(obj, "name", str, where),
                          self.tensor_type(obj, where))

    def build(self, cls: type, where: str, *args: Any) -> Any:
        """``cls(*args)``, its error naming the file and ``where``."""
        try:
            return cls(*args)
        except IRError as exc:
            raise type(exc)(f"{self.source}: {where}: {exc}") from None


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


class _TensorStore:
    """Reads tensors from an npz lazily, checking each header before its data."""

    def __init__(self, path: Path, limits: Limits) -> None:
        self.path = path
        self.limits = limits
        self.total = 0
        self._zip: zipfile.ZipFile | None = None
        self._file: IO[bytes] | None = None  # ZipFile does not close a file it is given

    def _archive(self) -> zipfile.ZipFile:
        if self._zip is None:
            if not self.path.exists():
                raise SerializationError(f"{self.path}: tensor file is missing")
            self._file = open_regular(self.path, "tensor file")
            try:
                self._zip = zipfile.ZipFile(self._file)
            except _DAMAGED as exc:
                raise SerializationError(f"{self.path}: not a valid npz file ({exc})") from None
        return self._zip

    def read(self, ref: Mapping[str, Any], reader: _Reader, where: str) -> np.ndarray:
        key = reader.get(ref, "key", str, where)
        expected = reader.tensor_type(ref, where)
        if not expected.is_static:
            raise reader.fail(f"{where}.shape", "a stored tensor needs a static shape")
        shape = tuple(int(d) for d in expected.shape)
        self.limits.check_shape(shape, f"{self.path}: {where} ({key})")
        nbytes = expected.num_elements * expected.dtype.itemsize  # type: ignore[operator]
        self.total += nbytes
        if self.total > self.limits.max_total_bytes:
            raise LimitExceededError(f"{self.path}: tensors exceed {self.limits.max_total_bytes} "
                                     f"bytes in total (at {where})")
        archive = self._archive()
        try:
            info = archive.getinfo(f"{key}.npy")
        except KeyError:
            raise SerializationError(f"{self.path}: {where}: tensor {key!r} is missing") from None
        if info.file_size > nbytes + 4096:
            raise SerializationError(f"{self.path}: {where}: entry {key!r} is {info.file_size} "
                                     f"bytes, more than its declared {expected} needs")
        storage = np.dtype(np.uint16) if expected.dtype is DType.BFLOAT16 else expected.dtype.numpy
        array = np.empty(shape, storage)
        try:
            with archive.open(info) as fh:
                self._check_header(fh, info, key, array, expected, where)
                complete = _read_into(fh, array)
        except SerializationError:
            raise
        except _DAMAGED as exc:
            raise SerializationError(f"{self.path}: {where}: tensor {key!r} cannot be read: "
                                     f"its entry is damaged ({type(exc).__name__}: {exc})"
                                     ) from None
        if not complete:
            raise SerializationError(f"{self.path}: {where}: tensor {key!r} is truncated")
        array.flags.writeable = False  # so that the graph keeps it without a copy
        return array.view(DType.BFLOAT16.numpy) if expected.dtype is DType.BFLOAT16 else array

    def _check_header(self, fh: IO[bytes], info: zipfile.ZipInfo, key: str,
                      array: np.ndarray, expected: TensorType, where: str) -> None:
        """Check the npy header of entry ``key`` against the array it must fill, and the
        entry's size in the zip directory against the header and the array."""
        version = np.lib.format.read_magic(fh)
        header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                  else np.lib.format.read_array_header_2_0)(fh)
        file_shape, fortran, file_dtype = header
        at = f"{self.path}: {where}: entry {key!r}"
        if file_dtype != array.dtype or tuple(file_shape) != array.shape:
            raise SerializationError(f"{at} holds {file_dtype}{list(file_shape)}, but the model "
                                     f"declares {expected}")
        if fortran and array.ndim > 1:
            raise SerializationError(f"{at} is stored in Fortran (column-major) order; polyhal "
                                     "reads C-ordered arrays (write it with np.ascontiguousarray)")
        needed = fh.tell() + array.nbytes
        if info.file_size < needed:
            raise SerializationError(f"{self.path}: {where}: tensor {key!r} is truncated: the "
                                     f"entry is {info.file_size} bytes, {expected} needs {needed}")
        if info.file_size > needed:
            raise SerializationError(f"{at} is {info.file_size} bytes, more than its declared "
                                     f"{expected} needs ({needed})")

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
        if self._file is not None:
            self._file.close()


def _read_into(fh: IO[bytes], array: np.ndarray) -> bool:
    """Fill ``array`` from ``fh`` chunk by chunk; False if ``fh`` ends first."""
    buffer = array.reshape(-1).view(np.uint8)
    done = 0
    while done < buffer.size:
        chunk = fh.read(min(_CHUNK_BYTES, buffer.size - done))
        if not chunk:
            return False
        buffer[done:done + len(chunk)] = np.frombuffer(chunk, np.uint8)
        done += len(chunk)
    return True


def _decode_float(value: Any, reader: _Reader, where: str) -> float:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise reader.fail(where, f"expected a number, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:  # an int beyond float64's range
        raise reader.fail(where, f"{shown(value)} is too large for a float") from None


def _decode_attr(obj: Any, reader: _Reader, store: _TensorStore, where: str) -> Any:
    if not isinstance(obj, dict) or len(obj) != 1:
        raise reader.fail(where, "an attribute is an object with exactly one kind key")
    (kind, value), = obj.items()
    if kind == "int":
        return reader.get(obj, "int", int, where)
    if kind == "float":
        return _decode_float(value, reader, f"{where}.float")
    if kind == "string":
        return reader.get(obj, "string", str, where)
    if kind == "dtype":
        return DType.parse(reader.get(obj, "dtype", str, where), f"{reader.source}: {where}")
    if kind == "tensor":
        return store.read(value, reader, f"{where}.tensor")
    if kind in ("ints", "floats", "strings"):
        items = reader.get(obj, kind, list, where)
        if kind == "floats":
            return tuple(_decode_float(v, reader, f"{where}.floats") for v in items)
        element = int if kind == "ints" else str
        for v in items:
            if isinstance(v, bool) or not isinstance(v, element):
                raise reader.fail(f"{where}.{kind}", f"{v!r} is not a {element.__name__}")
        return tuple(items)
    raise reader.fail(where, f"unknown attribute kind {kind!r}")


def from_document(doc: Any, store: _TensorStore, source: str = "<document>",
                  limits: Limits | None = None) -> Graph:
    """The graph described by a parsed JSON document."""
    limits = limits or current_limits()
    r = _Reader(source, limits)
    if not isinstance(doc, dict):
        raise r.fail("document", f"expected an object, got {type(doc).__name__}")
    if r.get(doc, "format", str, "document") != FORMAT_NAME:
        raise r.fail("format", f"expected {FORMAT_NAME!r}, got {doc['format']!r}")
    version = r.get(doc, "version", int, "document")
    if version > FORMAT_VERSION:
        raise r.fail("version", f"format version {version} is newer than this polyhal "
                                f"supports ({FORMAT_VERSION}); upgrade polyhal")
    if version < 1:
        raise r.fail("version", f"invalid format version {version}")
    nodes_doc = r.list_of(doc, "nodes", "document")
    if len(nodes_doc) > limits.max_nodes:
        raise LimitExceededError(f"{source}: {len(nodes_doc)} nodes exceed the limit of "
                                 f"{limits.max_nodes}")
    inputs = [r.value(v, f"inputs[{i}]")
              for i, v in enumerate(r.list_of(doc, "inputs", "document"))]
    outputs = [r.value(v, f"outputs[{i}]")
               for i, v in enumerate(r.list_of(doc, "outputs", "document"))]
    constants: dict[str, np.ndarray] = {}
    for i, c in enumerate(r.list_of(doc, "constants", "document")):
        name = r.get(c, "name", str, f"constants[{i}]")
        if name in constants:
            raise r.fail(f"constants[{i}].name", f"constant {name!r} appears twice")
        constants[name] = store.read(c, r, f"constants[{i}]")
    nodes = []
    for i, n in enumerate(nodes_doc):
        where = f"nodes[{i}]"
        inputs_ = r.list_of(n, "inputs", where)
        if not all(isinstance(x, str) for x in inputs_):
            raise r.fail(f"{where}.inputs", "expected a list of value names")
        attrs_doc = r.get(n, "attrs", dict, where, default={})
        attrs = {k: _decode_attr(v, r, store, f"{where}.attrs.{k}") for k, v in attrs_doc.items()}
        outs = [r.value(o, f"{where}.outputs[{j}]")
                for j, o in enumerate(r.list_of(n, "outputs", where))]
        nodes.append(r.build(Node, where, r.get(n, "op", str, where),
                             r.get(n, "name", str, where), tuple(inputs_), tuple(outs), attrs,
                             r.get(n, "domain", str, where)))
    try:
        return Graph(r.get(doc, "name", str, "document"), tuple(inputs), tuple(outputs),
                     tuple(nodes), constants, r.get(doc, "doc", str, "document", default=""))
    except IRError as exc:
        raise type(exc)(f"{source}: {exc}") from None


def load(path: str | os.PathLike[str], limits: Limits | None = None) -> Graph:
    """Load and verify the model at ``path`` (and its ``.npz`` beside it)."""
    if not isinstance(path, str | os.PathLike):
        raise SerializationError(f"load: expected a file path, got {type(path).__name__}")
    path = Path(path)
    limits = limits or current_limits()
    data = read_limited(path, limits.max_file_bytes, "model file")
    try:
        doc = json.loads(data)
    except RecursionError:
        raise SerializationError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, an int of 4301 digits
        raise SerializationError(f"{path}: not valid JSON ({exc})") from None
    store = _TensorStore(tensors_path(path), limits)
    try:
        return from_document(doc, store, str(path), limits)
    finally:
        store.close()
