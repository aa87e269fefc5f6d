"""Mutators of an ONNX model: its parsed ``ModelProto``, and the raw strings in its bytes.

:func:`mutate_onnx` breaks attributes (by kind and as the op's ONNX schema
declares them), tensors, external data (locations outside the model's folder,
links, bad offsets), opsets, graph inputs and outputs, nodes and the graph
itself. :func:`mutate_onnx_utf8` makes one string invalid UTF-8, which the
protobuf API itself would refuse to write.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from typing import Any

from mutate import (
    ODD_FLOATS,
    ODD_INTS,
    ODD_NAMES,
    ODD_SYMBOLS,
    OP_NAMES,
    Files,
    all_op_names,
    mutate_bytes,
    odd_attribute,
    odd_values,
    short_repr,
)
from seeds import Link, SeedModel


def _tensor_edit(tensor: Any, rng: random.Random) -> str:
    """Break one ``TensorProto``: element type, dims, amount or kind of data."""
    how = rng.choice(["values", "values", "type", "dims", "raw", "typed", "int32", "segment",
                      "location", "string"])
    if how == "values" and (tensor.data_location != 0 or math.prod(tensor.dims) > 1 << 16):
        how = "raw"  # only a small tensor in the model is worth decoding
    if how == "values":
        from onnx import numpy_helper

        array = numpy_helper.to_array(tensor)
        tensor.CopyFrom(numpy_helper.from_array(odd_values(array, rng), tensor.name))
    elif how == "type":
        tensor.data_type = rng.choice([*range(29), 99, -1])
    elif how == "dims":
        dims = list(tensor.dims) or [1]
        dims[rng.randrange(len(dims))] = rng.choice((-1, 0, 3, 2**31, 2**40, 2**62))
        dims = rng.choice([dims, [1] * 40, []])
        del tensor.dims[:]
        tensor.dims.extend(dims)
    elif how == "raw":
        raw = tensor.raw_data
        tensor.raw_data = rng.choice([raw[:-1], raw + b"\0", b"", raw * 2])
    elif how in ("typed", "int32"):
        count = math.prod(tensor.dims)
        values = rng.choice([count - 1, count + 1, count]) if 0 <= count < 10**6 else 1
        tensor.ClearField("raw_data")
        if how == "int32":
            tensor.int32_data.extend([rng.choice((-(2**31), -1, 2**16, 2**31 - 1))] * values)
        else:
            tensor.float_data.extend([rng.choice(ODD_FLOATS)] * values)
            tensor.int64_data.extend([rng.choice(ODD_INTS)] * rng.randint(0, 1))
    elif how == "segment":
        tensor.segment.begin, tensor.segment.end = 0, 1
    elif how == "location":
        tensor.data_location = 1  # EXTERNAL, with no location (protobuf refuses unknown codes)
    else:
        tensor.string_data.append(b"x")
    return how


def _onnx_attribute(model: Any, files: Files, rng: random.Random) -> str:
    from onnx import AttributeProto, helper

    nodes = list(model.graph.node)
    if not nodes:
        return "onnx.attribute: no nodes"
    node = rng.choice(nodes)
    how = rng.choice(["kind", "value", "value", "drop", "add", "twice", "ref"])
    if how == "add" or not node.attribute:
        name = rng.choice(("axis", "alpha", "perm", "mode", "to", "value", "kernel_shape", "x"))
        value = rng.choice((1, 2.0, [0, 1], "abc", -7, [1.5], ["a"], 2**40))
        node.attribute.append(helper.make_attribute(name, value))
        return f"onnx.attribute {node.name}: add {name}={value!r}"
    attr = rng.choice(list(node.attribute))
    if how == "kind":
        attr.type = rng.choice(AttributeProto.AttributeType.values())
    elif how == "drop":
        node.attribute.remove(attr)
    elif how == "twice":
        node.attribute.append(copy.deepcopy(attr))
    elif how == "ref":
        attr.ref_attr_name = "outer"
    elif attr.type == AttributeProto.INT:
        attr.i = rng.choice((*ODD_INTS, -2, -1, 0, 1, 2, 3, 4))
    elif attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice(ODD_FLOATS)
    elif attr.type == AttributeProto.STRING:
        attr.s = rng.choice((b"", b"bogus", b"\xff\xfe", b"NOTSET", b"reflect", b"x" * 10000))
    elif attr.type == AttributeProto.TENSOR:
        return f"onnx.attribute {node.name}.{attr.name}: tensor {_tensor_edit(attr.t, rng)}"
    else:
        pool = rng.choice((ODD_INTS, (-2, -1, 0, 1, 2, 3, 4)))
        values = [rng.choice(pool) for _ in range(rng.choice((0, 1, 2, 2, 4, 5, 40)))]
        del attr.ints[:]
        attr.ints.extend(values)
        attr.type = AttributeProto.INTS
    return f"onnx.attribute {node.name}.{attr.name}: {how}"


def _onnx_schema_attribute(model: Any, files: Files, rng: random.Random) -> str:
    """Set an attribute the node's ONNX schema declares to an odd value of its type."""
    from onnx import AttributeProto, defs, helper

    if not model.graph.node:
        return "onnx.schema-attribute: no nodes"
    node = rng.choice(list(model.graph.node))
    opset = max([e.version for e in model.opset_import if e.domain in ("", "ai.onnx")] or [1])
    try:
        schema = defs.get_schema(node.op_type, min(max(opset, 1), 28), "")
    except defs.SchemaError:
        return f"onnx.schema-attribute {node.name}: no schema"
    kinds = {AttributeProto.INT: "int", AttributeProto.FLOAT: "float",
             AttributeProto.STRING: "string", AttributeProto.INTS: "ints",
             AttributeProto.FLOATS: "floats", AttributeProto.STRINGS: "strings"}
    declared = [(n, kinds[a.type]) for n, a in schema.attributes.items() if a.type in kinds]
    if not declared:
        return f"onnx.schema-attribute {node.name}: no plain attributes"
    name, kind = rng.choice(declared)
    value = odd_attribute(kind, rng)
    if kind == "string":
        value = value.encode()
    elif kind == "strings":
        value = [v.encode() for v in value]
    elif kind in ("ints", "floats") and not value:
        value = [0] if kind == "ints" else [0.0]  # make_attribute cannot type an empty list
    for old in [a for a in node.attribute if a.name == name]:
        node.attribute.remove(old)
    node.attribute.append(helper.make_attribute(name, value))
    return f"onnx.schema-attribute {node.name}.{name}={short_repr(value)}"


