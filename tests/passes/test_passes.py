"""Passes: each on its own, and together on random graphs (results preserved)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polyhal
from polyhal import ops
from polyhal.ir import Graph, GraphBuilder, f32, f64
from polyhal.passes import (
    FUSION_RULES,
    P,
    R,
    Rule,
    V,
    apply_rules,
    decompose,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    simplify,
    specialize,
)
from polyhal.reference import run


def _ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def test_dead_code_elimination_drops_unused_nodes_and_constants():
    g = GraphBuilder("dce")
    x = g.input("x", f32[3])
    unused = ops.exp(x) + g.constant(np.ones(3, np.float32), name="dead")
    del unused
    g.output(ops.relu(x), name="y")
    graph = eliminate_dead_code(g.build())
    assert _ops(graph) == ["Relu"]
    assert "dead" not in graph.constants


def test_constant_folding_evaluates_constant_subgraphs():
    g = GraphBuilder("fold")
    x = g.input("x", f32[3])
    c = ops.exp(g.constant(np.zeros(3, np.float32))) * 2.0
    g.output(x + c, name="y")
    graph = fold_constants(g.build())
    assert _ops(graph) == ["Add"]
    folded = graph.constants[graph.nodes[0].inputs[1]]
    np.testing.assert_array_equal(folded, [2, 2, 2])


def test_constant_folding_leaves_large_results():
    g = GraphBuilder("big")
    x = g.input("x", f32[1])
    big = ops.expand(g.constant(np.ones(1, np.float32)), np.array([4096], np.int64))
    g.output(x + ops.reduce_sum(big, keepdims=1), name="y")
    graph = fold_constants(g.build(), max_elements=1000)
    assert _ops(graph) == ["Expand", "ReduceSum", "Add"]
    np.testing.assert_array_equal(run(graph, np.zeros(1, np.float32))["y"], [4096])


def test_cse_merges_identical_nodes_and_constants():
    g = GraphBuilder("cse")
    x = g.input("x", f32[3])
    a = ops.exp(x) + g.constant(np.ones(3, np.float32))
    b = ops.exp(x) + g.constant(np.ones(3, np.float32))
    g.output(a * b, name="y")
    graph = eliminate_dead_code(eliminate_common_subexpressions(g.build()))
    assert _ops(graph) == ["Exp", "Add", "Mul"]
    assert len(graph.constants) == 1


def test_cse_keeps_graph_outputs_distinct():
    g = GraphBuilder("outs")
    x = g.input("x", f32[3])
    g.output(ops.exp(x), ops.exp(x), names=["a", "b"])
    graph = eliminate_common_subexpressions(g.build())
    assert [v.name for v in graph.outputs] == ["a", "b"]
    out = run(graph, np.zeros(3, np.float32))
    np.testing.assert_array_equal(out["a"], out["b"])


def test_cse_keeps_a_graph_output_that_folds_to_a_copy_of_another_constant():
    """``relu(w)`` folds to a constant named ``y`` with ``w``'s bytes: merging it into ``w``
    left output ``y`` defined by nothing, and ``cpu`` refused the graph."""
    g = GraphBuilder("folded")
    x = g.input("x", f32[2])
    w = g.constant(np.ones(2, np.float32), name="w")
    g.output(ops.relu(w), x + w, names=["y", "z"])
    graph = g.build()
    simplified = simplify(graph)
    assert [v.name for v in simplified.outputs] == ["y", "z"] and "y" in simplified.constants
    xs = np.array([1, -2], np.float32)
    expected = run(graph, xs)
    for result in (run(simplified, xs), polyhal.compile(graph, device="cpu")(xs)):
        np.testing.assert_array_equal(result["y"], expected["y"])
        np.testing.assert_array_equal(result["z"], expected["z"])


def test_cse_compares_every_byte_of_constants_that_look_alike():
    ends = np.zeros(64, np.float32)  # equal first and last 64 bytes, middles differ
    first, second = (np.concatenate([ends, middle, ends]) for middle in (np.ones(8, np.float32),
                                                                        np.full(8, 2, np.float32)))
    g = GraphBuilder("alike")
    x = g.input("x", f32[136])
    g.output((x + g.constant(first)) * (x + g.constant(second)) * (x + g.constant(first.copy())),
             name="y")
    graph = eliminate_dead_code(eliminate_common_subexpressions(g.build()))
    assert sorted(a[64] for a in graph.constants.values()) == [1, 2]  # the two copies merged
    xs = np.arange(136, dtype=np.float32)
    np.testing.assert_array_equal(run(graph, xs)["y"], (xs + first) * (xs + second) * (xs + first))


def test_passes_return_their_input_when_they_have_nothing_to_change():
    g = GraphBuilder("clean", doc="kept by every pass")
    x = g.input("x", f32["n", 4])
    w = g.constant(np.arange(16, dtype=np.float32).reshape(4, 4))
    g.output(ops.relu(x @ w + g.constant(np.ones(4, np.float32))), name="y")
    graph = apply_rules(simplify(g.build()), FUSION_RULES)
    assert _ops(graph) == ["Gemm", "Relu"]
    assert graph.doc == "kept by every pass"
    for clean in (fold_constants, eliminate_common_subexpressions, eliminate_dead_code, simplify,
                  lambda g: apply_rules(g, FUSION_RULES)):
        assert clean(graph) is graph
    concrete = specialize(graph, {"n": 2})
    assert concrete is not graph and concrete.doc == graph.doc
    assert concrete.constants[graph.nodes[0].inputs[1]] is graph.constants[graph.nodes[0].inputs[1]]


def test_rewrite_rule_with_constraint_and_capture_result():
    double_neg = Rule("double-neg", P("Neg", P("Neg", V("x"))), "x")
    g = GraphBuilder("neg")
    x = g.input("x", f32[2])
    inner = ops.neg(x)
    g.output(ops.neg(inner), ops.neg(ops.neg(ops.abs(x))), names=["y", "z"])
    graph = apply_rules(g.build(), [double_neg])
    assert "Neg" not in _ops(graph)
    np.testing.assert_array_equal(run(graph, np.array([1, -2], np.float32))["z"], [1, 2])


def test_rewrite_does_not_swallow_values_used_elsewhere():
    double_neg = Rule("double-neg", P("Neg", P("Neg", V("x"))), "x")
    g = GraphBuilder("shared")
    x = g.input("x", f32[2])
    inner = ops.neg(x)
    g.output(ops.neg(inner), inner, names=["y", "inner"])
    assert _ops(apply_rules(g.build(), [double_neg])) == ["Neg", "Neg"]


def test_rewrite_result_pattern_with_attributes_from_the_match():
    scale_twice = Rule("leaky-to-mul", P("LeakyRelu", V("x"), name="lr", alpha=1.0),
                       R("Identity", "x"))
    g = GraphBuilder("lr")
    x = g.input("x", f32[2])
    g.output(ops.leaky_relu(ops.leaky_relu(x, alpha=1.0), alpha=0.5), name="y")
    graph = apply_rules(g.build(), [scale_twice])
    assert _ops(graph) == ["Identity", "LeakyRelu"]


def test_matmul_add_becomes_gemm_only_for_matrices():
    g = GraphBuilder("gemm")
    x = g.input("x", f32["n", 4])
    x3 = g.input("x3", f32[2, "n", 4])
    w = np.ones((4, 3), np.float32)
    g.output(x @ w + np.ones(3, np.float32), x3 @ w + np.ones(3, np.float32), names=["y", "z"])
    graph = apply_rules(g.build(), FUSION_RULES)
    assert sorted(_ops(graph)) == ["Add", "Gemm", "MatMul"]


@pytest.mark.parametrize("bias", [True, False])
def test_conv_batchnorm_folds_into_conv(bias):
    rng = np.random.default_rng(0)
    g = GraphBuilder("cbn")
    x = g.input("x", f64["n", 3, 5, 5])
    w = g.constant(rng.normal(size=(4, 3, 3, 3)))
    b = g.constant(rng.normal(size=4)) if bias else None
    c = ops.conv(x, w, b, pads=[1, 1, 1, 1], strides=[2, 2])
    params = [g.constant(rng.uniform(0.5, 1.5, 4)) for _ in range(4)]
    g.output(ops.batch_normalization(c, *params, epsilon=1e-3), name="y")
    graph = g.build()
    folded = apply_rules(graph, FUSION_RULES)
    assert _ops(folded) == ["Conv"]
    assert dict(folded.nodes[0].attrs) == {"pads": (1, 1, 1, 1), "strides": (2, 2)}
    xv = rng.normal(size=(2, 3, 5, 5))
    np.testing.assert_allclose(run(folded, xv)["y"], run(graph, xv)["y"], rtol=1e-10,
                               atol=1e-12)


def test_specialize_binds_symbols():
    g = GraphBuilder("s")
    x = g.input("x", f32["n", 4])
    g.output(ops.flatten(ops.concat(x, x, axis=0), axis=0), name="y")
    graph = specialize(g.build(), {"n": 3})
    assert graph.inputs[0].type == f32[3, 4]
    assert graph.outputs[0].type == f32[1, 24]


def test_decompose_replaces_composites():
    g = GraphBuilder("d")
    x = g.input("x", f32[2, 3])
    g.output(ops.softmax(x, axis=-1), name="y")
    graph = decompose(g.build())
    assert "Softmax" not in _ops(graph)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(run(graph, xv)["y"], e / e.sum(1, keepdims=True), rtol=1e-6)


UNARY = ["Relu", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Sqrt", "Softplus", "Gelu"]
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


@st.composite
def random_graphs(draw) -> tuple[Graph, np.ndarray]:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = GraphBuilder("random")
    x = g.input("x", f64["n", 4])
    values = [x]
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["unary", "binary", "const", "matmul", "gemm", "dup"]))
        a = draw(st.sampled_from(values))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            a = ops.abs(a) if op == "Sqrt" else a
            out = g.op(op, a)
        elif kind == "binary":
            out = g.op(draw(st.sampled_from(BINARY)), a, draw(st.sampled_from(values)))
        elif kind == "const":
            c = ops.exp(g.constant(rng.normal(size=4)))  # foldable
            out = a * c
        elif kind == "matmul":
            out = a @ rng.normal(size=(4, 4)) * 0.5
        elif kind == "gemm":
            out = a @ rng.normal(size=(4, 4)) + rng.normal(size=4)
        else:
            out = ops.exp(a) + ops.exp(a)  # a CSE opportunity
        values.append(out)
    g.output(values[-1], name="y")
    return g.build(), rng.normal(size=(3, 4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_graphs())
def test_passes_preserve_results_on_random_graphs(case):
    graph, x = case
    expected = run(graph, x)["y"]
    optimized = apply_rules(simplify(graph), FUSION_RULES)
    np.testing.assert_allclose(run(optimized, x)["y"], expected, rtol=1e-9, atol=1e-12)
    assert len(optimized.nodes) <= len(graph.nodes)


def test_literals_of_generated_loops_name_non_finite_values():
    from polyhal.passes.elementwise import literal

    assert [literal(v) for v in (1.5, np.float32(0.25), np.inf, -np.inf, np.nan)] == [
        "1.5", "0.25", "math.inf", "-math.inf", "math.nan"]
