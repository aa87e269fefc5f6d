"""polyhal.compile: capability-based placement, partitions, transfers and fallback."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import polyhal
import polyhal.train
from polyhal import ops
from polyhal.adapters.template import TemplateAdapter, TemplateDevice
from polyhal.errors import InputBindingError, PolyhalError, UnsupportedError
from polyhal.hal import Capabilities, CompileOptions, Executable
from polyhal.interop.loading import load_model
from polyhal.ir import Graph, GraphBuilder, f32, f64
from polyhal.reference import run


def mixed_graph(dtype=f32) -> Graph:
    """relu(x @ w + b) -> tanh -> * 2 -> softmax: template covers some nodes, not all."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("mixed")
    x = g.input("x", dtype["batch", 5])
    w = g.constant(rng.normal(size=(5, 4)).astype(dtype.numpy), name="w")
    b = g.constant(rng.normal(size=(4,)).astype(dtype.numpy), name="b")
    h = ops.relu(x @ w + b)
    t = ops.tanh(h)
    y = ops.softmax(t * 2.0, axis=-1)
    g.output(y, h, names=["y", "h"])
    return g.build()


@pytest.mark.parametrize("dtype", [f32, f64])
def test_fallback_gives_reference_results_and_counts_fallbacks(dtype):
    graph = mixed_graph(dtype)
    compiled = polyhal.compile(graph, device="template", fallback="reference")
    x = np.random.default_rng(1).normal(size=(3, 5)).astype(dtype.numpy)
    expected = run(graph, x)
    actual = compiled(x)
    for name in ("y", "h"):
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-6)
    np.testing.assert_array_equal(actual[0], actual["y"])
    placement = compiled.placement
    on_template = set(placement.nodes_on("template:0"))
    assert {"matmul_1", "add_2", "relu_3", "mul_5"} <= on_template
    assert placement.assignment["tanh_4"] == "reference:0"
    # softmax is composite: the template lacks Exp/ReduceMax, so Softmax falls back whole
    assert placement.fallback_count == len(placement.assignment) - len(on_template) >= 2
    assert "core.Tanh is not claimed" in placement.reasons["tanh_4"]
    assert compiled.stats.transfers >= 2
    assert [p.device for p in placement.partitions] == ["template:0", "reference:0"] * 2
    assert "fallbacks" in str(placement)


def test_without_fallback_every_uncovered_node_is_listed():
    with pytest.raises(UnsupportedError) as info:
        polyhal.compile(mixed_graph(), device="template", fallback=None)
    message = str(info.value)
    assert "no device covers 2 node(s)" in message
    assert "tanh_4 (core.Tanh): template:0: core.Tanh is not claimed" in message
    assert "core.Softmax" in message


def test_composites_are_decomposed_before_falling_back():
    g = GraphBuilder("gemm")
    x = g.input("x", f32["n", 4])
    g.output(ops.gemm(x, np.ones((4, 3), np.float32), np.ones(3, np.float32)), name="y")
    compiled = polyhal.compile(g.build(), device="template", fallback=None)
    assert compiled.placement.fallback_count == 0
    assert [n.op for n in compiled.graph.nodes] == ["MatMul", "Add"]
    x_value = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(compiled(x=x_value)["y"], x_value @ np.ones((4, 3)) + 1)


def test_dtype_not_claimed_falls_back():
    g = GraphBuilder("ints")
    a = g.input("a", polyhal.DType.INT32[3])
    g.output(a + a, name="y")
    compiled = polyhal.compile(g.build(), device="template", fallback="reference")
    assert compiled.placement.assignment["add_1"] == "reference:0"
    assert "not claimed for int32" in compiled.placement.reasons["add_1"]
    np.testing.assert_array_equal(compiled(np.array([1, 2, 3], np.int32))["y"], [2, 4, 6])


class StaticShapeDevice(TemplateDevice):
    """The template device, declaring that it compiles only concrete shapes."""

    def __init__(self) -> None:
        self.adapter = TemplateAdapter()
        self.compiled: list[Graph] = []

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities, dynamic_shapes=False)

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        self.compiled.append(graph)
        return super().compile(graph, options)