def _onnx_tensor(model: Any, files: Files, rng: random.Random) -> str:
    g = model.graph
    if rng.random() < 0.3 or not g.initializer:
        tensor = g.initializer.add()
        tensor.name = rng.choice([*dict.fromkeys(i for n in g.node for i in n.input), "", "k"])
        tensor.data_type, tensor.raw_data = 1, b"\0" * 8
        tensor.dims.extend(rng.choice([[2], [2, 3], [10**12], []]))
        return f"onnx.initializer add {tensor.name!r}"
    tensor = rng.choice(list(g.initializer))
    return f"onnx.initializer {tensor.name}: {_tensor_edit(tensor, rng)}"


_LOCATIONS = ("../../etc/passwd", "/etc/passwd", "C:\\Windows\\win.ini", "\\\\server\\x",
              "sub/../../x", "model.onnx.data", "weights.bin", "missing.bin", "", "a\x00b",
              "link-out", "link-zero", "link-self", "file:///etc/passwd", "model.onnx")


def _onnx_external(model: Any, files: Files, rng: random.Random) -> str:
    """Move an initializer's data to a file named by a hostile or broken location."""
    from onnx import TensorProto

    if not model.graph.initializer:
        return "onnx.external: no initializers"
    tensor = rng.choice(list(model.graph.initializer))
    raw = tensor.raw_data
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.EXTERNAL
    location = rng.choice(_LOCATIONS)
    links = {"link-out": "/etc/passwd", "link-zero": "/dev/zero", "link-self": "."}
    if location in links:
        files[location] = Link(links[location])
    elif location == "weights.bin":
        files[location] = b"\0" * rng.choice((0, 64)) + raw
    entries = [("location", location)]
    if rng.random() < 0.6:
        entries.append(("offset", rng.choice(("0", "64", "-1", "abc", "9" * 30, "1e3"))))
    if rng.random() < 0.6:
        entries.append(("length", rng.choice((str(len(raw)), str(len(raw) + 1), "0", "-5"))))
    if rng.random() < 0.1:
        entries.append(rng.choice([("location", "x"), ("checksum", "0"), ("bogus", "1")]))
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return f"onnx.external {tensor.name}: {entries}"


