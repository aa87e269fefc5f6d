"""ConvTranspose: the reference kernel against a direct nested-loop computation
and against the adjoint of Conv, ONNX's output-shape and pad formulas, symbolic
shape inference, and errors that name the node and the op."""

from __future__ import annotations

import time
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyhal.errors import ExecutionError, LimitExceededError, VerificationError
from polyhal.ir import DType, Limits, use_limits
from polyhal.ir import dims as D
from polyhal.ops import get_op
from tests.helpers import infer_type, random_array, run_op

F16, BF16, F32, F64, I8 = DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT8

TOLERANCE = {
    F16: {"rtol": 1e-2, "atol": 2e-2},
    BF16: {"rtol": 3e-2, "atol": 1e-1},
    F32: {"rtol": 1e-5, "atol": 1e-5},
    F64: {"rtol": 1e-12, "atol": 1e-12},
}


def check(out: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    assert out.dtype == dtype.numpy
    assert out.shape == expected.shape, (out.shape, expected.shape)
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                               equal_nan=True, **TOLERANCE[dtype])


def onnx_pads(spatial, kernel, strides, dilations, output_padding, auto_pad="NOTSET",
              pads=None, output_shape=None):
    """``(pad_begin, output_size)`` per axis, written out from the ONNX ConvTranspose doc."""
    n = len(spatial)
    result = []
    for i in range(n):
        full = (strides[i] * (spatial[i] - 1) + output_padding[i]
                + (kernel[i] - 1) * dilations[i] + 1)
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = output_shape[i] if output_shape is not None else spatial[i] * strides[i]
            total = full - out
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            given = pads or [0] * (2 * n)
            begin = 0 if auto_pad == "VALID" else given[i]
            end = 0 if auto_pad == "VALID" else given[n + i]
            out = full - begin - end
        result.append((begin, out))
    return result


