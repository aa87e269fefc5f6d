"""Reading ONNX models into polyhal graphs.

The model is parsed with protobuf (never executed, never passed to onnx's
shape inference); every field is checked here and every node is typed by
polyhal's own inference, and the resulting :class:`~polyhal.ir.Graph` is
verified as any other. Old op versions are rewritten into the current form
by :mod:`polyhal.interop.onnx.versions`.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, ModelProto, NodeProto

from polyhal.errors import (
    LimitExceededError,
    PolyhalError,
    SerializationError,
    UnsupportedError,
    VerificationError,
)
from polyhal.files import display, read_limited
from polyhal.interop.onnx.dtypes import to_dtype
from polyhal.interop.onnx.symbols import Declared, Symbols, declared_type, dim_params
from polyhal.interop.onnx.tensors import TensorReader
from polyhal.interop.onnx.text import check_text
from polyhal.interop.onnx.versions import (
    MIN_IMPORT_OPSET,
    SAME_SINCE,
    RawNode,
    import_rule,
    newest_opset,
    schema_problem,
    schema_version,
)
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node, Value, freeze_attr
from polyhal.ir.limits import Limits, current_limits, use_limits
from polyhal.ir.types import TensorType
from polyhal.ir.verify import check_arity, constant_value, infer_node, resolve_attrs
from polyhal.ops.registry import AttrKind, OpDef, lookup

DEFAULT_DOMAINS = ("", "ai.onnx")

Source = str | os.PathLike[str] | ModelProto | bytes | bytearray


def load_onnx(source: Source, *, limits: Limits | None = None) -> Graph:
    """Read an ONNX model (a path, a ``ModelProto`` or serialized bytes) as a verified
    polyhal graph.

    External data is read from the model file's folder only. Errors:
    :class:`SerializationError` for a file that is not a valid ONNX model,
    :class:`UnsupportedError` for ops, op versions, types or domains polyhal
    lacks, :class:`VerificationError` for a graph that breaks the IR's rules,
    :class:`LimitExceededError` for a model over ``limits`` (default: the
    limits in force); each message names the file and the node or value.
    """
    limits = limits or current_limits()
    with use_limits(limits):
        model, label, folder = _read(source, limits)
        check_text(model, label)
        try:
            return _Importer(model, label, folder, limits).run()
        except PolyhalError as exc:
            raise type(exc)(f"{label}: {exc}") from None
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            raise SerializationError(f"{label}: cannot import the model "
                                     f"({type(exc).__name__}: {exc})") from exc


def _read(source: Source, limits: Limits) -> tuple[ModelProto, str, Path | None]:
    if isinstance(source, ModelProto):
        return source, "<onnx model>", None
    if isinstance(source, bytes | bytearray):
        label, folder, data = "<onnx bytes>", None, bytes(source)
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        label, folder = display(path), path.parent
        data = read_limited(path, limits.max_file_bytes, "model file",
                            " (see polyhal.ir.Limits; large weights belong in external data)")
    else:
        raise SerializationError(f"load_onnx: expected a path, a ModelProto or bytes, got "
                                 f"{type(source).__name__}")
    if len(data) > limits.max_file_bytes:
        raise LimitExceededError(f"{label}: {len(data)} bytes exceed the model file limit of "
                                 f"{limits.max_file_bytes}")
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise SerializationError(f"{label}: not a valid ONNX model (the protobuf does not "
                                 f"parse: {exc})") from None
    return model, label, folder


def _domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def _qualified(domain: str, op: str) -> str:
    return f"{domain or 'ai.onnx'}.{op}"


class _Importer:
    """One model's import: checks, symbols, constants, nodes, graph."""

    def __init__(self, model: ModelProto, label: str, folder: Path | None,
                 limits: Limits) -> None:
        self.model = model
        self.label = label
        self.limits = limits
        self.reader = TensorReader(limits, folder)
        self.types: dict[str, TensorType] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.declared: dict[str, Declared] = {}
        self.producer_index: dict[str, str] = {}

    # ------------------------------------------------------------ structure

    def _check_structure(self) -> None:
        m = self.model
        if m.ir_version <= 0 or not m.HasField("graph"):
            what = "no IR version" if m.ir_version <= 0 else "no graph"
            raise SerializationError(f"not an ONNX model ({what})")
        if m.ir_version > onnx.IR_VERSION:
            raise SerializationError(f"IR version {m.ir_version} is newer than this polyhal "
                                     f"supports ({onnx.IR_VERSION}, onnx {onnx.__version__}); "
                                     "upgrade polyhal and onnx")
        self.opsets: dict[str, int] = {}
        for entry in m.opset_import:
            domain = _domain(entry.domain)
            if domain in self.opsets:
                raise SerializationError(f"opset_import lists domain "
                                         f"{entry.domain or 'ai.onnx'!r} twice")
            self.opsets[domain] = int(entry.version)
        if len(m.graph.node) > self.limits.max_nodes:
            raise LimitExceededError(f"{len(m.graph.node)} nodes exceed the limit of "
                                     f"{self.limits.max_nodes}")
        if m.ir_version < 3 and not m.opset_import:
            self.opsets[""] = 1  # before IR 3, models had no opset_import: opset 1
        opset = self.opsets.get("")
        if opset is None:
            if any(_domain(n.domain) == "" for n in m.graph.node):
                raise SerializationError("the model uses ai.onnx ops but imports no ai.onnx "
                                         "opset")
            self.opset = newest_opset()
            return
        if opset > newest_opset():
            raise SerializationError(
                f"ai.onnx opset {opset} is newer than this polyhal supports (opsets "
                f"{MIN_IMPORT_OPSET} to {newest_opset()}, from onnx {onnx.__version__}); "
                "upgrade polyhal and onnx")
        if opset < MIN_IMPORT_OPSET:
            raise SerializationError(f"invalid ai.onnx opset {opset}")
        self.opset = opset

    def _node_names(self) -> list[str]:
        """A unique, non-empty name for every node (kept where the model's is both)."""
        protos = self.model.graph.node
        counts = Counter(n.name for n in protos)
        taken = set(counts)
        names, seen = [], set()
        for index, node in enumerate(protos):
            name = node.name
            if not name or name in seen:
                name = self._fresh(f"{node.op_type or 'node'}_{index}", taken)
            seen.add(name)
            names.append(name)
        self.node_taken = taken
        return names

    @staticmethod
    def _fresh(stem: str, taken: set[str]) -> str:
        name, k = stem, 1
        while name in taken:
            k += 1
            name = f"{stem}_{k}"
        taken.add(name)
        return name

    def _check_ops(self, names: list[str]) -> None:
        """An UnsupportedError naming the first node whose op polyhal lacks (and the rest)."""
        missing: dict[str, str] = {}
        for name, node in zip(names, self.model.graph.node, strict=True):
            domain = _domain(node.domain)
            if domain == "" and lookup(node.op_type, "core") is not None:
                continue
            opset = self.opsets.get(domain)
            key = f"{_qualified(domain, node.op_type)} (opset {opset})" if opset else (
                f"{_qualified(domain, node.op_type)} (domain not imported)")
            missing.setdefault(key, name)
        if not missing:
            return
        (first, node_name), *others = missing.items()
        message = f"node {node_name!r} uses {first}, which polyhal does not support"
        if not first.startswith("ai.onnx."):
            message += " (only the default ONNX domain maps to polyhal's core ops)"
        if others:
            message += "; also unsupported: " + ", ".join(k for k, _ in others[:10])
            if len(others) > 10:
                message += f" and {len(others) - 10} more"
        raise UnsupportedError(message)

    # ------------------------------------------------------------ values

    def _symbols(self) -> Symbols:
        g = self.model.graph
        return Symbols(dim_params(v.type for v in (*g.input, *g.output, *g.value_info)))

    def _define(self, name: str, t: TensorType, who: str) -> None:
        if name in self.types:
            raise VerificationError(f"value name {name!r} is defined twice (the second time "
                                    f"by {who})")
        self.types[name] = t

    def _read_constants(self) -> None:
        g = self.model.graph
        if g.sparse_initializer:
            raise UnsupportedError(f"sparse initializer {g.sparse_initializer[0].values.name!r}"
                                   " is not supported")
        for tensor in g.initializer:
            if not tensor.name:
                raise SerializationError("an initializer has no name")
            if tensor.name in self.constants:
                raise SerializationError(f"initializer {tensor.name!r} appears twice")
            array = self.reader.read(tensor, f"initializer {tensor.name!r}")
            self.constants[tensor.name] = array
            self.consts[tensor.name] = array

    def _read_inputs(self, symbols: Symbols) -> list[Value]:
        inputs = []
        for proto in self.model.graph.input:
            if proto.name in self.constants:
                continue  # an initializer listed as an input (IR < 4 models): a constant
            where = f"graph input {proto.name!r}"
            if not proto.name:
                raise SerializationError("a graph input has no name")
            dtype, dims = declared_type(proto.type, where, symbols, self.limits)
            if dims is None:
                raise UnsupportedError(f"{where} has no shape (unknown rank); polyhal needs "
                                       "the rank of every graph input")
            shape = tuple(symbols.fresh(f"{proto.name}_dim{axis}") if d is None else d
                          for axis, d in enumerate(dims))
            value = Value(proto.name, TensorType(dtype, shape))
            self._define(value.name, value.type, where)
            inputs.append(value)
        for name, array in self.constants.items():
            self._define(name, TensorType.of(array, f"initializer {name!r}"),
                         f"initializer {name!r}")
        return inputs

    def _read_declared(self, symbols: Symbols) -> None:
        g = self.model.graph
        for proto in g.value_info:
            try:
                self.declared[proto.name] = declared_type(proto.type, "", symbols, self.limits)
            except PolyhalError:
                continue  # value_info is advice: a value polyhal cannot type fails later
        for proto in g.output:
            if proto.type.WhichOneof("value") is not None:
                dtype, dims = declared_type(proto.type, f"graph output {proto.name!r}", symbols,
                                            self.limits)
                if dims is None and proto.name in self.declared:
                    dims = self.declared[proto.name][1]  # value_info knows the shape
                self.declared[proto.name] = (dtype, dims)

    def _merge(self, inferred: TensorType, name: str, where: str) -> TensorType:
        """``inferred``, with dims inference could not express taken from the model's
        declaration of ``name`` (a static size, or a symbol of the graph inputs).

        A graph output declared with another dtype, rank or static size is a
        VerificationError; a contradicting ``value_info`` entry is ignored, as
        runtimes do.
        """
        declared = self.declared.get(name)
        if declared is None:
            return inferred
        dtype, dims = declared
        strict = name in self.output_names
        problem = None
        if dtype != inferred.dtype:
            problem = f"is declared {dtype}"
        elif dims is not None and len(dims) != inferred.rank:
            problem = f"is declared with rank {len(dims)}"
        elif dims is not None:
            for axis, (mine, theirs) in enumerate(zip(inferred.shape, dims, strict=True)):
                if isinstance(mine, int) and isinstance(theirs, int) and mine != theirs:
                    problem = f"is declared with dim {theirs} at axis {axis}"
        if problem is not None:
            if strict:
                raise VerificationError(f"{where}: value {name!r} {problem} but is {inferred}")
            return inferred
        if dims is None:
            return inferred
        shape = []
        for mine, theirs in zip(inferred.shape, dims, strict=True):
            unknown = isinstance(mine, str) and mine.startswith("_") and D.is_symbol(mine)
            known = isinstance(theirs, int) or theirs in self.input_symbols
            shape.append(theirs if unknown and known else mine)
        return inferred.with_shape(tuple(shape))

    # ------------------------------------------------------------ nodes

    def _attrs(self, proto: NodeProto, where: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        for a in proto.attribute:
            if a.name in attrs:
                raise SerializationError(f"{where}: attribute {a.name!r} appears twice")
            attrs[a.name] = self._attr_value(a, f"{where}: attribute {a.name!r}")
        return attrs

    def _attr_value(self, a: AttributeProto, where: str) -> Any:
        if a.ref_attr_name:
            raise SerializationError(f"{where} refers to a function attribute outside a "
                                     "function")
        kind = a.type
        try:
            if kind == AttributeProto.FLOAT:
                return float(a.f)
            if kind == AttributeProto.INT:
                return int(a.i)
            if kind == AttributeProto.STRING:
                return a.s.decode("utf-8")
            if kind == AttributeProto.TENSOR:
                return self.reader.read(a.t, where)
            if kind == AttributeProto.FLOATS:
                return tuple(float(v) for v in a.floats)
            if kind == AttributeProto.INTS:
                return tuple(int(v) for v in a.ints)
            if kind == AttributeProto.STRINGS:
                return tuple(s.decode("utf-8") for s in a.strings)
        except UnicodeDecodeError:
            raise SerializationError(f"{where}: a string is not valid UTF-8") from None
        if kind == AttributeProto.UNDEFINED:
            raise SerializationError(f"{where} has no type")
        name = AttributeProto.AttributeType.Name(kind) if kind in \
            AttributeProto.AttributeType.values() else str(kind)
        raise UnsupportedError(f"{where} has type {name}, which polyhal does not support")

    def _add(self, raw: RawNode, version: int) -> None:
        opdef = lookup(raw.op, "core")
        assert opdef is not None  # rules emit core ops only
        where = f"node {raw.name!r} ({opdef.qualified_name})"
        attrs = self._polyhal_attrs(opdef, raw, version, where)
        outputs = list(raw.outputs)
        while outputs and not outputs[-1]:
            outputs.pop()  # trailing omitted optional outputs
        outputs = [name or self._fresh(f"{raw.name}.unused{i}", self.value_taken)
                   for i, name in enumerate(outputs)]
        input_types: list[TensorType | None] = []
        for index, name in enumerate(raw.inputs):
            input_types.append(self._input_type(name, index, where) if name else None)
        frozen = {k: freeze_attr(v, f"{where} attribute {k!r}") for k, v in attrs.items()}
        resolved = resolve_attrs(opdef, frozen, where)
        check_arity(opdef, len(raw.inputs), len(outputs), where)
        inferred = infer_node(opdef, raw.name, input_types, resolved, len(outputs),
                              [self.consts.get(n) if n else None for n in raw.inputs])
        values = []
        for index, (name, t) in enumerate(zip(outputs, inferred, strict=True)):
            t = self._merge(t, name, where)
            self._define(name, t, f"output {index} of node {raw.name!r}")
            values.append(Value(name, t))
        value = constant_value(opdef, resolved)
        if value is not None:
            self.consts[outputs[0]] = value
        self.nodes.append(Node(opdef.name, raw.name, tuple(raw.inputs), tuple(values), frozen,
                               opdef.domain))

    def _input_type(self, name: str, index: int, where: str) -> TensorType:
        t = self.types.get(name)
        if t is not None:
            return t
        if name in self.producer_index:
            raise VerificationError(f"{where}: input {index} reads {name!r}, which node "
                                    f"{self.producer_index[name]!r} defines later: the graph "
                                    "has a cycle or its nodes are not in topological order")
        raise VerificationError(f"{where}: input {index} reads {name!r}, which no graph "
                                "input, constant or node defines")

    def _polyhal_attrs(self, opdef: OpDef, raw: RawNode, version: int,
                       where: str) -> dict[str, Any]:
        specs = opdef.attr_specs
        attrs: dict[str, Any] = {}
        for name, value in raw.attrs.items():
            spec = specs.get(name)
            if spec is None:
                try:
                    known = name in onnx.defs.get_schema(raw.op, self.opset, "").attributes
                except onnx.defs.SchemaError:
                    known = False
                if known:
                    raise UnsupportedError(f"{where}: attribute {name!r} of ai.onnx.{raw.op} "
                                           f"version {version} is not supported by polyhal")
                raise SerializationError(f"{where}: {name!r} is not an attribute of "
                                         f"ai.onnx.{raw.op} version {version}")
            if spec.kind is AttrKind.DTYPE and not isinstance(value, DType):
                if isinstance(value, int) and value == 0:
                    continue  # ONNX's "unset"
                if not isinstance(value, int):
                    raise VerificationError(f"{where}: attribute {name!r} must be an element "
                                            f"type code, got {value!r}")
                value = to_dtype(value, f"{where}: attribute {name!r}")
            attrs[name] = value
        return attrs

    def _node(self, proto: NodeProto, name: str) -> None:
        op = proto.op_type
        where = f"node {name!r} (ai.onnx.{op}, opset {self.opset})"
        version = schema_version(op, self.opset)
        if version is None:
            raise SerializationError(f"{where}: ai.onnx.{op} does not exist in opset "
                                     f"{self.opset}")
        problem = schema_problem(proto, self.opset)
        if problem is not None:
            raise SerializationError(f"{where}: {problem}")
        rule = import_rule(op, version)
        if rule is None:
            opdef = lookup(op, "core")
            raise UnsupportedError(
                f"{where}: polyhal cannot map the semantics of ai.onnx.{op} version {version}"
                f" (it follows version {opdef.onnx_since if opdef else '?'}; versions from "
                f"{SAME_SINCE.get(op, '?')} on are supported); convert the model to a newer "
                "opset with onnx.version_converter")
        raw = RawNode(op, name, list(proto.input), list(proto.output),
                      self._attrs(proto, where))
        for index, value in enumerate(raw.inputs):
            if value:
                self._input_type(value, index, f"node {name!r} (ai.onnx.{op})")
        try:
            replacement = rule(raw, _Context(self), version)
        except UnsupportedError as exc:
            raise UnsupportedError(f"{where}: {exc}") from None
        except PolyhalError:
            raise
        except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
            raise SerializationError(f"{where}: cannot rewrite version {version} into the "
                                     f"current form ({type(exc).__name__}: {exc})") from None
        for new in replacement:
            self._add(new, version)

    # ------------------------------------------------------------ the graph

    def run(self) -> Graph:
        self._check_structure()
        g = self.model.graph
        names = self._node_names()
        self._check_ops(names)
        self.value_taken = {v for n in g.node for v in (*n.input, *n.output) if v}
        self.value_taken |= {v.name for v in (*g.input, *g.output, *g.value_info)}
        self.value_taken |= {t.name for t in g.initializer}
        self.used = {v for n in g.node for v in n.input if v} | {o.name for o in g.output}
        self.producer_index = {o: name for name, n in zip(names, g.node, strict=True)
                               for o in n.output if o}
        symbols = self._symbols()
        self._read_constants()
        inputs = self._read_inputs(symbols)
        self.input_symbols = {s for v in inputs for s in v.type.symbols()}
        self.output_names = {o.name for o in g.output}
        self._read_declared(symbols)
        for name, proto in zip(names, g.node, strict=True):
            self._node(proto, name)
        outputs = []
        for proto in g.output:
            if proto.name not in self.types:
                raise VerificationError(f"graph output {proto.name!r} is not defined by any "
                                        "node, graph input or initializer")
            where = f"graph output {proto.name!r}"
            outputs.append(Value(proto.name, self._merge(self.types[proto.name], proto.name,
                                                         where)))
        return Graph(g.name or "onnx_model", tuple(inputs), tuple(outputs), tuple(self.nodes),
                     self.constants, g.doc_string)


class _Context:
    """The importer as a :class:`~polyhal.interop.onnx.versions.RuleContext`."""

    def __init__(self, importer: _Importer) -> None:
        self.im = importer

    def type_of(self, name: str) -> TensorType:
        return self.im._input_type(name, 0, "rule")

    def const_value(self, name: str) -> np.ndarray | None:
        return self.im.consts.get(name)

    def constant(self, array: np.ndarray, stem: str) -> str:
        name = self.im._fresh(stem, self.im.value_taken)
        frozen = np.array(array, copy=True)
        frozen.flags.writeable = False
        self.im.constants[name] = frozen
        self.im.consts[name] = frozen
        self.im._define(name, TensorType.of(frozen, f"constant {name!r}"), f"constant {name!r}")
        return name

    def value_name(self, stem: str) -> str:
        return self.im._fresh(stem, self.im.value_taken)

    def node_name(self, stem: str) -> str:
        return self.im._fresh(stem, self.im.node_taken)

    def is_used(self, name: str) -> bool:
        return name in self.im.used
