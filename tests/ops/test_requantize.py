"""quant.Requantize: the exact semantics of docs/fpga.md (against a line-by-line
transcription in Python integers), inference errors, run-time value checks, and
how the rest of polyhal treats the quant domain (autodiff, ONNX export, the op
reference, serialization)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polyhal
from polyhal import autodiff, ops
from polyhal.errors import ExecutionError, IRError, UnsupportedError, VerificationError
from polyhal.ir import GraphBuilder, TensorType, f32, i8, i32
from polyhal.ops import get_op
from polyhal.ops.requantize import multiplier_and_shift, requantize
from polyhal.reference import run
from tests.helpers import run_op

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
ROUNDINGS = ("half_up", "half_even")


def spec(x: int, multiplier: int, shift: int, bias: int = 0, zero_point: int = 0,
         rounding: str = "half_up", relu: int = 0) -> int:
    """docs/fpga.md's "quant.Requantize: exact semantics", line by line."""
    s = x + bias
    p = s * multiplier
    if shift == 0:
        q = p
    elif rounding == "half_up":
        q = (p + 2 ** (shift - 1)) // 2**shift
    else:
        f = p // 2**shift
        r = p - f * 2**shift
        h = 2 ** (shift - 1)
        q = f + (1 if r > h or (r == h and f % 2 == 1) else 0)
    t = q + zero_point
    lo = zero_point if relu else -128
    return min(127, max(lo, t))


def requant(x, multiplier, shift, bias=None, **attrs) -> np.ndarray:
    """Run the op on arrays (every input a graph input)."""
    arrays = [np.asarray(a, np.int32) for a in (x, multiplier, shift, bias) if a is not None]
    (y,) = run_op("Requantize", arrays, attrs, domain="quant")
    return y


def expected(x, multiplier, shift, bias=None, **attrs) -> np.ndarray:
    """The spec, elementwise, with per-channel parameters broadcast along the last axis."""
    x = np.asarray(x, np.int64)
    params = [np.broadcast_to(np.asarray(v if v is not None else 0, np.int64), x.shape)
              for v in (multiplier, shift, bias)]
    flat = [spec(int(a), int(m), int(s), int(b), **attrs)
            for a, m, s, b in zip(x.reshape(-1), *(p.reshape(-1) for p in params),
                                  strict=True)]
    return np.array(flat, np.int8).reshape(x.shape)


# --------------------------------------------------------------------------- semantics


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_ties_round_up_or_to_even_on_both_signs(rounding):
    x = np.array([1, 3, 5, -1, -3, -5, 2, -2, 6, -6], np.int32)  # x / 2 and x / 4
    halves = {"half_up": [1, 2, 3, 0, -1, -2, 1, -1, 3, -3],
              "half_even": [0, 2, 2, 0, -2, -2, 1, -1, 3, -3]}
    np.testing.assert_array_equal(requant(x, 1, 1, rounding=rounding), halves[rounding])
    quarters = {"half_up": [0, 1, 1, 0, -1, -1, 1, 0, 2, -1],
                "half_even": [0, 1, 1, 0, -1, -1, 0, 0, 2, -2]}
    np.testing.assert_array_equal(requant(x, 1, 2, rounding=rounding), quarters[rounding])


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_shift_zero_keeps_the_product_and_shift_63_divides_by_2_63(rounding):
    x = np.array([0, 1, -1, 100, -100, INT32_MAX, INT32_MIN], np.int32)
    np.testing.assert_array_equal(requant(x, 1, 0, rounding=rounding),
                                  [0, 1, -1, 100, -100, 127, -128])
    # |x| * (2^31 - 1) < 2^62: every product / 2^63 lies in (-1/2, 1/2) and rounds to 0.
    np.testing.assert_array_equal(requant(x, INT32_MAX, 63, rounding=rounding),
                                  expected(x, INT32_MAX, 63, rounding=rounding))
    np.testing.assert_array_equal(requant(x, INT32_MAX, 63, rounding=rounding), 0)