def conv_transpose_ref(x, w, b=None, strides=None, dilations=None, group=1,
                       output_padding=None, **pad_attrs):
    """Direct nested loops in float64: every input element times every kernel tap,
    added at ``i * stride + k * dilation - pad_begin`` when that lands in the output."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n_sp = x.ndim - 2
    strides = strides or [1] * n_sp
    dilations = dilations or [1] * n_sp
    output_padding = output_padding or [0] * n_sp
    spatial, kernel = x.shape[2:], w.shape[2:]
    geometry = onnx_pads(spatial, kernel, strides, dilations, output_padding, **pad_attrs)
    (batch, channels), m_per_group = x.shape[:2], w.shape[1]
    c_per_group = channels // group
    y = np.zeros((batch, m_per_group * group, *[out for _, out in geometry]))
    for n, c in product(range(batch), range(channels)):
        g = c // c_per_group
        for i in product(*map(range, spatial)):
            for m, k in product(range(m_per_group), product(*map(range, kernel))):
                pos = [i[a] * strides[a] + k[a] * dilations[a] - geometry[a][0]
                       for a in range(n_sp)]
                if all(0 <= p < geometry[a][1] for a, p in enumerate(pos)):
                    y[(n, g * m_per_group + m, *pos)] += x[(n, c, *i)] * w[(c, m, *k)]
    if b is not None:
        y += b.astype(np.float64).reshape(1, -1, *[1] * n_sp)
    return y


def run_ct(x, w, b=None, **attrs):
    return run_op("ConvTranspose", [x, w] + ([b] if b is not None else []), attrs)[0]


# --------------------------------------------------------------------------- values

CASES = [
    # x shape, w shape, attrs, with bias
    ((1, 1, 3), (1, 1, 3), {}, False),
    ((2, 2, 4), (2, 3, 2), {"strides": [2]}, True),
    ((1, 2, 4), (2, 2, 3), {"strides": [3], "pads": [1, 2], "output_padding": [2]}, True),
    ((1, 1, 5), (1, 2, 2), {"dilations": [3], "pads": [2, 0]}, False),
    ((2, 4, 3, 3), (4, 3, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1]}, True),
    ((1, 3, 3, 4), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "dilations": [1, 2],
                                  "output_padding": [1, 1]}, True),  # depthwise
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 2), {"strides": [1, 2, 2], "pads": [0, 1, 0, 1, 0, 1]}, True),
    ((1, 1, 3), (1, 1, 3), {"auto_pad": "VALID", "strides": [2]}, False),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, True),
    ((1, 1, 3), (1, 1, 1), {"auto_pad": "SAME_UPPER", "strides": [3]}, False),  # total -2
    ((1, 1, 3), (1, 1, 2), {"auto_pad": "SAME_LOWER", "strides": [2],
                            "output_padding": [1]}, True),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}, False),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [7, 9],
                                  "output_padding": [1, 1]}, True),
    ((1, 1, 4), (1, 1, 2), {"strides": [2], "output_shape": [11], "pads": [5, 5]}, False),
    ((1, 1, 4), (1, 1, 3), {"strides": [2], "output_shape": [6],
                            "auto_pad": "SAME_UPPER"}, False),
]


@pytest.mark.parametrize(("xs", "ws", "attrs", "bias"), CASES)
def test_conv_transpose_matches_loops_float64(xs, ws, attrs, bias):
    x, w = random_array(F64, xs, seed=1), random_array(F64, ws, seed=2)
    b = random_array(F64, (ws[1] * attrs.get("group", 1),), seed=3) if bias else None
    expected = conv_transpose_ref(x, w, b, strides=attrs.get("strides"),
                                  dilations=attrs.get("dilations"), group=attrs.get("group", 1),
                                  output_padding=attrs.get("output_padding"),
                                  **{k: attrs[k] for k in ("auto_pad", "pads", "output_shape")
                                     if k in attrs})
    check(run_ct(x, w, b, **attrs), expected, F64)


def test_conv_transpose_hand_values():
    x = np.array([[[1.0, 2.0, 3.0]]])
    w = np.array([[[1.0, 10.0]]])
    np.testing.assert_array_equal(run_ct(x, w), [[[1.0, 12.0, 23.0, 30.0]]])
    np.testing.assert_array_equal(run_ct(x, w, strides=[2]), [[[1, 10, 2, 20, 3, 30]]])
    # pads crop the full output; a bias reaches every output position
    np.testing.assert_array_equal(run_ct(x, w, np.array([0.5]), strides=[2], pads=[1, 2]),
                                  [[[10.5, 2.5, 20.5]]])
    # output_padding adds one position at the end, holding only the bias
    np.testing.assert_array_equal(run_ct(x, w, np.array([0.5]), strides=[2],
                                         output_padding=[1]),
                                  [[[1.5, 10.5, 2.5, 20.5, 3.5, 30.5, 0.5]]])


@pytest.mark.parametrize(("size", "k", "s", "d", "op", "attrs", "begin", "out"), [
    # explicit pads and VALID
    (4, 3, 2, 1, 0, {"pads": [1, 2]}, 1, 6),
    (4, 3, 2, 1, 1, {"auto_pad": "VALID"}, 0, 10),
    # SAME: O = D * stride, the odd pad at the end (UPPER) or the beginning (LOWER)
    (3, 4, 2, 1, 0, {"auto_pad": "SAME_UPPER"}, 1, 6),    # total 2
    (3, 3, 2, 1, 0, {"auto_pad": "SAME_UPPER"}, 0, 6),    # total 1
    (3, 3, 2, 1, 0, {"auto_pad": "SAME_LOWER"}, 1, 6),
    (3, 3, 2, 1, 1, {"auto_pad": "SAME_LOWER"}, 1, 6),    # total 2: output_padding enters it
    (3, 1, 3, 1, 0, {"auto_pad": "SAME_LOWER"}, -1, 9),   # total -2: zeros on both sides
    # output_shape: the same split, output_padding counts, pads are ignored
    (3, 3, 3, 1, 0, {"output_shape": [10]}, 0, 10),       # total -1: a zero at the end
    (3, 3, 3, 1, 1, {"output_shape": [10]}, 0, 10),       # total 0
    (3, 3, 3, 1, 0, {"output_shape": [6], "pads": [0, 9]}, 2, 6),
    (3, 3, 3, 1, 0, {"output_shape": [6], "auto_pad": "SAME_UPPER"}, 1, 6),
])
def test_onnx_output_size_and_pad_formulas(size, k, s, d, op, attrs, begin, out):
    assert onnx_pads([size], [k], [s], [d], [op], **attrs) == [(begin, out)]
    x, w = random_array(F64, (1, 2, size), seed=4), random_array(F64, (2, 3, k), seed=5)
    got = run_ct(x, w, strides=[s], dilations=[d], output_padding=[op], **attrs)
    assert got.shape == (1, 3, out)
    # the output is the window [begin, begin + out) of the full output, zeros outside it
    full = run_ct(x, w, strides=[s], dilations=[d], output_padding=[op])
    positions = np.arange(begin, begin + out)
    inside = (positions >= 0) & (positions < full.shape[2])
    expected = np.zeros_like(got)
    expected[..., inside] = full[..., positions[inside]]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64])
def test_conv_transpose_dtypes(dtype):
    x, w = random_array(dtype, (1, 4, 3, 3), seed=6, low=-1, high=1), random_array(
        dtype, (4, 1, 2, 3), seed=7, low=-1, high=1)
    b = random_array(dtype, (2,), seed=8)
    attrs = {"group": 2, "strides": [2, 1], "pads": [0, 1, 1, 0]}
    got = run_ct(x, w, b, **attrs)
    check(got, conv_transpose_ref(x, w, b, strides=[2, 1], group=2, pads=[0, 1, 1, 0]), dtype)


def test_conv_transpose_special_values_propagate():
    x = np.array([[[1.0, np.nan, 2.0]]], np.float32)
    got = run_ct(x, np.ones((1, 1, 2), np.float32), strides=[2])
    np.testing.assert_array_equal(np.isnan(got[0, 0]), [False, False, True, True, False, False])


def test_conv_transpose_empty_batch_and_kernel_shape_attr():
    x, w = np.zeros((0, 2, 3), np.float32), random_array(F32, (2, 3, 2))
    got = run_ct(x, w, kernel_shape=[2], strides=[2])
    assert got.shape == (0, 3, 6) and got.dtype == np.float32


def test_conv_transpose_full_output_respects_limits():
    x, w = random_array(F32, (1, 1, 10)), random_array(F32, (1, 1, 3))
    with use_limits(Limits(max_elements=100)), pytest.raises(LimitExceededError):
        run_ct(x, w, strides=[20])  # 183 elements


def test_conv_transpose_is_fast_enough():
    x, w = random_array(F32, (2, 16, 32, 32)), random_array(F32, (16, 8, 3, 3))
    start = time.perf_counter()
    assert run_ct(x, w, strides=[2, 2], pads=[1, 1, 0, 0]).shape == (2, 8, 64, 64)
    assert time.perf_counter() - start < 0.5


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_conv_transpose_is_the_adjoint_of_conv(data):
    """<Conv(x, W), y> = <x, ConvTranspose(y, W)> with the same window attributes,
    output_padding chosen so that ConvTranspose gives back x's shape."""
    n_sp = data.draw(st.integers(1, 2), label="spatial axes")
    group = data.draw(st.sampled_from([1, 2]), label="group")
    c, m = group * data.draw(st.integers(1, 2)), group * data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(n_sp)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(n_sp)]
    dilations = [data.draw(st.integers(1, 2)) for _ in range(n_sp)]
    pads = [data.draw(st.integers(0, 2)) for _ in range(2 * n_sp)]
    spatial, outs = [], []
    for i in range(n_sp):
        reach = (kernel[i] - 1) * dilations[i] + 1
        size = data.draw(st.integers(max(1, reach - pads[i] - pads[n_sp + i]), 6))
        spatial.append(size)
        outs.append((size + pads[i] + pads[n_sp + i] - reach) // strides[i] + 1)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    x = rng.standard_normal((2, c, *spatial))
    w = rng.standard_normal((m, c // group, *kernel))
    y = rng.standard_normal((2, m, *outs))
    output_padding = [spatial[i] - (strides[i] * (outs[i] - 1) + (kernel[i] - 1) * dilations[i]
                                    + 1 - pads[i] - pads[n_sp + i]) for i in range(n_sp)]
    window = {"strides": strides, "dilations": dilations, "pads": pads, "group": group}
    forward = run_op("Conv", [x, w], window)[0]
    backward = run_ct(y, w, output_padding=output_padding, **window)
    assert backward.shape == x.shape
    np.testing.assert_allclose(np.vdot(forward, y), np.vdot(x, backward), rtol=1e-10,
                               atol=1e-10)


# --------------------------------------------------------------------------- inference


def evaluate(t, **bindings):
    return tuple(D.evaluate(d, bindings) for d in t.shape)


@pytest.mark.parametrize(("attrs", "w_shape", "expected"), [
    ({}, (3, 8, 3, 3), lambda h, w: (8, h + 2, w + 2)),
    ({"strides": [2, 3], "pads": [1, 0, 1, 2]}, (3, 4, 3, 2), lambda h, w: (4, 2 * h - 1,
                                                                           3 * w - 3)),
    ({"strides": [2, 2], "output_padding": [1, 0], "dilations": [1, 2]}, (3, 2, 2, 2),
     lambda h, w: (2, 2 * h + 1, 2 * w + 1)),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 3]}, (3, 4, 3, 3), lambda h, w: (4, 2 * h,
                                                                               3 * w)),
    ({"auto_pad": "VALID", "group": 3}, (3, 2, 1, 2), lambda h, w: (6, h, w + 1)),
])
def test_conv_transpose_infer_symbolic(attrs, w_shape, expected):
    t = infer_type("ConvTranspose", [F32["batch", 3, "h", "w"], F32[w_shape]], attrs)
    assert t.dtype is F32 and t.shape[0] == "batch"
    assert not any(isinstance(d, str) and d.startswith("_") for d in t.shape)
    for h, w in ((3, 4), (5, 2)):
        assert evaluate(t, batch=2, h=h, w=w) == (2, *expected(h, w))


