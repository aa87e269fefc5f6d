"""Writing polyhal graphs as ONNX models.

Every core op becomes the ONNX op of the same name. The model has one
``ai.onnx`` opset: by default the newest that both onnx and onnxruntime
support (:func:`~polyhal.interop.onnx.versions.max_export_opset`), one lower
when the graph uses an op version onnxruntime has no kernel for and the
lower opset can express the graph (:func:`export_opset`). Another opset may
be asked for: ops then take an older form where the semantics agree (an
attribute instead of a constant input, ...), and an op whose older version
means something else is an :class:`UnsupportedError`. Symbolic dims become
``dim_param``; constants become initializers; element-type attributes
become ``TensorProto`` codes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, ModelProto, NodeProto, helper

from polyhal._version import __version__
from polyhal.errors import SerializationError, UnsupportedError
from polyhal.files import write_atomically
from polyhal.interop.onnx.dtypes import onnx_type_name, to_code
from polyhal.interop.onnx.external import DATA_SUFFIX, move_to_file
from polyhal.interop.onnx.tensors import encode
from polyhal.interop.onnx.versions import (
    MIN_EXPORT_OPSET,
    ORT_MISSING_VERSIONS,
    SAME_SINCE,
    RawNode,
    export_rule,
    max_export_opset,
    newest_opset,
    schema_version,
)
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node
from polyhal.ir.types import TensorType
from polyhal.ir.verify import constant_value, resolve_attrs
from polyhal.ops.registry import REQUIRED, get_op

EXTERNAL_THRESHOLD = 1 << 30
"""Constants above this many bytes in total go to external data by default
(a protobuf cannot exceed 2 GiB)."""


def _ort_lacks(graph: Graph, opset: int) -> bool:
    """True when an op of ``graph`` falls on a version onnxruntime has no kernel for."""
    for op in {n.op for n in graph.nodes if n.domain == "core"}:
        missing = ORT_MISSING_VERSIONS.get(op)
        version = schema_version(op, opset)
        if missing is not None and version is not None and version >= missing:
            return True
    return False


def export_opset(graph: Graph) -> int:
    """The opset :func:`to_onnx` picks for ``graph``: :func:`max_export_opset`, or the
    newest opset below it at which onnxruntime has a kernel for every op of the graph,
    when the graph can be written at that opset."""
    top = max_export_opset()
    if not _ort_lacks(graph, top):
        return top
    for opset in range(top - 1, MIN_EXPORT_OPSET - 1, -1):
        if _ort_lacks(graph, opset):
            continue
        try:
            _Exporter(graph, opset).nodes()
        except UnsupportedError:
            break
        return opset
    return top


def _dim(dim: D.Dim) -> int | str | None:
    """An ONNX dim: a value, a ``dim_param``, or unknown for symbols polyhal invented."""
    if isinstance(dim, int):
        return dim
    if any(s.startswith("_") for s in D.free_symbols(dim)):
        return None
    return dim


def _value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, to_code(t.dtype), [_dim(d) for d in t.shape])


class _Exporter:
    def __init__(self, graph: Graph, opset: int) -> None:
        self.graph = graph
        self.opset = opset
        self.types: dict[str, TensorType] = dict(graph.value_types)
        self.consts: dict[str, np.ndarray] = dict(graph.constants)
        self.initializers: dict[str, np.ndarray] = dict(graph.constants)
        self.value_taken = set(self.types)
        self.node_taken = {n.name for n in graph.nodes}

    # RuleContext
    def type_of(self, name: str) -> TensorType:
        return self.types[name]

    def const_value(self, name: str) -> np.ndarray | None:
        return self.consts.get(name)

    def constant(self, array: np.ndarray, stem: str) -> str:
        name = self.value_name(stem)
        self.initializers[name] = array
        self.consts[name] = array
        self.types[name] = TensorType.of(array)
        return name

    def value_name(self, stem: str) -> str:
        return self._fresh(stem, self.value_taken)

    def node_name(self, stem: str) -> str:
        return self._fresh(stem, self.node_taken)

    def is_used(self, name: str) -> bool:
        return True

    @staticmethod
    def _fresh(stem: str, taken: set[str]) -> str:
        name, k = stem, 1
        while name in taken:
            k += 1
            name = f"{stem}_{k}"
        taken.add(name)
        return name

    # nodes
    def _first_opset(self, op: str) -> int | None:
        for opset in range(self.opset + 1, newest_opset() + 1):
            if schema_version(op, opset) is not None:
                return opset
        return None

    def node(self, node: Node) -> list[NodeProto]:
        where = f"node {node.name!r} ({node.qualified_op})"
        if node.domain != "core":
            raise UnsupportedError(f"{where}: the {node.domain!r} domain has no ONNX mapping "
                                   "(only core ops export to ONNX; save the graph in "
                                   "polyhal's own format with polyhal.save)")
        version = schema_version(node.op, self.opset)
        if version is None:
            first = self._first_opset(node.op)
            raise UnsupportedError(f"{where}: ai.onnx.{node.op} does not exist in opset "
                                   f"{self.opset}" + (f"; export to opset {first} or newer"
                                                      if first else ""))
        rule = export_rule(node.op, version)
        if rule is None:
            raise UnsupportedError(
                f"{where} cannot be exported to opset {self.opset}: ai.onnx.{node.op} version "
                f"{version} has different semantics (export to opset "
                f"{SAME_SINCE.get(node.op, '?')} or newer)")
        opdef = get_op(node.op)
        value = constant_value(opdef, resolve_attrs(opdef, node.attrs, where))
        if value is not None:
            self.consts[node.outputs[0].name] = value
        raw = RawNode(node.op, node.name, list(node.inputs), list(node.output_names),
                      dict(node.attrs))
        try:
            raws = rule(raw, self, version)
        except UnsupportedError as exc:
            raise UnsupportedError(f"{where} cannot be exported to opset {self.opset}: "
                                   f"{exc}") from None
        return [self._encode(r, version, where) for r in raws]

    def _encode(self, raw: RawNode, version: int, where: str) -> NodeProto:
        schema = onnx.defs.get_schema(raw.op, self.opset, "")
        label = f"{where}: ai.onnx.{raw.op} version {version} (opset {self.opset})"
        specs = get_op(raw.op).attr_specs
        for kind, count, low, high in (("inputs", len(raw.inputs), schema.min_input,
                                        schema.max_input),
                                       ("outputs", len(raw.outputs), schema.min_output,
                                        schema.max_output)):
            if not low <= count <= high:
                raise UnsupportedError(f"{label} takes {low} to {high} {kind}, the node has "
                                       f"{count}; export to a newer opset")
        self._check_types(raw, schema, label)
        attributes = []
        for name, value in sorted(raw.attrs.items()):
            if value is None:
                continue
            if name not in schema.attributes:
                spec = specs.get(name)
                if spec is not None and spec.default is not REQUIRED and _same(value,
                                                                               spec.default):
                    continue  # the default, which the older version implies
                raise UnsupportedError(f"{label} has no attribute {name!r}; export to a newer "
                                       "opset")
            attributes.append(self._attribute(name, value, schema.attributes[name].type))
        proto = helper.make_node(raw.op, raw.inputs, raw.outputs, name=raw.name)
        proto.attribute.extend(attributes)
        return proto

    def _check_types(self, raw: RawNode, schema: Any, label: str) -> None:
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, tuple[str, str]] = {}
        for names, formals, kind in ((raw.inputs, schema.inputs, "input"),
                                     (raw.outputs, schema.outputs, "output")):
            for index, name in enumerate(names):
                if not name or not formals or name not in self.types:
                    continue  # a value an export rule added, typed by the rule
                formal = formals[min(index, len(formals) - 1)]
                t = f"tensor({onnx_type_name(to_code(self.types[name].dtype))})"
                ok = allowed.get(formal.type_str, {formal.type_str})
                if t not in ok:
                    raise UnsupportedError(f"{label} does not accept {t} for {kind} "
                                           f"{formal.name!r}; export to a newer opset")
                first = bound.setdefault(formal.type_str, (t, formal.name))
                if first[0] != t:
                    raise UnsupportedError(f"{label} needs {kind} {formal.name!r} to have the "
                                           f"type of {first[1]!r} ({first[0]}), got {t}; "
                                           "export to a newer opset")

    @staticmethod
    def _attribute(name: str, value: Any, kind: Any) -> AttributeProto:
        if isinstance(value, DType):
            value = to_code(value)
        if kind == AttributeProto.TENSOR:
            value = encode(np.asarray(value), "")
        elif kind == AttributeProto.FLOAT:
            value = float(value)
        elif kind == AttributeProto.INT:
            value = int(value)
        elif kind == AttributeProto.FLOATS:
            value = [float(v) for v in value]
        elif kind == AttributeProto.INTS:
            value = [int(v) for v in value]
        elif kind == AttributeProto.STRINGS:
            value = [str(v) for v in value]
        return helper.make_attribute(name, value, attr_type=int(kind))

    def nodes(self) -> list[NodeProto]:
        return [proto for node in self.graph.nodes for proto in self.node(node)]

    def model(self) -> ModelProto:
        g = self.graph
        nodes = self.nodes()
        produced = {o for n in g.nodes for o in n.output_names}
        outputs = {v.name for v in g.outputs}
        value_info = [_value_info(name, t) for name, t in self.types.items()
                      if name in produced and name not in outputs]
        initializers = [encode(array, name) for name, array in self.initializers.items()]
        graph = helper.make_graph(nodes, g.name or "polyhal",
                                  [_value_info(v.name, v.type) for v in g.inputs],
                                  [_value_info(v.name, v.type) for v in g.outputs],
                                  initializer=initializers, doc_string=g.doc or None,
                                  value_info=value_info)
        opsets = [helper.make_opsetid("", self.opset)]
        # IR 4 lets initializers be constants rather than defaults of graph inputs.
        ir_version = max(helper.find_min_ir_version_for(opsets), 4)
        return helper.make_model(graph, opset_imports=opsets, producer_name="polyhal",
                                 producer_version=__version__, ir_version=ir_version)


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    return value == default


def to_onnx(graph: Graph, *, opset: int | None = None) -> ModelProto:
    """``graph`` as an ONNX ``ModelProto`` at ``opset`` (default: :func:`export_opset`)."""
    if opset is None:
        opset = export_opset(graph)
    elif isinstance(opset, bool) or not isinstance(opset, int) or not (
            MIN_EXPORT_OPSET <= opset <= newest_opset()):
        raise UnsupportedError(f"graph {graph.name!r}: cannot export to opset {opset!r}; "
                               f"polyhal exports opsets {MIN_EXPORT_OPSET} to {newest_opset()}")
    try:
        return _Exporter(graph, opset).model()
    except UnsupportedError as exc:
        raise UnsupportedError(f"graph {graph.name!r}: {exc}") from None


def _check(model: ModelProto | str, path: Path) -> None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise SerializationError(f"{path}: the exported model fails onnx.checker: "
                                 f"{str(exc).strip()[:2000]}") from None


def save_onnx(graph: Graph, path: str | os.PathLike[str], *, opset: int | None = None,
              external_data: bool | None = None) -> Path:
    """Write ``graph`` as an ONNX model at ``path`` (checked with
    ``onnx.checker.check_model(full_check=True)`` first).

    With ``external_data`` (default: when constants exceed 1 GiB) constants of
    1 KiB or more go to ``<path>.data`` beside the model.
    """
    path = Path(path)
    model = to_onnx(graph, opset=opset)
    if external_data is None:
        external_data = sum(len(t.raw_data) for t in model.graph.initializer) > EXTERNAL_THRESHOLD
    try:
        if not external_data:
            _check(model, path)
            write_atomically(path, model.SerializeToString())
            return path
        data_path = path.with_name(path.name + DATA_SUFFIX)
        blob = move_to_file(list(model.graph.initializer), data_path)
        write_atomically(data_path, blob)
        write_atomically(path, model.SerializeToString())
    except OSError as exc:
        raise SerializationError(f"{path}: cannot write the model "
                                 f"({exc.strerror or exc})") from None
    try:
        _check(str(path), path)
    except SerializationError:
        path.unlink(missing_ok=True)
        data_path.unlink(missing_ok=True)
        raise
    return path