def test_products_near_2_63_are_exact():
    """x and bias at their extremes: |x + bias| reaches 2^32 and the product 2^63 - 2^32."""
    x = np.array([INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX], np.int32)
    bias = np.array([INT32_MIN, INT32_MAX, INT32_MAX, INT32_MIN], np.int32)
    for rounding in ROUNDINGS:
        for shift in (0, 1, 31, 32, 33, 62, 63):
            got = requant(x, INT32_MAX, np.full(4, shift), bias, rounding=rounding)
            want = expected(x, INT32_MAX, np.full(4, shift), bias, rounding=rounding)
            np.testing.assert_array_equal(got, want, err_msg=f"shift {shift} {rounding}")
    # s = -2^32, p = -2^63 + 2^32: p / 2^63 = -1 + 2^-31, nearest -1; p / 2^62 nearest -2.
    np.testing.assert_array_equal(requant(x[:1], INT32_MAX, 63, bias[:1]), [-1])
    np.testing.assert_array_equal(requant(x[:1], INT32_MAX, 62, bias[:1]), [-2])
    np.testing.assert_array_equal(requant(x[:2], INT32_MAX, 31, bias[:2]),
                                  [-128, 127])


def test_multiplier_zero_and_the_largest_multiplier():
    x = np.array([INT32_MIN, -7, 0, 7, INT32_MAX], np.int32)
    np.testing.assert_array_equal(requant(x, 0, 5, zero_point=-3), [-3] * 5)
    np.testing.assert_array_equal(requant(x, INT32_MAX, 31), [-128, -7, 0, 7, 127])
    # +-(2^31 - 1) / 2^31 lies 2^-31 inside +-1: no tie, whatever the rounding.
    np.testing.assert_array_equal(requant(np.array([1, -1], np.int32), INT32_MAX, 31,
                                          rounding="half_even"), [1, -1])


def test_saturation_at_both_ends_and_relu_with_a_zero_point():
    x = np.array([-1000, -129, -128, -10, 0, 10, 127, 128, 1000], np.int32)
    np.testing.assert_array_equal(requant(x, 1, 0), [-128, -128, -128, -10, 0, 10, 127, 127,
                                                     127])
    np.testing.assert_array_equal(requant(x, 1, 0, zero_point=5, relu=1),
                                  [5, 5, 5, 5, 5, 15, 127, 127, 127])
    np.testing.assert_array_equal(requant(x, 1, 0, zero_point=-20, relu=1),
                                  [-20, -20, -20, -20, -20, -10, 107, 108, 127])
    np.testing.assert_array_equal(requant(x, 1, 0, zero_point=127, relu=1), [127] * 9)
    np.testing.assert_array_equal(requant(x, 1, 0, zero_point=-128), [-128] * 4 + [-128, -118,
                                                                              -1, 0, 127])


def test_per_channel_parameters_run_along_the_last_axis():
    x = np.arange(-12, 12, dtype=np.int32).reshape(2, 3, 4) * 37
    multiplier = np.array([2**30, 2**31 - 1, 0, 1234567], np.int32)
    shift = np.array([31, 40, 3, 20], np.int32)
    bias = np.array([0, -5, 7, INT32_MAX], np.int32)
    for rounding in ROUNDINGS:
        got = requant(x, multiplier, shift, bias, rounding=rounding, zero_point=4, relu=1)
        np.testing.assert_array_equal(got, expected(x, multiplier, shift, bias,
                                                    rounding=rounding, zero_point=4, relu=1))
    mixed = requant(x, multiplier, 31)  # per-channel multiplier, per-tensor shift, no bias
    np.testing.assert_array_equal(mixed, expected(x, multiplier, 31))


def test_scalars_and_empty_tensors():
    assert requant(np.array(7), 1, 1, rounding="half_even").shape == ()
    assert requant(np.array(7), 1, 1, rounding="half_even") == 4
    empty = requant(np.zeros((2, 0), np.int32), np.zeros(0), np.zeros(0), np.zeros(0))
    assert empty.shape == (2, 0) and empty.dtype == np.int8


int32s = st.integers(INT32_MIN, INT32_MAX)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(x=st.lists(int32s, min_size=1, max_size=6), multiplier=st.integers(0, INT32_MAX),
       shift=st.integers(0, 63), bias=int32s, zero_point=st.integers(-128, 127),
       rounding=st.sampled_from(ROUNDINGS), relu=st.integers(0, 1))
def test_the_kernel_is_the_spec(x, multiplier, shift, bias, zero_point, rounding, relu):
    attrs = {"zero_point": zero_point, "rounding": rounding, "relu": relu}
    got = requant(np.array(x), multiplier, shift, bias, **attrs)
    np.testing.assert_array_equal(got, expected(np.array(x), multiplier, shift, bias, **attrs))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(odd=st.integers(0, 1023), shift=st.integers(1, 20),
       rounding=st.sampled_from(ROUNDINGS))
