"""The autocast pass: casting rules, numerics, gradients, and cpu against reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polyhal
from polyhal import autodiff, ops
from polyhal.adapters.cpu import optimize
from polyhal.errors import IRError
from polyhal.ir import DType, Graph, GraphBuilder, bf16, f16, f32, f64, i32, i64
from polyhal.passes import (
    FLOAT32_OPS,
    FUSION_RULES,
    LOW_PRECISION_OPS,
    apply_rules,
    autocast,
    specialize,
)
from polyhal.passes.autocast import holds_exactly, widest
from polyhal.reference import run

LOW = (DType.FLOAT16, DType.BFLOAT16)
WEIGHTS = ["w1", "w2", "w3", "b1", "b2", "b3"]
# Relative errors (in norm): float16 keeps 11 significant bits, bfloat16 8. At the
# feeds of mlp_feeds(0) the MLP's gradients measured 7e-4 (float16) and 1.2e-2
# (bfloat16, grad_b3, a mean of opposite terms).
TOLERANCE = {DType.FLOAT16: 5e-3, DType.BFLOAT16: 3e-2}


def mlp_loss(one_hot: bool = False) -> Graph:
    """A 2-64-64-2 tanh/relu MLP with a softmax cross-entropy loss."""
    g = GraphBuilder("mlp")
    x = g.input("x", f32["batch", 2])
    labels = g.input("labels", i64["batch"])
    sizes = [(2, 64), (64, 64), (64, 2)]
    ws = [g.input(f"w{i + 1}", f32[a, b]) for i, (a, b) in enumerate(sizes)]
    bs = [g.input(f"b{i + 1}", f32[b]) for i, (_, b) in enumerate(sizes)]
    h = ops.tanh(x @ ws[0] + bs[0])
    h = ops.relu(h @ ws[1] + bs[1])
    log_probs = ops.log_softmax(h @ ws[2] + bs[2], axis=-1)
    if one_hot:
        target = ops.one_hot(labels, np.array(2, np.int64), np.array([0, 1], np.float32))
        picked = ops.reduce_sum(log_probs * target, np.array([1]), keepdims=0)
    else:
        picked = ops.gather_elements(log_probs, ops.unsqueeze(labels, np.array([1])), axis=1)
    g.output(-ops.reduce_mean(picked, keepdims=0), name="loss")
    return g.build()


def mlp_feeds(seed: int = 0, batch: int = 32) -> dict[str, np.ndarray]:
    """Weights, labels and inputs ``x`` whose Relu pre-activations all lie at least
    0.02 from zero: there a Relu's gradient jumps, and a low-precision rounding could
    move a pre-activation across."""
    rng = np.random.default_rng(seed)
    feeds = {"w1": rng.normal(0, 0.7, (2, 64)), "w2": rng.normal(0, 0.15, (64, 64)),
             "w3": rng.normal(0, 0.15, (64, 2)), "b1": rng.normal(0, 0.1, 64),
             "b2": rng.normal(0, 0.1, 64), "b3": rng.normal(0, 0.1, 2)}
    feeds = {name: array.astype(np.float32) for name, array in feeds.items()}
    x = rng.standard_normal((40 * batch, 2)).astype(np.float32)
    pre = np.tanh(x @ feeds["w1"] + feeds["b1"]) @ feeds["w2"] + feeds["b2"]
    feeds["x"] = x[np.abs(pre).min(axis=1) > 0.02][:batch]
    assert len(feeds["x"]) == batch
    feeds["labels"] = rng.integers(0, 2, batch)
    return feeds


def dtypes_of(graph: Graph, op: str) -> list[str]:
    """The first output's dtype of every ``op`` node."""
    return [n.outputs[0].type.dtype.value for n in graph.nodes if n.op == op]


def casts(graph: Graph) -> list[tuple[str, str]]:
    """(input, target dtype) of every Cast node."""
    return [(n.inputs[0], n.outputs[0].type.dtype.value) for n in graph.nodes if n.op == "Cast"]