def _onnx_opset(model: Any, files: Files, rng: random.Random) -> str:
    how = rng.choice(["version", "version", "twice", "none", "domain", "ir"])
    if how == "ir":
        model.ir_version = rng.choice((0, -1, 1, 2, 3, 4, 7, 10, 13, 99, 2**62))
        return f"onnx.ir_version {model.ir_version}"
    if how == "none":
        del model.opset_import[:]
    elif how in ("twice", "domain") or not model.opset_import:
        entry = model.opset_import.add()
        entry.domain, entry.version = rng.choice(
            [("", 13), ("ai.onnx", 28), ("com.microsoft", 1), ("ai.onnx.ml", 3), ("x", -1)])
    else:
        model.opset_import[0].version = rng.choice(
            (0, -1, 1, 5, 6, 7, 9, 12, 13, 17, 28, 29, 2**31, 2**62, -(2**63)))
    return f"onnx.opset {how}: {[(e.domain, e.version) for e in model.opset_import]}"


def _onnx_value(model: Any, files: Files, rng: random.Random) -> str:
    """Break a graph input, output or value_info: its type, shape, name, or presence."""
    g = model.graph
    holders = [h for h in (g.input, g.output, g.value_info) if h]
    if not holders:
        return "onnx.value: none"
    holder = rng.choice(holders)
    value = rng.choice(list(holder))
    how = rng.choice(["elem", "dim", "dim", "rank", "noshape", "notype", "sequence", "name",
                      "twice", "drop"])
    tensor_type = value.type.tensor_type
    if how == "elem":
        tensor_type.elem_type = rng.choice([*range(29), 99])
    elif how == "dim" and tensor_type.shape.dim:
        dim = rng.choice(list(tensor_type.shape.dim))
        if rng.random() < 0.5:
            dim.dim_value = rng.choice((-1, 0, 2**31, 2**40, 2**62))
        else:
            dim.dim_param = rng.choice(ODD_SYMBOLS)
    elif how in ("rank", "dim"):
        for _ in range(rng.choice((1, 40))):
            tensor_type.shape.dim.add().dim_value = 1
    elif how == "noshape":
        tensor_type.ClearField("shape")
    elif how == "notype":
        value.ClearField("type")
    elif how == "sequence":
        value.type.sequence_type.elem_type.tensor_type.elem_type = 1
    elif how == "name":
        value.name = rng.choice([*ODD_NAMES[:2], *(v.name for v in g.input)])
    elif how == "twice":
        holder.append(copy.deepcopy(value))
    else:
        holder.remove(value)
    return f"onnx.value {value.name}: {how}"