def test_conv_transpose_infer_output_shape_and_fresh_dims():
    t = infer_type("ConvTranspose", [F32["b", 2, "h"], F32[2, 3, 4]],
                   {"output_shape": [17], "strides": [4]})
    assert t == F32["b", 3, 17]
    t = infer_type("ConvTranspose", [F32[1, 2, 5], F32[2, 3, "k"]])
    assert t.shape[:2] == (1, 3) and t.shape[2].startswith("_")
    t = infer_type("ConvTranspose", [F32[1, 2, 5], F32[2, 3, "k"]], {"auto_pad": "SAME_LOWER"})
    assert t == F32[1, 3, 5]
    t = infer_type("ConvTranspose", [F32[1, 4, 5], F32[4, "m", 3]], {"group": 2})
    assert t.shape[1] == "2*m"


@pytest.mark.parametrize(("x", "w", "b", "attrs", "message"), [
    (F32[4, 5], F32[4, 2], None, {}, "rank >= 3"),
    (F32[1, 4, 5], F32[4, 2, 3, 3], None, {}, "rank"),
    (F32[1, 4, 5], F32[3, 2, 3], None, {}, "4 channels but W"),
    (F32[1, 3, 5], F32[3, 2, 3], None, {"group": 2}, "group=2 does not divide"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"group": 0}, "group=0"),
    (F32[1, 4, 5], F32[4, 2, 3], F32[3], {}, r"input B must have shape \[2\]"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"kernel_shape": [2]}, "kernel_shape"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"auto_pad": "SAME"}, "auto_pad"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"auto_pad": "VALID", "pads": [0, 0]}, "pads"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"strides": [0]}, "strides"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"pads": [1, -1]}, "pads"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"output_padding": [1]}, "output_padding.*stride 1"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"strides": [2], "output_padding": [2]},
     "output_padding"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"output_padding": [0, 0]}, "output_padding"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"output_shape": [3, 3]}, "output_shape"),
    (F32[1, 4, 5], F32[4, 2, 3], None, {"output_shape": [-1]}, "output_shape"),
    (F32[1, 4, 2], F32[4, 2, 1], None, {"pads": [2, 1]}, "remove more than the 2 positions"),
    (F32[1, 4, 0], F32[4, 2, 1], None, {}, "empty"),
    (I8[1, 1, 3], I8[1, 1, 1], None, {}, "dtype"),
])
def test_conv_transpose_infer_errors(x, w, b, attrs, message):
    with pytest.raises(VerificationError, match=rf"core.ConvTranspose.*{message}"):
        infer_type("ConvTranspose", [x, w] + ([b] if b else []), attrs)


def test_conv_transpose_run_time_errors_name_node_and_op():
    from polyhal.ir import GraphBuilder
    from polyhal.reference import run

    g = GraphBuilder("g")
    y = g.op("ConvTranspose", g.input("x", F32[1, 1, "n"]), g.input("w", F32[1, 1, 2]),
             pads=[2, 2])
    g.output(y)
    with pytest.raises(ExecutionError, match=r"core.ConvTranspose.*pads 2 and 2 remove"):
        run(g.build(), np.ones((1, 1, 1), np.float32), np.ones((1, 1, 2), np.float32))


def test_schema_and_builder_function():
    op = get_op("ConvTranspose")
    assert op.differentiable and op.onnx_since == 22
    assert [i.name for i in op.inputs] == ["X", "W", "B"] and op.inputs[2].optional
    from polyhal import ops
    from polyhal.ir import GraphBuilder

    g = GraphBuilder("g")
    y = ops.conv_transpose(g.input("x", F32["n", 2, 5]), np.ones((2, 3, 2), np.float32),
                           strides=[2])
    assert y.type == F32["n", 3, 10]