def test_executables_are_cached_per_shape_binding_only_without_dynamic_shapes():
    static = StaticShapeDevice()
    for device, per_shape in (("template", False), (static, True)):
        compiled = polyhal.compile(mixed_graph(), device=device, fallback="reference")
        for rows in (1, 2, 1, 2, 3):
            x = np.random.default_rng(rows).normal(size=(rows, 5)).astype(np.float32)
            np.testing.assert_allclose(compiled(x)["y"], run(mixed_graph(), x)["y"], rtol=1e-6)
        partitions = compiled.placement.partitions
        on_template = sum(p.device == "template:0" for p in partitions)
        # reference (dynamic shapes) compiles each of its partitions once
        assert compiled.stats.compiles == len(partitions) + (2 * on_template if per_shape else 0)
        assert compiled.stats.runs == 5
    assert len(static.compiled) == 3 * on_template
    assert all(v.type.is_static for g in static.compiled for v in g.inputs)


def test_inputs_are_checked():
    compiled = polyhal.compile(mixed_graph(), device="template", fallback="reference")
    with pytest.raises(InputBindingError, match="dtype float64"):
        compiled(np.ones((2, 5)))
    with pytest.raises(UnsupportedError, match="precision 'fp8'"):
        polyhal.compile(mixed_graph(), device="template", precision="fp8")


def test_inputs_sharing_a_symbol_must_agree_on_its_size():
    g = GraphBuilder("pair")
    g.output(g.input("a", f32["n", 2]) + g.input("b", f32["n", 2]), name="y")
    compiled = polyhal.compile(g.build(), device="template")
    assert compiled(np.ones((3, 2), np.float32), np.ones((3, 2), np.float32))["y"].shape == (3, 2)
    with pytest.raises(InputBindingError, match=r"input 'b' \(expects float32\[n, 2\]\): "
                                                r"dimension 0 is 4, expected n \(n = 3\)"):
        compiled(np.ones((3, 2), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(InputBindingError, match=r"input 'a' .*: got rank 1 \(shape \[3\]\)"):
        compiled(np.ones(3, np.float32), np.ones((3, 2), np.float32))


def test_isolated_devices_place_the_same_way():
    graph = mixed_graph()
    compiled = polyhal.compile(graph, device="template", fallback="reference", isolate=True)
    x = np.ones((2, 5), np.float32)
    np.testing.assert_allclose(compiled(x)["y"], run(graph, x)["y"], rtol=1e-6)


def test_a_graph_on_one_isolated_device_is_one_request_a_call(worker_requests):
    graph = mixed_graph()
    compiled = polyhal.compile(graph, device="reference", isolate=True)
    x = np.ones((2, 5), np.float32)
    compiled(x)  # compiles
    sent = worker_requests(compiled.devices["reference:0"].inner)
    outputs = compiled(x)
    assert sent == ["execute"]
    for name in ("y", "h"):
        np.testing.assert_allclose(outputs[name], run(graph, x)[name], rtol=1e-6)
    with pytest.raises(InputBindingError, match="dtype float64"):
        compiled(np.ones((2, 5)))
    assert compiled.stats.runs == 2


@pytest.mark.parametrize(("call", "message"), [
    (lambda: polyhal.compile("model.json", device="cpu"),
     r"compile: expected a polyhal Graph, got str \(read a model file with polyhal.load"),
    (lambda: polyhal.compile(None), r"compile: expected a polyhal Graph, got NoneType"),
    (lambda: run([1, 2], np.ones(2)), r"expected a polyhal Graph, got list"),
    (lambda: polyhal.load(None), r"load: expected a file path, got NoneType"),
    (lambda: load_model(3), r"load_model: expected a file path, got int"),
    (lambda: polyhal.train.SGD("fast"), r"optimizer argument lr='fast' must be a number"),
])
def test_arguments_of_the_wrong_kind_are_polyhal_errors(call, message):
    with pytest.raises(PolyhalError, match=message):
        call()


def test_inputs_in_the_other_byte_order_are_read_as_their_dtype():
    g = GraphBuilder("twice")
    g.output(g.input("x", f32["n"]) * np.float32(2), name="y")
    compiled = polyhal.compile(g.build(), device="cpu")
    big_endian = np.array([1.5, -2.0], dtype=">f4")
    np.testing.assert_array_equal(compiled(big_endian)["y"], [3.0, -4.0])
    assert big_endian.dtype == np.dtype(">f4")  # the caller's array is left as it was
    with pytest.raises(InputBindingError, match=r"input 'x' \(expects float32\[n\]\): got "
                                                r"dtype >f8"):
        compiled(np.ones(2, dtype=">f8"))
    with pytest.raises(InputBindingError, match=r"input 'x' \(expects float32\[n\]\): got None"):
        compiled(None)