def _onnx_node(model: Any, files: Files, rng: random.Random) -> str:
    g = model.graph
    if not g.node:
        return "onnx.node: none"
    node = rng.choice(list(g.node))
    names = [*dict.fromkeys(n for other in g.node for n in (*other.input, *other.output)),
             *(v.name for v in g.output), *ODD_NAMES[:2]]
    how = rng.choice(["input", "input", "output", "op", "domain", "order", "twice", "name",
                      "subgraph"])
    if how in ("input", "output"):
        values = node.input if how == "input" else node.output
        if values and rng.random() < 0.5:
            values[rng.randrange(len(values))] = rng.choice(names)
        elif values and rng.random() < 0.5:
            del values[rng.randrange(len(values))]
        else:
            values.append(rng.choice(names))
    elif how == "op":
        node.op_type = rng.choice([*OP_NAMES, *(op for d, op in all_op_names() if d == "core")])
    elif how == "domain":
        node.domain = rng.choice(("ai.onnx", "com.microsoft", "ai.onnx.ml", "snn", "x" * 300))
    elif how == "order":
        nodes = list(g.node)
        rng.shuffle(nodes)
        del g.node[:]
        g.node.extend(nodes)
    elif how == "twice":
        g.node.append(copy.deepcopy(node))
    elif how == "name":
        node.name = rng.choice([*(n.name for n in g.node), *ODD_NAMES])
    else:
        from onnx import helper

        node.attribute.append(helper.make_attribute("body", copy.deepcopy(g)))
    return f"onnx.node {node.name}: {how}"


def _onnx_graph(model: Any, files: Files, rng: random.Random) -> str:
    from onnx import helper

    g = model.graph
    how = rng.choice(["no-outputs", "no-inputs", "no-graph", "sparse", "function", "doc"])
    if how == "no-outputs":
        del g.output[:]
    elif how == "no-inputs":
        del g.input[:]
    elif how == "no-graph":
        model.ClearField("graph")
    elif how == "sparse":
        sparse = g.sparse_initializer.add()
        sparse.values.name, sparse.values.data_type = "sparse", 1
    elif how == "function":
        model.functions.append(helper.make_function(
            "local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
            [helper.make_opsetid("", 18)]))
        if g.node:
            g.node[0].op_type, g.node[0].domain = "F", "local"
    else:
        g.doc_string = "\xff" * rng.choice((1, 1 << 20))
    return f"onnx.graph {how}"


_ONNX_EDITS = (_onnx_attribute, _onnx_schema_attribute, _onnx_schema_attribute, _onnx_tensor,
               _onnx_external, _onnx_opset, _onnx_value, _onnx_value, _onnx_node, _onnx_node,
               _onnx_graph)


def mutate_onnx(files: Files, rng: random.Random, seeds: Sequence[SeedModel]) -> str:
    """Edit the parsed ``ModelProto``: attributes, tensors, external data, opsets, values,
    nodes and the graph itself."""
    from onnx import ModelProto

    model = ModelProto()
    try:
        model.ParseFromString(files["model.onnx"])  # type: ignore[arg-type]
    except Exception:  # protobuf's DecodeError, or another, by implementation
        return mutate_bytes(files, rng, seeds, "model.onnx")
    description = rng.choice(_ONNX_EDITS)(model, files, rng)
    files["model.onnx"] = model.SerializeToString()
    return description


def _strings(model: Any) -> list[str]:
    """The names, op types, symbols and other strings of a model."""
    g = model.graph
    values = [*g.input, *g.output, *g.value_info]
    return [text for text in (
        *(n.name for n in g.node), *(n.op_type for n in g.node),
        *(i for n in g.node for i in (*n.input, *n.output)),
        *(a.name for n in g.node for a in n.attribute),
        *(v.name for v in values), *(t.name for t in g.initializer),
        *(d.dim_param for v in values for d in v.type.tensor_type.shape.dim),
        *(e.value for t in g.initializer for e in t.external_data)) if text]


def mutate_onnx_utf8(files: Files, rng: random.Random, seeds: Sequence[SeedModel]) -> str:
    """Make one string of the model invalid UTF-8, in place in the serialized bytes (the
    protobuf API refuses to write such a string, but a file may hold one)."""
    from onnx import ModelProto

    data = bytes(files["model.onnx"])  # type: ignore[arg-type]
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf's DecodeError, or another, by implementation
        return mutate_bytes(files, rng, seeds, "model.onnx")
    strings = _strings(model)
    if not strings:
        return "onnx.utf8: no strings"
    text = rng.choice(strings).encode()
    files["model.onnx"] = data.replace(text, rng.choice((b"\xff", b"\xc3")) + text[1:], 1)
    return f"onnx.utf8 {short_repr(text.decode())}"