def check_rules(original: Graph, mixed: Graph, dtype: DType) -> None:
    """The invariants every autocast graph of a float32 graph keeps."""
    assert mixed.inputs == original.inputs
    assert mixed.outputs == original.outputs
    types = mixed.value_types
    for node in mixed.nodes:
        floats = {types[i].dtype for i in node.inputs if i and types[i].dtype.is_float}
        if node.op in LOW_PRECISION_OPS:
            assert floats <= {dtype}, node
        elif node.op in FLOAT32_OPS:
            assert floats <= {DType.FLOAT32}, node
    made = casts(mixed)
    assert len(made) == len(set(made)), "a value is cast twice to one dtype"
    producer = {n.outputs[0].name: n for n in mixed.nodes}
    for node in mixed.nodes:
        before = producer.get(node.inputs[0]) if node.op == "Cast" else None
        if before is not None and before.op == "Cast":
            origin = types[before.inputs[0]].dtype
            assert origin != node.outputs[0].type.dtype or origin == DType.FLOAT32, (
                f"round trip {before.name} -> {node.name} not cancelled")


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """``|actual - expected| / |expected|`` in the 2-norm."""
    difference = np.asarray(actual, np.float64) - np.asarray(expected, np.float64)
    return float(np.linalg.norm(difference) / max(np.linalg.norm(expected), 1e-6))


# ----------------------------------------------------------------------------- rules


def test_mlp_casting_rules():
    loss = mlp_loss()
    mixed = autocast(loss, DType.FLOAT16)
    check_rules(loss, mixed, DType.FLOAT16)
    assert dtypes_of(mixed, "MatMul") == ["float16"] * 3
    # Add(float16 product, float32 bias) widens; the activations follow it.
    assert dtypes_of(mixed, "Add") == ["float32"] * 3
    assert dtypes_of(mixed, "Tanh") == dtypes_of(mixed, "Relu") == ["float32"]
    assert dtypes_of(mixed, "LogSoftmax") == dtypes_of(mixed, "ReduceMean") == ["float32"]
    # Labels and their indices are untouched.
    gather = next(n for n in mixed.nodes if n.op == "GatherElements")
    assert mixed.value_types[gather.inputs[1]].dtype == DType.INT64
    assert all(not t.startswith("int") for _, t in casts(mixed))
    assert sorted(casts(mixed)) == sorted([
        ("x", "float16"), ("w1", "float16"), ("w2", "float16"), ("w3", "float16"),
        ("tanh_3", "float16"), ("relu_6", "float16"),
        ("matmul_1", "float32"), ("matmul_4", "float32"), ("matmul_7", "float32")])


def test_gemm_and_conv_cast_their_bias_and_follow_ops_stay_low():
    g = GraphBuilder("conv")
    x = g.input("x", f32[1, 2, 5, 5])
    w = g.input("w", f32[3, 2, 3, 3])
    b = g.input("b", f32[3])
    y = ops.relu(ops.conv(x, w, b))
    flat = ops.flatten(y, axis=1)
    g.output(ops.gemm(flat, g.input("v", f32[27, 4]), g.input("c", f32[4])), name="out")
    graph = g.build()
    for dtype in LOW:
        mixed = autocast(graph, dtype)
        check_rules(graph, mixed, dtype)
        low = dtype.value
        assert [n.outputs[0].type.dtype.value for n in mixed.nodes if n.op != "Cast"] == (
            [low] * 4)  # Conv, Relu, Flatten, Gemm
        assert ("b", low) in casts(mixed) and ("c", low) in casts(mixed)
        assert mixed.outputs[0].type == f32[1, 4]
        assert "out_" + low in mixed.value_types  # the low-precision result, renamed


def test_one_cast_per_value_and_dtype():
    g = GraphBuilder("shared")
    x = g.input("x", f32["n", 4])
    w = g.input("w", f32[4, 4])
    a, b = x @ w, ops.tanh(x) @ w  # x and w each feed two products
    g.output(ops.exp(a) + ops.exp(a) * ops.softmax(b), name="y")
    mixed = autocast(g.build(), DType.BFLOAT16)
    assert casts(mixed).count(("w", "bfloat16")) == 1
    assert casts(mixed).count(("x", "bfloat16")) == 1
    assert casts(mixed).count((mixed.nodes[2].outputs[0].name, "float32")) == 1  # a, once
    check_rules(g.build(), mixed, DType.BFLOAT16)


def test_round_trips_cancel_and_roundings_stay():
    g = GraphBuilder("trips")
    x = g.input("x", f32[2, 4])
    half = g.input("half", f16[2, 4])
    widened = ops.cast(half, to=DType.FLOAT32)  # exact: cast back, it is `half` again
    rounded = ops.cast(ops.cast(x, to=DType.FLOAT16), to=DType.FLOAT32)  # rounds: stays
    w = g.constant(np.eye(4, dtype=np.float32), name="w")
    g.output(widened @ w, rounded, names=["y", "r"])
    mixed = autocast(g.build(), DType.FLOAT16)
    matmul = next(n for n in mixed.nodes if n.op == "MatMul")
    assert matmul.inputs == ("half", "w_float16")
    assert ("half", "float32") not in casts(mixed)  # dead once cancelled
    assert [t for _, t in casts(mixed)].count("float32") == 2  # rounded, and y back up
    out = run(mixed, x=np.full((2, 4), 0.1, np.float32), half=np.ones((2, 4), np.float16))
    np.testing.assert_array_equal(out["r"], np.float32(np.float16(0.1)))
    np.testing.assert_array_equal(out["y"], 1.0)