def test_exact_ties_follow_the_rounding(odd, shift, rounding):
    """x / 2^shift where x is an odd multiple of 2^(shift-1): a tie every time."""
    x = (2 * odd + 1) * 2 ** (shift - 1)
    got = requant(np.array([x, -x]), 1, shift, rounding=rounding, zero_point=0)
    np.testing.assert_array_equal(got, expected(np.array([x, -x]), 1, shift,
                                                rounding=rounding))


# --------------------------------------------------------------------------- inference


def _build(x_type=i32[2, 3], m_type=i32[()], s_type=i32[()], b_type=None, **attrs):
    g = GraphBuilder("r")
    args = [g.input("x", x_type), g.input("m", m_type), g.input("s", s_type)]
    if b_type is not None:
        args.append(g.input("b", b_type))
    g.output(requantize(*args, **attrs), name="y")
    return g.build()


def test_inference_gives_int8_of_x_shape_symbolic_dims_included():
    graph = _build(i32["batch", 3], i32[3], i32[()], i32[3])
    assert graph.outputs[0].type == TensorType(polyhal.DType.INT8, ("batch", 3))
    assert _build(i32[()]).outputs[0].type == i8[()]
    assert _build(i32["n", "c"], i32["c"], i32["c"]).outputs[0].type.shape == ("n", "c")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"m_type": i32[3, 1]}, r"input 1 \(multiplier\) int32\[3, 1\] must be a scalar"),
    ({"s_type": i32[4]}, r"input 2 \(shift\) has length 4 but x int32\[2, 3\] has 3 channels"),
    ({"b_type": i32[2]}, r"input 3 \(bias\) has length 2"),
    ({"x_type": i32[()], "m_type": i32[1]}, r"input 1 \(multiplier\) is 1-D \(per channel\) "
                                            "but x is a scalar"),
    ({"x_type": i8[2, 3]}, r"input 0 \(x\) has dtype int8; allowed: int32"),
    ({"m_type": i8[()]}, r"input 1 \(multiplier\) has dtype int8; allowed: int32"),
    ({"zero_point": 128}, r"attribute zero_point=128 must lie in \[-128, 127\]"),
    ({"zero_point": -129}, r"attribute zero_point=-129"),
    ({"rounding": "nearest"}, r"attribute rounding='nearest' must be one of 'half_up', "
                              "'half_even'"),
    ({"relu": 2}, r"attribute relu=2 must be 0 or 1"),
])
def test_inference_errors_name_the_input_or_attribute(kwargs, message):
    with pytest.raises(VerificationError, match=r"\(quant\.Requantize\): " + message):
        _build(**kwargs)


@pytest.mark.parametrize(("multiplier", "shift", "message"), [
    (-1, 3, r"input multiplier holds -1 at \[\]; multiplier must lie in \[0, 2147483647\]"),
    ([5, -7], 3, r"input multiplier holds -7 at \[1\]"),
    (1, 64, r"input shift holds 64 at \[\]; shift must lie in \[0, 63\]"),
    (1, [0, -1], r"input shift holds -1 at \[1\]"),
])
def test_constant_parameters_out_of_range_fail_verification(multiplier, shift, message):
    g = GraphBuilder("r")
    x = g.input("x", i32[4, 2])
    with pytest.raises(VerificationError, match=message):
        requantize(x, np.asarray(multiplier, np.int32), np.asarray(shift, np.int32))


@pytest.mark.parametrize(("multiplier", "shift", "message"), [
    (-1, 3, r"input multiplier holds -1"), (INT32_MIN, 3, r"holds -2147483648"),
    (1, 64, r"input shift holds 64"), (1, -1, r"input shift holds -1"),
    (1, INT32_MAX, r"input shift holds 2147483647"),
])
def test_run_time_parameters_out_of_range_are_execution_errors(multiplier, shift, message):
    graph = _build()
    with pytest.raises(ExecutionError, match=r"node 'requantize_\d+' \(quant\.Requantize\).*"
                       + message):
        run(graph, np.ones((2, 3), np.int32), np.int32(multiplier), np.int32(shift))


def test_a_per_channel_length_known_only_at_run_time_is_checked():
    graph = _build(i32["n", "c"], i32["k"], i32[()])
    with pytest.raises(ExecutionError, match=r"input 1 \(multiplier\) has length 2 but x "
                       r"int32\[2, 3\] has 3 channels along its last axis"):
        run(graph, np.ones((2, 3), np.int32), np.ones(2, np.int32), np.int32(0))


