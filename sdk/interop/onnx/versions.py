"""Which ONNX op versions polyhal reads and writes, and how older ones map.

Every polyhal core op follows the newest version of the ONNX op of the same
name. An older version either has the same semantics for every model polyhal
can represent (it only admits fewer types, or lacks a later attribute or
input: ``SAME_SINCE``), or a rule rewrites a node of that version into the
current form on import (``IMPORT_RULES``: attributes that became inputs, a
changed default, a changed meaning) and back on export (``EXPORT_RULES``).
A version with neither is refused with an :class:`UnsupportedError` naming
the op, its version and the opset.

Rules work on :class:`RawNode`, a plain mutable node record, and reach the
graph around the node through a :class:`RuleContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx.defs
from onnx import AttributeProto, NodeProto

from polyhal.errors import UnsupportedError
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType

MIN_IMPORT_OPSET = 1
"""The oldest ``ai.onnx`` opset :func:`~polyhal.interop.onnx.load_onnx` reads. Every
op version in force from opset 7 on maps; before 7, many ops are in versions that
do not (``consumed_inputs``, ``broadcast`` attributes), and those nodes are refused
one by one."""

MIN_EXPORT_OPSET = 7
"""The oldest ``ai.onnx`` opset :func:`~polyhal.interop.onnx.to_onnx` writes."""

ORT_MAX_OPSET = 28
"""The newest ``ai.onnx`` opset onnxruntime 1.32 loads (checked by the tests)."""

ORT_MISSING_VERSIONS: dict[str, int] = {"QuantizeLinear": 28, "DequantizeLinear": 28,
                                        "OneHot": 28}
"""Op versions onnxruntime 1.32 has no kernel for (from this version on): the default
export opset steps below them when the graph allows."""


def newest_opset() -> int:
    """The newest ``ai.onnx`` opset the installed onnx package knows."""
    return int(onnx.defs.onnx_opset_version())


def max_export_opset() -> int:
    """The newest opset polyhal exports by default: known to onnx and run by onnxruntime."""
    return min(newest_opset(), ORT_MAX_OPSET)


# --------------------------------------------------------------------- nodes


@dataclass
class RawNode:
    """A node on its way between ONNX and polyhal: ONNX op name and attribute names,
    Python attribute values (tensors as arrays, element types as ONNX codes on import
    and as :class:`DType` on export)."""

    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def input(self, index: int) -> str:
        """Input ``index``, ``""`` when absent."""
        return self.inputs[index] if index < len(self.inputs) else ""

    def set_input(self, index: int, name: str) -> None:
        """Set input ``index``, padding skipped optional inputs with ``""``."""
        while len(self.inputs) <= index:
            self.inputs.append("")
        self.inputs[index] = name

    def trim_inputs(self) -> None:
        """Drop trailing omitted inputs."""
        while self.inputs and self.inputs[-1] == "":
            self.inputs.pop()


class RuleContext(Protocol):
    """What a rule may ask about the graph around its node."""

    def type_of(self, name: str) -> TensorType:
        """The type of an already defined value."""

    def const_value(self, name: str) -> np.ndarray | None:
        """The value of a constant (an initializer or a Constant node's output), else None."""

    def constant(self, array: np.ndarray, stem: str) -> str:
        """Add a constant holding ``array``; its (fresh) name."""

    def value_name(self, stem: str) -> str:
        """A fresh value name."""

    def node_name(self, stem: str) -> str:
        """A fresh node name."""

    def is_used(self, name: str) -> bool:
        """True when a later node or a graph output reads ``name`` (import only)."""


Rule = Callable[[RawNode, RuleContext, int], list[RawNode]]
"""``rule(node, context, version)`` returns the nodes that replace ``node``."""


def _unsupported(node: RawNode, version: int, why: str) -> UnsupportedError:
    """An error for a rule to raise; the caller names the node and the opset."""
    return UnsupportedError(f"ai.onnx.{node.op} version {version}: {why}")


# --------------------------------------------------------------- semantics table

SAME_SINCE: dict[str, int] = {
    # Versions from 6 on differ only in the element types they admit (version 1 had
    # consumed_inputs; opset 7 already has version 6 or newer of each).
    **dict.fromkeys(["Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid",
                     "Floor", "Ceil", "Relu", "Elu", "LeakyRelu", "Tile", "Cast"], 6),
    **dict.fromkeys(["Softplus", "Not", "MatMul", "Gather", "Transpose", "Flatten", "Shape",
                     "Identity", "Constant", "ArgMax", "ArgMin", "LRN", "Conv", "MaxPool",
                     "GlobalAveragePool", "GlobalMaxPool"], 1),
    # Version 7 introduced multidirectional broadcasting (version 6 had broadcast/axis).
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And",
                     "Or", "Xor", "Sin", "Cos", "Gemm", "AveragePool"], 7),
    # Version 8 broadcasts; version 6 required equal shapes (a subset: see IMPORT_RULES).
    **dict.fromkeys(["Sum", "Mean", "Max", "Min", "Expand"], 8),
    **dict.fromkeys(["Sign", "Erf", "IsNaN", "Where", "ConstantOfShape"], 9),
    **dict.fromkeys(["MatMulInteger", "QLinearMatMul", "QuantizeLinear", "DequantizeLinear"],
                    10),
    **dict.fromkeys(["Round", "Range", "Clip"], 11),
    # Version 11 brought negative indices (OneHot; the others are new in 11) and the
    # current output_shape pad split of ConvTranspose; later versions add element types
    # and reductions (absent means none).
    **dict.fromkeys(["GatherElements", "ScatterElements", "ScatterND", "OneHot",
                     "ConvTranspose"], 11),
    **dict.fromkeys(["LessOrEqual", "GreaterOrEqual", "Dropout"], 12),
    # Attributes that became inputs, and Softmax's 2-D coercion, changed in 13.
    **dict.fromkeys(["Squeeze", "Unsqueeze", "ReduceSum", "Softmax", "LogSoftmax"], 13),
    "Concat": 4, "Reshape": 5, "Slice": 11, "BatchNormalization": 14, "LayerNormalization": 17,
    **dict.fromkeys(["Split", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"], 18),
    "Pad": 19, "Gelu": 20,
    # Before 28, fmod=0 was for integers only (a subset: see IMPORT_RULES).
    "Mod": 28,
}
"""For each op, the oldest ONNX version whose semantics equal polyhal's (the newest)
for every model polyhal can represent."""


# ------------------------------------------------------------------ import rules


def _as_is(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    """A version whose models are a subset of the newest version's."""
    return [node]


def _attrs_to_inputs(*moves: tuple[str, int, str]) -> Rule:
    """Move attributes into constant inputs: ``(attribute, input index, element type)``
    where the element type is ``"int64"``, or ``"data"`` for input 0's dtype."""

    def rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
        for attr, index, kind in moves:
            if attr not in node.attrs:
                continue
            value = node.attrs.pop(attr)
            if kind == "int64":
                array = np.asarray(value, dtype=np.int64)
                if array.size == 0 and attr == "axes":
                    continue  # an empty axes list means the default: every axis
            else:
                array = np.asarray(value, dtype=np.float64).astype(
                    cx.type_of(node.inputs[0]).dtype.numpy)
            node.set_input(index, cx.constant(array, f"{node.name}.{attr}"))
        return [node]

    return rule


def _reduce_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    return _attrs_to_inputs(("axes", 1, "int64"))(node, cx, version)


def _split_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if version < 13:
        _attrs_to_inputs(("split", 1, "int64"))(node, cx, version)
    if not node.input(1) and version < 18:
        # Before 18, no split meant equal parts (the count divides the axis, where
        # the ceil rule of num_outputs gives the same parts).
        node.attrs["num_outputs"] = len(node.outputs)
    return [node]


def _clip_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    # Version 6: min and max attributes; absent means no bound.
    return _attrs_to_inputs(("min", 1, "data"), ("max", 2, "data"))(node, cx, version)


def _pad_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if version >= 11:
        return [node]
    if "pads" not in node.attrs:
        raise _unsupported(node, version, "the required attribute 'pads' is missing")
    value = node.attrs.pop("value", 0.0)
    _attrs_to_inputs(("pads", 1, "int64"))(node, cx, version)
    if node.attrs.get("mode", "constant") == "constant" and value != 0.0:
        dtype = cx.type_of(node.inputs[0]).dtype.numpy
        node.set_input(2, cx.constant(np.asarray(value, np.float64).astype(dtype),
                                      f"{node.name}.value"))
    return [node]


def _slice_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if version >= 10:
        return [node]
    for attr in ("starts", "ends"):
        if attr not in node.attrs:
            raise _unsupported(node, version, f"the required attribute {attr!r} is missing")
    if not node.attrs.get("axes", ()):
        node.attrs.pop("axes", None)
    return _attrs_to_inputs(("starts", 1, "int64"), ("ends", 2, "int64"),
                            ("axes", 3, "int64"))(node, cx, version)


def _softmax_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    """Versions 1 and 11 coerce the input to 2-D at ``axis`` (default 1) and normalize
    each row; that is normalizing jointly over axes ``axis..rank-1``."""
    rank = cx.type_of(node.inputs[0]).rank
    axis = int(node.attrs.pop("axis", 1))
    if not -rank <= axis < max(rank, 1):
        raise _unsupported(node, version, f"attribute axis={axis} is out of range for "
                                          f"rank {rank}")
    axis = axis + rank if axis < 0 else axis
    if axis >= rank - 1:
        node.attrs["axis"] = -1
        return [node]
    x, (y,) = node.inputs[0], node.outputs
    axes = cx.constant(np.arange(axis, rank, dtype=np.int64), f"{node.name}.axes")
    nodes: list[RawNode] = []

    def emit(op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        name = out or cx.value_name(f"{node.name}.{op.lower()}")
        nodes.append(RawNode(op, cx.node_name(f"{node.name}.{op.lower()}"), inputs, [name],
                             attrs))
        return name

    shifted = emit("Sub", [x, emit("ReduceMax", [x, axes], keepdims=1)])
    exp = emit("Exp", [shifted])
    total = emit("ReduceSum", [exp, axes], keepdims=1)
    if node.op == "Softmax":
        emit("Div", [exp, total], y)
    else:
        emit("Sub", [shifted, emit("Log", [total])], y)
    return nodes


def _drop_test_flag(node: RawNode, version: int, training_ok: bool) -> None:
    """Version 6 had ``is_test`` (default 0: training); inference is is_test=1. The
    attribute is tolerated (and dropped) on later versions too, where it is stray."""
    default = 0 if version < 7 else 1
    if not node.attrs.pop("is_test", default) and not training_ok:
        raise _unsupported(node, version, "is_test=0 (training mode) is not supported; "
                                          "polyhal imports inference graphs")


def _unused_extra_outputs(node: RawNode, cx: RuleContext, version: int, keep: int) -> None:
    """Drop outputs from ``keep`` on; an error if one is read."""
    for name in node.outputs[keep:]:
        if name and cx.is_used(name):
            raise _unsupported(node, version, f"output {name!r} is a training statistic of "
                                              "this version, which polyhal does not import "
                                              "(training_mode of version 14 on is supported)")
    del node.outputs[keep:]


def _batch_norm_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    _drop_test_flag(node, version, training_ok=False)
    if version >= 14:
        return [node]
    # Before 14, extra outputs meant training, with statistics of another definition.
    _unused_extra_outputs(node, cx, version, 1)
    spatial = node.attrs.pop("spatial", 1)
    if spatial:
        return [node]
    # spatial=0 (version 7): statistics per activation, shaped [C, D1, ...], which
    # broadcast against X [N, C, D1, ...] from the right.
    x, scale, bias, mean, var = node.inputs[:5]
    eps = cx.constant(np.asarray(node.attrs.get("epsilon", 1e-5), np.float64)
                      .astype(cx.type_of(x).dtype.numpy), f"{node.name}.epsilon")
    nodes: list[RawNode] = []

    def emit(op: str, a: str, b: str | None = None, out: str | None = None) -> str:
        name = out or cx.value_name(f"{node.name}.{op.lower()}")
        nodes.append(RawNode(op, cx.node_name(f"{node.name}.{op.lower()}"),
                             [a] if b is None else [a, b], [name]))
        return name

    normalized = emit("Div", emit("Sub", x, mean), emit("Sqrt", emit("Add", var, eps)))
    emit("Add", emit("Mul", normalized, scale), bias, node.outputs[0])
    return nodes


def _dropout_rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    ratio = node.attrs.pop("ratio", 0.5)
    _drop_test_flag(node, version, training_ok=ratio == 0)
    if len(node.outputs) < 2 or not node.outputs[1]:
        del node.outputs[1:]
        return [node]
    if version >= 10 or not cx.is_used(node.outputs[1]):
        if version < 10:
            del node.outputs[1:]
        return [node]
    # Version 7's mask has the data's type (all ones in inference): cast the bool mask.
    mask = node.outputs[1]
    node.outputs[1] = cx.value_name(f"{node.name}.mask")
    cast = RawNode("Cast", cx.node_name(f"{node.name}.cast"), [node.outputs[1]], [mask],
                   {"to": cx.type_of(node.inputs[0]).dtype})
    return [node, cast]


IMPORT_RULES: dict[str, dict[int, Rule]] = {
    **{op: {6: _as_is} for op in ("Sum", "Mean", "Max", "Min")},
    "Mod": {10: _as_is, 13: _as_is},
    "Squeeze": {1: _attrs_to_inputs(("axes", 1, "int64")),
                11: _attrs_to_inputs(("axes", 1, "int64"))},
    "Unsqueeze": {1: _attrs_to_inputs(("axes", 1, "int64")),
                  11: _attrs_to_inputs(("axes", 1, "int64"))},
    "ReduceSum": {1: _reduce_rule, 11: _reduce_rule},
    **{op: {1: _reduce_rule, 11: _reduce_rule, 13: _reduce_rule}
       for op in ("ReduceMean", "ReduceProd")},
    **{op: {1: _reduce_rule, 11: _reduce_rule, 12: _reduce_rule, 13: _reduce_rule}
       for op in ("ReduceMax", "ReduceMin")},
    "Split": {2: _split_rule, 11: _split_rule, 13: _split_rule},
    "Clip": {6: _clip_rule},
    "Pad": {2: _pad_rule, 11: _pad_rule, 13: _pad_rule, 18: _pad_rule},
    "Slice": {1: _slice_rule, 10: _slice_rule},
    "Softmax": {1: _softmax_rule, 11: _softmax_rule},
    "LogSoftmax": {1: _softmax_rule, 11: _softmax_rule},
    "BatchNormalization": {6: _batch_norm_rule, 7: _batch_norm_rule, 9: _batch_norm_rule},
    "Dropout": {6: _dropout_rule, 7: _dropout_rule, 10: _dropout_rule},
}
"""Import rules by op and ONNX version (rules may also apply to versions in SAME_SINCE,
to check what the current version also allows)."""


def import_rule(op: str, version: int) -> Rule | None:
    """How a node of ONNX ``op`` version ``version`` becomes a polyhal node; ``None`` when
    polyhal cannot represent that version's semantics."""
    rule = IMPORT_RULES.get(op, {}).get(version)
    if rule is not None:
        return rule
    return _as_is if version >= SAME_SINCE.get(op, 10**9) else None


# ------------------------------------------------------------------ export rules


def _const_ints(node: RawNode, cx: RuleContext, index: int, version: int,
                what: str) -> list[int] | None:
    name = node.input(index)
    if not name:
        return None
    value = cx.const_value(name)
    if value is None:
        raise _unsupported(node, version, f"input {index} ({what}) must be a constant to "
                                          f"be written as the attribute of version {version}")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _inputs_to_attrs(*moves: tuple[int, str]) -> Rule:
    """Constant inputs ``(index, attribute)`` become attributes (axes normalized)."""

    def rule(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
        for index, attr in moves:
            values = _const_ints(node, cx, index, version, attr)
            if values is None:
                continue
            node.inputs[index] = ""
            if attr == "axes":
                if not values and node.op == "Squeeze":
                    raise _unsupported(node, version, "an empty axes input (squeeze nothing) "
                                                      "has no attribute form")
                if not values:
                    continue  # an empty axes attribute means the default
                values = _positive_axes(node, cx, values)
            node.attrs[attr] = tuple(values)
        node.trim_inputs()
        return [node]

    return rule


def _positive_axes(node: RawNode, cx: RuleContext, axes: list[int]) -> list[int]:
    rank = cx.type_of(node.inputs[0]).rank
    if node.op == "Unsqueeze":
        rank += len(axes)
    return [a + rank if a < 0 else a for a in axes]


def _export_reduce(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if node.attrs.pop("noop_with_empty_axes", 0) and not _const_ints(node, cx, 1, version,
                                                                      "axes"):
        raise _unsupported(node, version, "noop_with_empty_axes=1 without axes has no "
                                          f"equivalent before version {SAME_SINCE[node.op]}")
    return _inputs_to_attrs((1, "axes"))(node, cx, version)


def _export_split(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    count = node.attrs.pop("num_outputs", None)
    if count is not None:
        data = cx.type_of(node.inputs[0])
        axis = int(node.attrs.get("axis", 0))
        dim = data.shape[axis % data.rank] if data.rank else None
        if not isinstance(dim, int) or dim % count:
            raise _unsupported(node, version, f"num_outputs={count} on an axis of size {dim} "
                                              "needs version 18 (older versions split only "
                                              "into equal parts)")
    if version < 13:
        return _inputs_to_attrs((1, "split"))(node, cx, version)
    return [node]


def _float_attr(node: RawNode, version: int, value: np.ndarray, what: str) -> float:
    """A constant as a float attribute (32-bit in ONNX): only when that is exact."""
    number = float(np.asarray(value, np.float64).reshape(()))
    if float(np.float32(number)) != number and not np.isnan(number):
        raise _unsupported(node, version, f"{what}={number!r} is not exact as the 32-bit "
                                          f"float attribute of version {version}")
    return number


def _export_clip(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    dtype = cx.type_of(node.inputs[0]).dtype
    for index, attr in ((1, "min"), (2, "max")):
        name = node.input(index)
        if not name:
            continue
        value = cx.const_value(name)
        if value is None or not dtype.is_float:
            raise _unsupported(node, version, f"input {attr} must be a float constant to be "
                                              f"written as an attribute of version {version}")
        node.attrs[attr] = _float_attr(node, version, value, attr)
        node.inputs[index] = ""
    node.trim_inputs()
    return [node]


def _export_mod(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if cx.type_of(node.inputs[0]).dtype.is_float and not node.attrs.get("fmod", 0):
        raise _unsupported(node, version, "fmod=0 on floats needs version 28")
    return [node]


def _export_pad(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if node.attrs.get("mode", "constant") == "wrap" and version < 19:
        raise _unsupported(node, version, "mode 'wrap' needs version 19")
    axes = node.input(3)
    if axes and version < 18:
        raise _unsupported(node, version, "input axes needs version 18")
    if axes and cx.type_of(axes).dtype is not DType.INT64:
        # onnx's shape inference reads Pad's axes as int64 only: widen int32 axes.
        value = cx.const_value(axes)
        if value is not None:
            node.inputs[3] = cx.constant(value.astype(np.int64), f"{node.name}.axes")
        else:
            node.inputs[3] = cx.value_name(f"{node.name}.axes")
            cast = RawNode("Cast", cx.node_name(f"{node.name}.cast"), [axes],
                           [node.inputs[3]], {"to": DType.INT64})
            return [cast, node]
    if version >= 11:
        return [node]
    value = node.input(2)
    if value:
        constant = cx.const_value(value)
        if constant is None:
            raise _unsupported(node, version, "input constant_value must be a constant to "
                                              f"be written as an attribute of version {version}")
        node.attrs["value"] = _float_attr(node, version, constant, "constant_value")
        node.inputs[2] = ""
    return _inputs_to_attrs((1, "pads"))(node, cx, version)


def _export_slice(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    steps = _const_ints(node, cx, 4, version, "steps") if version < 10 else None
    if steps is not None and any(s != 1 for s in steps):
        raise _unsupported(node, version, "steps other than 1 need version 10")
    if version < 10:
        if node.input(4):
            node.inputs[4] = ""
        return _inputs_to_attrs((1, "starts"), (2, "ends"), (3, "axes"))(node, cx, version)
    axes = _const_ints(node, cx, 3, version, "axes")
    if axes is not None and any(a < 0 for a in axes):
        positive = np.asarray(_positive_axes(node, cx, axes), np.int64)
        node.inputs[3] = cx.constant(positive, f"{node.name}.axes")
    return [node]


def _export_softmax(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    rank = cx.type_of(node.inputs[0]).rank
    axis = int(node.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    if axis != rank - 1:
        raise _unsupported(node, version, f"axis={axis} is not the last axis: before version "
                                          "13 the op normalized over every axis from axis on")
    node.attrs["axis"] = axis
    return [node]


def _export_batch_norm(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    if node.attrs.pop("training_mode", 0) or len(node.outputs) > 1:
        raise _unsupported(node, version, "training_mode=1 needs version 14")
    return [node]


def _export_dropout(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
    node.attrs.pop("seed", None)
    for index in (1, 2):
        if node.input(index):
            raise _unsupported(node, version, f"input {index} (ratio/training_mode) needs "
                                              "version 12")
    if version < 10 and len(node.outputs) > 1:
        raise _unsupported(node, version, "output mask is bool only from version 10")
    return [node]


EXPORT_RULES: dict[str, dict[int, Rule]] = {
    "Squeeze": {1: _inputs_to_attrs((1, "axes")), 11: _inputs_to_attrs((1, "axes"))},
    "Unsqueeze": {1: _inputs_to_attrs((1, "axes")), 11: _inputs_to_attrs((1, "axes"))},
    "ReduceSum": {1: _export_reduce, 11: _export_reduce},
    **{op: {1: _export_reduce, 11: _export_reduce, 13: _export_reduce}
       for op in ("ReduceMean", "ReduceProd")},
    **{op: {1: _export_reduce, 11: _export_reduce, 12: _export_reduce, 13: _export_reduce}
       for op in ("ReduceMax", "ReduceMin")},
    "Split": {2: _export_split, 11: _export_split, 13: _export_split},
    "Clip": {6: _export_clip},
    "Mod": {10: _export_mod, 13: _export_mod},
    "Pad": {2: _export_pad, 11: _export_pad, 13: _export_pad, 18: _export_pad},
    "Slice": {1: _export_slice, 10: _export_slice},
    "Softmax": {1: _export_softmax, 11: _export_softmax},
    "LogSoftmax": {1: _export_softmax, 11: _export_softmax},
    "BatchNormalization": {7: _export_batch_norm, 9: _export_batch_norm},
    "Dropout": {7: _export_dropout, 10: _export_dropout},
}
"""Export rules by op and the ONNX version in force at the target opset."""

EXPORT_CURRENT: dict[str, Rule] = {"Pad": _export_pad}
"""Export rules for the versions in SAME_SINCE (work around onnx's own checks)."""

_AXIS_OPS = frozenset({"Concat", "Flatten", "Gather", "ArgMax", "ArgMin", "Split"})


def export_rule(op: str, version: int) -> Rule | None:
    """How a polyhal node becomes a node of ONNX ``op`` version ``version``; ``None``
    when that version's semantics differ."""
    rule = EXPORT_RULES.get(op, {}).get(version)
    if rule is None and version >= SAME_SINCE.get(op, 10**9):
        rule = EXPORT_CURRENT.get(op, _as_is)
    if rule is None or version >= 11 or op not in _AXIS_OPS:
        return rule
    return _then_positive_axis(rule)


def _then_positive_axis(rule: Rule) -> Rule:
    """Before version 11 an ``axis`` attribute could not be negative."""

    def wrapped(node: RawNode, cx: RuleContext, version: int) -> list[RawNode]:
        axis = node.attrs.get("axis")
        if isinstance(axis, int) and axis < 0:
            rank = cx.type_of(node.inputs[0]).rank
            node.attrs["axis"] = axis + rank
        return rule(node, cx, version)

    return wrapped


def schema_version(op: str, opset: int) -> int | None:
    """The version of ``ai.onnx.op`` in force at ``opset``; ``None`` if it does not exist."""
    try:
        return int(onnx.defs.get_schema(op, opset, "").since_version)
    except onnx.defs.SchemaError:
        return None


def schema_problem(node: NodeProto, opset: int) -> str | None:
    """What in ``node`` breaks the schema of its ``ai.onnx`` op at ``opset``: its input or
    output count, a required input or output left empty, an attribute of another kind;
    None when nothing does. Import rules rewrite a node assuming its schema holds."""
    schema = onnx.defs.get_schema(node.op_type, opset, "")
    version = f"version {schema.since_version}"
    for kind, names, low, high in (("input", node.input, schema.min_input, schema.max_input),
                                   ("output", node.output, schema.min_output,
                                    schema.max_output)):
        if not low <= len(names) <= high:
            takes = f"at least {low}" if high >= 2**31 - 1 else (
                f"{low}" if low == high else f"{low} to {high}")
            return f"{len(names)} {kind}s, where {version} takes {takes}"
        empty = [i for i in range(low) if not names[i]]
        if empty:
            return f"{kind} {empty[0]} is required but empty"
    for attribute in node.attribute:
        declared = schema.attributes.get(attribute.name)
        if declared is not None and int(declared.type) != attribute.type:
            given = AttributeProto.AttributeType.Name(attribute.type)
            wanted = AttributeProto.AttributeType.Name(int(declared.type))
            return f"attribute {attribute.name!r} is {given}, where {version} takes {wanted}"
    return None


def onnx_attr_types(op: str, opset: int) -> dict[str, Any]:
    """The attribute types of ``ai.onnx.op`` at ``opset``, by name."""
    schema = onnx.defs.get_schema(op, opset, "")
    return {name: attr.type for name, attr in schema.attributes.items()}