def test_integers_and_float64_are_untouched():
    g = GraphBuilder("ints")
    n = g.input("n", i32[3, 3])
    d = g.input("d", f64[3, 3])
    count = ops.cast(n @ n, to=DType.FLOAT32)  # an int32 product feeding a float
    g.output(count @ count, d @ d, ops.reduce_sum(d, keepdims=0), names=["c", "dd", "s"])
    graph = g.build()
    mixed = autocast(graph, DType.FLOAT16)
    assert mixed.outputs == graph.outputs
    assert dtypes_of(mixed, "MatMul") == ["int32", "float16", "float64"]
    assert casts(mixed) == [("matmul_1", "float32"), ("cast_2", "float16"),
                            ("c_float16", "float32")]


def test_widest_rule_and_scalar_constants():
    g = GraphBuilder("follow")
    x = g.input("x", f32[2, 4])
    w = g.input("w", f32[4, 4])
    p = x @ w
    g.output(p * 0.5, p * 1e6, ops.where(ops.greater(p, 0.0), p, x), ops.concat(p, p, axis=0),
             names=["scaled", "huge", "picked", "joined"])
    graph = g.build()
    mixed = autocast(graph, DType.FLOAT16)
    assert mixed.outputs == graph.outputs
    made = {n.outputs[0].name: n for n in mixed.nodes}
    # A rank-0 constant does not widen, unless float16 cannot hold it.
    assert made["scaled_float16"].op == "Mul"
    assert made["huge"].op == "Mul" and made["huge"].outputs[0].type.dtype == DType.FLOAT32
    # Where's branches are tied: the widest (float32) wins; the bool condition is untouched.
    types = mixed.value_types
    assert [types[i].dtype for i in made["picked"].inputs] == [DType.BOOL, f32, f32]
    assert made["joined_float16"].op == "Concat"
    out = run(mixed, x=np.ones((2, 4), np.float32), w=np.eye(4, dtype=np.float32))
    np.testing.assert_array_equal(out["huge"], 1e6)


def test_widest_and_exact_widening():
    assert widest([f16, f32]) == f32 and widest([bf16, bf16]) == bf16
    assert widest([f16, bf16]) == f32  # neither holds the other
    assert widest([bf16, f64, f16]) == f64
    assert holds_exactly(f32, bf16) and holds_exactly(f64, f32)
    assert not holds_exactly(f16, bf16) and not holds_exactly(f16, f32)


def test_custom_lists_and_ops_without_the_low_dtype():
    g = GraphBuilder("custom")
    x = g.input("x", f32[2, 3])
    w = g.input("w", f32[3, 3])
    y = ops.log_softmax(x @ w)
    g.output(g.op("Scale", y, np.array(2.0, np.float32), domain="snn"), name="y")
    graph = g.build()
    default = autocast(graph, DType.FLOAT16)
    assert dtypes_of(default, "LogSoftmax") == ["float32"]
    following = autocast(graph, DType.FLOAT16, keep=FLOAT32_OPS - {"LogSoftmax"})
    assert dtypes_of(following, "LogSoftmax") == ["float16"]
    # snn.Scale admits float32 and float64 only: it gets float32.
    assert dtypes_of(following, "Scale") == ["float32"]
    everything_low = autocast(graph, DType.FLOAT16, low={"MatMul", "snn.Scale"}, keep=())
    assert dtypes_of(everything_low, "Scale") == ["float32"]
    assert everything_low.outputs == graph.outputs


def test_autocast_is_idempotent():
    loss = mlp_loss()
    once = autocast(loss, DType.FLOAT16)
    twice = autocast(once, DType.FLOAT16)
    assert str(twice) == str(once)


@pytest.mark.parametrize("dtype", [DType.FLOAT32, DType.FLOAT64, DType.INT8, "float64",
                                   "half", 16])
def test_bad_dtype_is_an_error_naming_the_argument(dtype):
    with pytest.raises(IRError, match="dtype"):
        autocast(mlp_loss(), dtype)


def test_an_op_in_both_lists_is_an_error():
    with pytest.raises(IRError, match="both low and keep: MatMul"):
        autocast(mlp_loss(), DType.FLOAT16, keep={"MatMul"})


def test_dtype_by_name():
    assert str(autocast(mlp_loss(), "bfloat16")) == str(autocast(mlp_loss(), DType.BFLOAT16))


