"""Hostile ONNX inputs found by fuzzing: each error names the path, the initializer or
the dimension at fault."""

from __future__ import annotations

import re

import pytest
from onnx import TensorProto, helper

from polyhal.errors import LimitExceededError, SerializationError
from polyhal.interop.onnx import load_onnx


def _model(nodes, x_shape, initializers=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_path_with_a_nul_byte_is_a_serialization_error(tmp_path):
    with pytest.raises(SerializationError, match=r"model\\x00.onnx': cannot read model file "
                                                 r"\(the path holds a NUL byte\)"):
        load_onnx(str(tmp_path / "model\x00.onnx"))


def test_a_folder_is_not_a_model_file(tmp_path):
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(SerializationError, match=r"dir.onnx: cannot read model file \(a folder"):
        load_onnx(tmp_path / "dir.onnx")


def test_an_empty_initializer_with_huge_dims_names_the_initializer():
    empty = helper.make_tensor("w", TensorProto.FLOAT, [0, 2**62, 2**62], [])
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [1], [empty])
    with pytest.raises(LimitExceededError, match=r"initializer 'w': dimension "
                                                 r"4611686018427387904 .*exceeds the limit"):
        load_onnx(model)


def test_a_flatten_of_long_symbolic_dims_names_the_node_and_dimension():
    names = [f"symbol_number_{i}" for i in range(20)]
    model = _model([helper.make_node("Flatten", ["x"], ["y"], axis=20)], names)
    with pytest.raises(LimitExceededError, match=r"node 'Flatten_0' \(core.Flatten\): dimension "
                                                 r"'symbol_number_0\*symbol_number_1\*.*"
                                                 r"characters in canonical form"):
        load_onnx(model)


@pytest.mark.parametrize(("op", "inputs", "rank"), [
    ("Reshape", ["x", "s"], 2**62), ("Unsqueeze", ["x", "s"], 2**62 + 1),
    ("Expand", ["x", "s"], 2**62), ("ConstantOfShape", ["s"], 2**62)])
def test_a_shape_input_declared_too_long_is_refused_before_any_dimension_is_made(
        op, inputs, rank):
    """The output rank follows from the shape input's declared length: 2**62 once took
    until the fuzzer's time limit (a symbol per dimension) and all of memory."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2**62])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], "g",
                              [x, s] if "x" in inputs else [s], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    index = inputs.index("s")
    with pytest.raises(LimitExceededError, match=rf"node '{op}_0' \(core.{op}\): input {index} "
                       rf"\(\w+\) is 4611686018427387904 elements long, so the output would "
                       rf"have rank {rank}, over the limit of 32"):
        load_onnx(model)


@pytest.mark.parametrize(("node", "opset", "inputs", "message"), [
    (helper.make_node("Softmax", [], ["y"]), 11, [], "0 inputs, where version 11 takes 1"),
    (helper.make_node("Softmax", ["x"], ["y"], axis="a"), 11, ["x"],
     "attribute 'axis' is STRING, where version 11 takes INT"),
    (helper.make_node("Softmax", ["x"], [], axis=0), 11, ["x"],
     "0 outputs, where version 11 takes 1"),
    (helper.make_node("ReduceSum", ["x"], ["y"], axes=[float("nan")]), 11, ["x"],
     "attribute 'axes' is FLOATS, where version 11 takes INTS"),
    (helper.make_node("Clip", [], ["y"], min=0.0), 6, [], "0 inputs, where version 6 takes 1"),
    (helper.make_node("Add", ["x", ""], ["y"]), 17, ["x"], "input 1 is required but empty"),
    (helper.make_node("Concat", [], ["y"], axis=0), 17, [], "0 inputs, where version 13 takes "
                                                             "at least 1"),
], ids=["no-input", "string-axis", "no-output", "float-axes", "clip-6", "empty-input",
        "variadic"])
def test_a_node_that_breaks_its_onnx_schema_is_refused_naming_it(node, opset, inputs,
                                                                  message):
    """Old versions are rewritten into the current form before the node is checked: a
    node with too few inputs or an attribute of another kind failed inside the rewrite,
    with an IndexError or ValueError naming nothing."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", [x] if inputs else [], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with pytest.raises(SerializationError, match=re.escape(
            f"node '{node.op_type}_0' (ai.onnx.{node.op_type}, opset {opset}): {message}")):
        load_onnx(model)


@pytest.mark.parametrize(("text", "field"), [
    (b"batch", r"graph\.input\[0\]\.type\.tensor_type\.shape\.dim\[0\]\.dim_param"),
    (b"relu_node", r"graph\.node\[0\]\.name"),
    (b"Relu", r"graph\.node\[0\]\.op_type"),
])
def test_text_that_is_not_utf8_is_named_where_it_is(text, field):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu_node")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                             ).SerializeToString()
    broken = data.replace(text, text[:1] + b"\x80" + text[2:], 1)  # same length, not UTF-8
    with pytest.raises(SerializationError, match=rf"^<onnx bytes>: model\.{field} is not UTF-8 "
                                                 r"text: b'.\\x80"):
        load_onnx(broken)