# --------------------------------------------------------------------------- the rest


def test_builder_takes_python_ints_as_int32_constants():
    g = GraphBuilder("r")
    y = requantize(g.input("x", i32[3]), 3, 2, 1, zero_point=-1, rounding="half_even",
                   relu=True)
    g.output(y, name="y")
    graph = g.build()
    assert [graph.constants[n].dtype for n in graph.nodes[0].inputs[1:]] == [np.int32] * 3
    assert dict(graph.nodes[0].attrs) == {"zero_point": -1, "rounding": "half_even", "relu": 1}
    np.testing.assert_array_equal(run(graph, np.array([-3, 2, 9], np.int32))["y"],
                                  [-1, 1, 7])


def test_the_op_is_registered_in_its_own_domain_and_is_not_differentiable():
    op = get_op("Requantize", "quant")
    assert op.qualified_name == "quant.Requantize" and "quant" in ops.domains()
    assert not op.differentiable and op.onnx_since is None and op.decompose is None
    assert [s.name for s in op.inputs] == ["x", "multiplier", "shift", "bias"]
    assert {a.name: a.default for a in op.attrs} == {"zero_point": 0, "rounding": "half_up",
                                                     "relu": 0}


def _float_chain():
    g = GraphBuilder("qdq")
    x = g.input("x", f32["batch", 3])
    xq = ops.quantize_linear(x, np.float32(0.1), np.int8(0))
    acc = ops.matmul_integer(xq, np.ones((3, 2), np.int8))
    g.output(ops.dequantize_linear(requantize(acc, 2**30, 31, relu=True), np.float32(0.2)),
             name="y")
    return g.build()


def test_gradients_through_the_integer_path_are_zero():
    gradient = autodiff.vjp(_float_chain())
    out = run(gradient, np.ones((2, 3), np.float32), np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(out["y"], np.full((2, 2), 3.0, np.float32))
    np.testing.assert_array_equal(out["grad_x"], np.zeros((2, 3), np.float32))
    with pytest.raises(IRError, match="no floating-point input"):
        autodiff.vjp(_build())


def test_onnx_export_names_the_domain_without_a_mapping():
    import onnx  # noqa: F401

    from polyhal.interop.onnx import to_onnx

    with pytest.raises(UnsupportedError, match=r"node 'requantize_\d+' \(quant\.Requantize\): "
                       r"the 'quant' domain has no ONNX mapping"):
        to_onnx(_float_chain())


def test_serialization_round_trip(tmp_path):
    graph = _float_chain()
    polyhal.save(graph, tmp_path / "q.json")
    loaded = polyhal.load(tmp_path / "q.json")
    assert str(loaded) == str(graph)
    x = np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_array_equal(run(loaded, x)["y"], run(graph, x)["y"])


def test_the_op_reference_documents_the_domain():
    from polyhal.ops.reference_doc import render_op_reference

    text = render_op_reference()
    assert "## Domain `quant` (1 ops)" in text and "### quant.Requantize" in text


# --------------------------------------------------------------------------- multiplier


@pytest.mark.parametrize(("scale", "pair"), [
    (1.0, (2**30, 30)), (0.5, (2**30, 31)), (0.75, (3 * 2**29, 31)),
    (2.0**-33, (2**30, 63)), (2**31 - 1, (2**31 - 1, 0)), (1 - 2.0**-40, (2**30, 30)),
])
def test_multiplier_and_shift_of_exact_scales(scale, pair):
    assert multiplier_and_shift(scale) == pair


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.floats(2.0**-33, 2.0**31 - 1, allow_nan=False, allow_infinity=False))
def test_multiplier_and_shift_are_within_half_a_step(scale):
    multiplier, shift = multiplier_and_shift(scale)
    assert 2**30 <= multiplier < 2**31 and 0 <= shift <= 63
    assert abs(multiplier / 2**shift - scale) <= 2.0 ** (-shift - 1) * (1 + 1e-12)


def test_tiny_and_impossible_scales():
    assert multiplier_and_shift(2.0**-40) == (2**23, 63)
    assert multiplier_and_shift(2.0**-70) == (0, 63)
    for bad in (0.0, -1.0, float("nan"), float("inf"), 2.0**31):
        with pytest.raises(IRError, match="requantize scale"):
            multiplier_and_shift(bad)