# ------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("one_hot", [False, True])
def test_forward_and_gradient_are_close_to_float32(dtype, one_hot):
    loss = mlp_loss(one_hot)
    feeds = mlp_feeds()
    expected = run(autodiff.grad(loss, wrt=WEIGHTS), **feeds)
    mixed = autocast(loss, dtype)
    gradient = autodiff.grad(mixed, wrt=WEIGHTS)
    # Master weights stay float32; so do their gradients.
    assert [v.type.dtype for v in gradient.outputs] == [DType.FLOAT32] * 7
    assert gradient.value_types["grad_w1"] == f32[2, 64]
    got = run(gradient, **feeds)
    assert relative_error(run(mixed, **feeds)["loss"], expected["loss"]) < TOLERANCE[dtype]
    for name in ["loss", *(f"grad_{w}" for w in WEIGHTS)]:
        assert relative_error(got[name], expected[name]) < TOLERANCE[dtype], name


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("fused", [False, True])
def test_cpu_matches_reference(dtype, fused):
    """Forward and gradient run on ``cpu`` without fallback. ``fused`` (Gemm with a
    low-precision bias, the loss's ops following) puts ConstantOfShape, Expand,
    ScatterElements, GatherElements and ReduceSum of the gradient in low precision."""
    loss = mlp_loss()
    keep = FLOAT32_OPS
    if fused:
        loss = apply_rules(loss, FUSION_RULES)
        keep = FLOAT32_OPS - {"LogSoftmax", "ReduceMean"}
    mixed = autocast(loss, dtype, keep=keep)
    gradient = autodiff.grad(mixed, wrt=WEIGHTS)
    if fused:
        low_ops = {n.op for n in gradient.nodes if n.outputs[0].type.dtype == dtype}
        assert {"ConstantOfShape", "Expand", "ScatterElements", "GatherElements",
                "ReduceSum", "MatMul", "Cast"} <= low_ops
    feeds = mlp_feeds()
    for graph in (mixed, gradient):
        compiled = polyhal.compile(graph, device="cpu", fallback=None)
        got = compiled(**feeds)
        assert compiled.placement.fallback_count == 0
        expected = run(graph, **feeds)
        # The cpu fuses autodiff's MatMul+Add back into a Gemm, which rounds once
        # where the graph rounds twice; on the graph it optimized, its kernels agree
        # with the reference's.
        optimized = run(optimize(specialize(graph, {"batch": 32})), **feeds)
        for value in graph.outputs:
            assert got[value.name].dtype == np.float32
            assert relative_error(got[value.name], optimized[value.name]) < 1e-4, value.name
            assert relative_error(got[value.name], expected[value.name]) < TOLERANCE[dtype]


# ---------------------------------------------------------------- random graphs

UNARY = ["Relu", "Neg", "Tanh", "Sigmoid", "Exp", "Softmax"]
BINARY = ["Add", "Sub", "Mul", "Max", "Div"]


@st.composite
def random_graphs(draw) -> tuple[Graph, np.ndarray]:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = GraphBuilder("random")
    x = g.input("x", f32["n", 4])
    values = [x]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "matmul", "bias", "scale"]))
        a = draw(st.sampled_from(values))
        if kind == "unary":
            out = g.op(draw(st.sampled_from(UNARY)), ops.tanh(a))
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            b = draw(st.sampled_from(values))
            out = g.op(op, a, ops.sigmoid(b) + 1.0 if op == "Div" else b)
        elif kind == "matmul":
            out = ops.tanh(a) @ (rng.normal(size=(4, 4)).astype(np.float32) * 0.5)
        elif kind == "bias":
            out = ops.gemm(ops.tanh(a), rng.normal(size=(4, 4)).astype(np.float32),
                           rng.normal(size=4).astype(np.float32))
        else:
            out = a * 0.5
        values.append(out)
    g.output(values[-1], ops.reduce_sum(values[-1] * values[-1], keepdims=0),
             names=["y", "total"])
    return g.build(), rng.normal(size=(3, 4)).astype(np.float32)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_graphs(), dtype=st.sampled_from(LOW))
def test_random_graphs_keep_the_rules_and_the_results(case, dtype):
    graph, x = case
    mixed = autocast(graph, dtype)
    check_rules(graph, mixed, dtype)
    assert str(autocast(mixed, dtype)) == str(mixed)
    expected, got = run(graph, x), run(mixed, x)
    for name in ("y", "total"):
        assert got[name].dtype == np.float32
        assert relative_error(got[name], expected[name]) < 8 * TOLERANCE[dtype], name
