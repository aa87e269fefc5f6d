"""Tests of the neural-network ops (convolution, pooling, normalization):
reference kernels against independent nested-loop or plain-numpy
expectations, type/shape inference (symbolic dims, errors), decompositions."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest

import polyhal.ops.normalization  # noqa: F401  (registers; until sdk/ops/__init__ imports it)
from polyhal.errors import LimitExceededError, UnsupportedError, VerificationError
from polyhal.ir import DType, Limits, TensorType, use_limits
from polyhal.ops import get_op
from polyhal.ops.infer import InferContext
from tests.helpers import infer_type, random_array, run_decomposed, run_op

F16, BF16, F32, F64 = DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64
I8, U8, I64, B8 = DType.INT8, DType.UINT8, DType.INT64, DType.BOOL

TOLERANCE = {
    F16: {"rtol": 1e-2, "atol": 2e-2},
    BF16: {"rtol": 3e-2, "atol": 1e-1},
    F32: {"rtol": 1e-5, "atol": 1e-5},
    F64: {"rtol": 1e-12, "atol": 1e-12},
}


def dtypes_of(op: str, var: str = "T") -> list[DType]:
    """The dtypes type variable ``var`` of ``op`` admits, in a stable order."""
    return sorted(get_op(op).type_vars[var], key=lambda d: d.value)


def check(out: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    """``out`` has ``dtype``, the expected shape, and the expected values."""
    expected = np.asarray(expected)
    assert out.dtype == dtype.numpy
    assert out.shape == expected.shape
    if dtype.is_float:
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                   equal_nan=True, **TOLERANCE[dtype])
    else:
        np.testing.assert_array_equal(out, expected)


def wide(a: np.ndarray) -> np.ndarray:
    """float64 copy (exact for every polyhal float and small int) for expectations."""
    return a.astype(np.float64)


def out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil: int = 0) -> int:
    """The ONNX output-size formula for explicit pads."""
    span = size + pb + pe - (d * (k - 1) + 1)
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + pb:
        out -= 1
    return out


def conv_ref(x, w, b=None, strides=None, pads=None, dilations=None, group=1):
    """Direct nested-loop convolution in float64, any number of spatial axes."""
    x, w = wide(x), wide(w)
    n_sp = x.ndim - 2
    strides = strides or [1] * n_sp
    dilations = dilations or [1] * n_sp
    pads = pads or [0] * (2 * n_sp)
    (batch, channels), filters, kernel = x.shape[:2], w.shape[0], w.shape[2:]
    c_per_group, m_per_group = channels // group, filters // group
    outs = [out_size(x.shape[2 + i], kernel[i], strides[i], dilations[i], pads[i],
                     pads[n_sp + i]) for i in range(n_sp)]
    y = np.zeros((batch, filters, *outs))
    for n, m in product(range(batch), range(filters)):
        g = m // m_per_group
        for o in product(*map(range, outs)):
            acc = 0.0 if b is None else float(b[m])
            for c in range(c_per_group):
                for k in product(*map(range, kernel)):
                    pos = [o[i] * strides[i] - pads[i] + k[i] * dilations[i] for i in range(n_sp)]
                    if all(0 <= p < x.shape[2 + i] for i, p in enumerate(pos)):
                        acc += x[(n, g * c_per_group + c, *pos)] * w[(m, c, *k)]
            y[(n, m, *o)] = acc
    return y


def pool_ref(x, kind, kernel, strides=None, pads=None, dilations=None, ceil_mode=0,
             count_include_pad=0, storage_order=0):
    """Direct nested-loop max/average pooling; for max also the Indices."""
    n_sp = x.ndim - 2
    strides = strides or [1] * n_sp
    dilations = dilations or [1] * n_sp
    pads = pads or [0] * (2 * n_sp)
    spatial = x.shape[2:]
    outs = [out_size(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[n_sp + i],
                     ceil_mode) for i in range(n_sp)]
    y = np.zeros((*x.shape[:2], *outs))
    indices = np.zeros(y.shape, dtype=np.int64)
    for n, c in product(range(x.shape[0]), range(x.shape[1])):
        for o in product(*map(range, outs)):
            best, best_index, total, count = None, -1, 0.0, 0
            for k in product(*map(range, kernel)):
                pos = [o[i] * strides[i] - pads[i] + k[i] * dilations[i] for i in range(n_sp)]
                inside = all(0 <= p < spatial[i] for i, p in enumerate(pos))
                in_padded = all(-pads[i] <= p < spatial[i] + pads[n_sp + i]
                                for i, p in enumerate(pos))
                if count_include_pad and in_padded and not inside:
                    count += 1
                if not inside:
                    continue
                v = float(x[(n, c, *pos)])
                total, count = total + v, count + 1
                if best is None or (not math.isnan(best) and (math.isnan(v) or v > best)):
                    order = "C" if storage_order == 0 else "F"
                    best = v
                    best_index = ((n * x.shape[1] + c) * math.prod(spatial)
                                  + int(np.ravel_multi_index(pos, spatial, order=order)))
            if kind == "max":
                y[(n, c, *o)], indices[(n, c, *o)] = best, best_index
            else:
                y[(n, c, *o)] = total / count
    return (y, indices) if kind == "max" else y


def infer_direct(op: str, inputs: list[TensorType], attrs: dict, num_outputs: int = 1):
    """Run ``op``'s inference on types whose dims may be expressions like ``2*h``."""
    opdef = get_op(op)
    full = {a.name: a.default for a in opdef.attrs} | attrs
    return opdef.infer(InferContext("n", opdef, list(inputs), full, num_outputs))


# --- Conv -------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, attrs, with bias
    ((1, 1, 6), (1, 1, 3), {}, False),
    ((2, 4, 7), (6, 2, 3), {"group": 2, "strides": [2], "pads": [2, 1]}, True),
    ((1, 2, 8), (3, 2, 2), {"dilations": [3], "pads": [0, 4]}, True),
    ((2, 3, 5, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ((1, 4, 6, 7), (4, 2, 2, 3), {"group": 2, "dilations": [2, 1], "strides": [1, 2]}, False),
    ((1, 4, 7, 7), (8, 1, 3, 2), {"group": 4, "strides": [2, 2], "pads": [0, 2, 1, 0],
                                  "dilations": [2, 2]}, True),  # depthwise, 2 per channel
    ((1, 2, 4, 4, 3), (2, 2, 2, 2, 2), {"pads": [1, 0, 0, 0, 1, 1]}, True),
]


@pytest.mark.parametrize(("xs", "ws", "attrs", "bias"), CONV_CASES)
def test_conv_matches_loops_float64(xs, ws, attrs, bias):
    x, w = random_array(F64, xs, seed=1), random_array(F64, ws, seed=2)
    inputs = [x, w] + ([random_array(F64, (ws[0],), seed=3)] if bias else [])
    got = run_op("Conv", inputs, attrs)[0]
    expected = conv_ref(*inputs, strides=attrs.get("strides"), pads=attrs.get("pads"),
                        dilations=attrs.get("dilations"), group=attrs.get("group", 1))
    check(got, expected, F64)


def test_conv_hand_values():
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]])
    w = np.array([[[1.0, 0.0, -1.0]]])
    np.testing.assert_array_equal(run_op("Conv", [x, w])[0], [[[-2.0, -2.0]]])
    got = run_op("Conv", [x, w, np.array([10.0])], {"pads": [1, 0], "strides": [2]})[0]
    np.testing.assert_array_equal(got, [[[8.0, 8.0]]])  # windows [0,1,2]->-2, [2,3,4]->-2


@pytest.mark.parametrize("dtype", dtypes_of("Conv"))
def test_conv_dtypes(dtype):
    x, w = random_array(dtype, (1, 4, 5, 5), seed=4), random_array(dtype, (2, 2, 3, 3), seed=5)
    b = random_array(dtype, (2,), seed=6)
    attrs = {"group": 2, "pads": [1, 0, 0, 1], "strides": [2, 1]}
    got = run_op("Conv", [x, w, b], attrs)[0]
    check(got, conv_ref(x, w, b, strides=[2, 1], pads=[1, 0, 0, 1], group=2), dtype)


@pytest.mark.parametrize(("auto_pad", "size", "k", "s", "d", "pads"), [
    ("SAME_UPPER", 5, 2, 2, 1, [0, 1]),   # out 3, total pad 1: extra at the end
    ("SAME_LOWER", 5, 2, 2, 1, [1, 0]),   # ... or at the beginning
    ("SAME_UPPER", 5, 3, 1, 1, [1, 1]),
    ("SAME_LOWER", 6, 2, 1, 2, [1, 1]),   # dilated kernel spans 3
    ("SAME_UPPER", 5, 1, 3, 1, [0, 0]),   # total pad would be negative: clamped to 0
    ("VALID", 7, 3, 2, 1, [0, 0]),
])
def test_conv_auto_pad(auto_pad, size, k, s, d, pads):
    x, w = random_array(F64, (1, 2, size), seed=7), random_array(F64, (3, 2, k), seed=8)
    got = run_op("Conv", [x, w], {"auto_pad": auto_pad, "strides": [s], "dilations": [d]})[0]
    check(got, conv_ref(x, w, strides=[s], pads=pads, dilations=[d]), F64)
    if auto_pad.startswith("SAME"):
        assert got.shape[2] == -(-size // s)


def test_conv_empty_batch_and_kernel_shape_attr():
    x, w = np.zeros((0, 2, 5), np.float32), random_array(F32, (3, 2, 2))
    got = run_op("Conv", [x, w], {"kernel_shape": [2]})[0]
    assert got.shape == (0, 3, 4) and got.dtype == np.float32


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("batch", [1, 0])
def test_a_huge_pool_kernel_is_refused_before_anything_is_allocated(op, batch):
    import tracemalloc

    x = random_array(F32, (batch, 1, 5, 5))
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceededError, match=rf"{op}: windows"):
            run_op(op, [x], {"kernel_shape": [2**31, 3], "auto_pad": "SAME_UPPER"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_conv_window_buffer_respects_limits():
    # output (51 elements) and input are small, the gathered windows (51 * 50) are not
    x, w = random_array(F32, (1, 1, 100)), random_array(F32, (1, 1, 50))
    with use_limits(Limits(max_elements=1000)), pytest.raises(LimitExceededError, match="windows"):
        run_op("Conv", [x, w])


def test_conv_is_fast_enough():
    import time

    x, w = random_array(F32, (1, 3, 32, 32)), random_array(F32, (8, 3, 3, 3))
    start = time.perf_counter()
    assert run_op("Conv", [x, w], {"pads": [1, 1, 1, 1]})[0].shape == (1, 8, 32, 32)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(("attrs", "w_shape", "expected"), [
    ({}, (8, 3, 3, 3), ("batch", 8, "h-2", "w-2")),
    ({"pads": [1, 1, 1, 1]}, (8, 3, 3, 3), ("batch", 8, "h", "w")),
    ({"pads": [0, 2, 1, 0], "dilations": [2, 1]}, (8, 3, 3, 3), ("batch", 8, "h-3", "w")),
    ({"auto_pad": "SAME_UPPER"}, (8, 3, 3, 3), ("batch", 8, "h", "w")),
    ({"auto_pad": "VALID"}, (4, 3, 1, 2), ("batch", 4, "h", "w-1")),
])
def test_conv_infer_symbolic(attrs, w_shape, expected):
    t = infer_type("Conv", [F32["batch", 3, "h", "w"], F32[w_shape]], attrs)
    assert t == F32[expected]


def test_conv_infer_unexpressible_dims_are_fresh():
    t = infer_type("Conv", [F32["batch", 3, "h", 9], F32[8, 3, 3, 3]], {"strides": [2, 2]})
    assert t.shape[:2] == ("batch", 8) and t.shape[3] == 4
    assert isinstance(t.shape[2], str) and t.shape[2].startswith("_")
    t = infer_type("Conv", [F32[1, 3, 9], F32[8, 3, "k"]])
    assert isinstance(t.shape[2], str) and t.shape[2].startswith("_")


def test_conv_infer_exact_division():
    t = infer_direct("Conv", [F32["b", 3, "2*h"], F32[8, 3, 2]], {"strides": (2,)})
    assert t == F32["b", 8, "h"]
    t = infer_direct("Conv", [F32["b", 3, "2*h"], F32[8, 3, 2]],
                     {"strides": (2,), "auto_pad": "SAME_LOWER"})
    assert t == F32["b", 8, "h"]


@pytest.mark.parametrize(("x", "w", "b", "attrs", "message"), [
    (F32[1, 4, 5], F32[2, 3, 3], None, {}, "channels"),
    (F32[1, 4, 5], F32[3, 2, 3], None, {"group": 2}, "group=2"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"group": 0}, "group"),
    (F32[1, 4, 5], F32[2, 4, 3, 3], None, {}, "rank"),
    (F32[4, 5], F32[2, 4], None, {}, "rank >= 3"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"kernel_shape": [2]}, "kernel_shape"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"strides": [1, 1]}, "strides"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"strides": [0]}, "strides"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"dilations": [0]}, "dilations"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"pads": [1]}, "pads"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"pads": [-1, 0]}, "pads"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"auto_pad": "SAME"}, "auto_pad"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"auto_pad": "VALID", "pads": [0, 0]}, "pads"),
    (F32[1, 4, 5], F32[2, 4, 3], F32[3], {}, "B"),
    (F32[1, 4, 2], F32[2, 4, 3], None, {}, "kernel size"),
    (F32[1, 4, 5], F32[2, 4, 3], None, {"dilations": [3]}, "kernel size"),
])
def test_conv_infer_errors(x, w, b, attrs, message):
    with pytest.raises(VerificationError, match=message):
        infer_type("Conv", [x, w] + ([b] if b else []), attrs)


def test_conv_rejects_int():
    with pytest.raises(VerificationError, match="dtype"):
        infer_type("Conv", [I8[1, 1, 3], I8[1, 1, 1]])


# --- MaxPool / AveragePool --------------------------------------------------

POOL_CASES = [
    ((1, 1, 7), {"kernel_shape": [3]}),
    ((2, 2, 7), {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}),
    ((1, 2, 8), {"kernel_shape": [3], "strides": [2], "pads": [2, 1], "ceil_mode": 1}),
    ((1, 2, 6), {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1}),
    ((1, 2, 9), {"kernel_shape": [2], "dilations": [3], "pads": [1, 0]}),
    ((2, 3, 5, 6), {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 2]}),
    ((1, 2, 6, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "dilations": [1, 2],
                    "pads": [1, 1, 2, 1], "ceil_mode": 1}),
    ((1, 1, 4, 3, 3), {"kernel_shape": [2, 2, 2], "pads": [1, 0, 0, 0, 1, 1]}),
]


def _ref_kwargs(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("strides", "pads", "dilations", "ceil_mode",
                                  "count_include_pad", "storage_order") if k in attrs}


@pytest.mark.parametrize(("shape", "attrs"), POOL_CASES)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_matches_loops(shape, attrs, storage_order):
    x = random_array(F64, shape, seed=11)
    attrs = {**attrs, "storage_order": storage_order}
    y, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    ref_y, ref_i = pool_ref(x, "max", attrs["kernel_shape"], **_ref_kwargs(attrs))
    check(y, ref_y, F64)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, ref_i)


def test_max_pool_indices_hand_values():
    x = np.arange(2 * 2 * 3 * 4, dtype=np.float32).reshape(2, 2, 3, 4)
    y, row = run_op("MaxPool", [x], {"kernel_shape": [2, 2]}, num_outputs=2)
    _, col = run_op("MaxPool", [x], {"kernel_shape": [2, 2], "storage_order": 1},
                    num_outputs=2)
    # batch 1, channel 1 starts at flat 36; each window's max is its bottom-right corner
    np.testing.assert_array_equal(y[1, 1], [[41, 42, 43], [45, 46, 47]])
    np.testing.assert_array_equal(row[1, 1], [[41, 42, 43], [45, 46, 47]])
    np.testing.assert_array_equal(col[1, 1], [[40, 43, 46], [41, 44, 47]])  # h + w * 3


@pytest.mark.parametrize("dtype", dtypes_of("MaxPool"))
def test_max_pool_dtypes(dtype):
    x = random_array(dtype, (1, 2, 5, 5), seed=12, low=-100, high=100)
    attrs = {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 1, 0, 0]}
    y, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    ref_y, ref_i = pool_ref(x, "max", [2, 3], **_ref_kwargs(attrs))
    check(y, ref_y.astype(dtype.numpy), dtype)  # max is exact in every dtype
    np.testing.assert_array_equal(indices, ref_i)


def test_max_pool_int_padding_never_wins():
    x = np.full((1, 1, 3), -128, np.int8)
    y, indices = run_op("MaxPool", [x], {"kernel_shape": [2], "pads": [1, 1]}, num_outputs=2)
    np.testing.assert_array_equal(y, [[[-128] * 4]])
    np.testing.assert_array_equal(indices, [[[0, 0, 1, 2]]])


def test_max_pool_nan_propagates():
    x = np.array([[[1.0, np.nan, 3.0, 0.0]]], np.float32)
    y, indices = run_op("MaxPool", [x], {"kernel_shape": [2]}, num_outputs=2)
    np.testing.assert_array_equal(y, [[[np.nan, np.nan, 3.0]]])
    np.testing.assert_array_equal(indices, [[[1, 1, 2]]])


def test_pools_empty_window():
    # dilation 3 over 2 elements with pads (1, 1): the window reads positions -1 and 2
    x = np.array([[[5.0, 6.0]]], np.float32)
    attrs = {"kernel_shape": [2], "dilations": [3], "pads": [1, 1]}
    y, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    np.testing.assert_array_equal(y, [[[-np.inf]]])
    np.testing.assert_array_equal(indices, [[[-1]]])
    assert np.isnan(run_op("AveragePool", [x], attrs)[0]).all()
    counted = run_op("AveragePool", [x], {**attrs, "count_include_pad": 1})[0]
    np.testing.assert_array_equal(counted, [[[0.0]]])


def test_max_pool_single_output_and_empty_batch():
    (y,) = run_op("MaxPool", [np.zeros((0, 3, 4, 4), np.float32)], {"kernel_shape": [2, 2]})
    assert y.shape == (0, 3, 3, 3)


@pytest.mark.parametrize(("shape", "attrs"), POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_matches_loops(shape, attrs, count_include_pad):
    x = random_array(F64, shape, seed=13)
    attrs = {**attrs, "count_include_pad": count_include_pad}
    got = run_op("AveragePool", [x], attrs)[0]
    check(got, pool_ref(x, "avg", attrs["kernel_shape"], **_ref_kwargs(attrs)), F64)


@pytest.mark.parametrize(("count_include_pad", "expected"), [(0, [1.5, 3, 5, 6]),
                                                             (1, [1, 3, 5, 3])])
def test_average_pool_ceil_mode_hand_values(count_include_pad, expected):
    # windows start at -1, 1, 3, 5; the last reads x[5], the end pad, and past the pad
    x = np.arange(1.0, 7.0).reshape(1, 1, 6)
    attrs = {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1,
             "count_include_pad": count_include_pad}
    np.testing.assert_allclose(run_op("AveragePool", [x], attrs)[0], [[expected]])


@pytest.mark.parametrize(("auto_pad", "pads"), [("SAME_UPPER", [0, 1]), ("SAME_LOWER", [1, 0]),
                                                ("VALID", [0, 0])])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_pools_auto_pad(auto_pad, pads, count_include_pad):
    x = random_array(F64, (1, 2, 5), seed=14)
    attrs = {"kernel_shape": [2], "strides": [2], "auto_pad": auto_pad}
    avg = run_op("AveragePool", [x], {**attrs, "count_include_pad": count_include_pad})[0]
    ref = pool_ref(x, "avg", [2], strides=[2], pads=pads, count_include_pad=count_include_pad)
    check(avg, ref, F64)
    y, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    ref_y, ref_i = pool_ref(x, "max", [2], strides=[2], pads=pads)
    check(y, ref_y, F64)
    np.testing.assert_array_equal(indices, ref_i)


@pytest.mark.parametrize("dtype", dtypes_of("AveragePool"))
def test_average_pool_dtypes(dtype):
    x = random_array(dtype, (2, 2, 4, 5), seed=15)
    attrs = {"kernel_shape": [2, 2], "pads": [1, 0, 1, 1], "count_include_pad": 1}
    got = run_op("AveragePool", [x], attrs)[0]
    check(got, pool_ref(x, "avg", [2, 2], **_ref_kwargs(attrs)), dtype)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("x", "attrs", "expected"), [
    (F32["batch", 3, "h", "w"], {"kernel_shape": [2, 2]}, ("batch", 3, "h-1", "w-1")),
    (F32["batch", 3, "h", "w"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
     ("batch", 3, "h", "w")),
    (F32["batch", 3, "h", 7], {"kernel_shape": [2, 2], "ceil_mode": 1, "strides": [1, 2]},
     ("batch", 3, "h-1", 4)),
    (F32["batch", 3, "h", "w"], {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER"},
     ("batch", 3, "h", "w")),
])
def test_pool_infer_symbolic(op, x, attrs, expected):
    t = infer_type(op, [x], attrs, num_outputs=2 if op == "MaxPool" else 1)
    t = t if op == "AveragePool" else t[0]
    assert t == F32[expected]


def test_max_pool_infer_indices_and_fresh_dims():
    y, indices = infer_type("MaxPool", [F32["n", 3, "h"]], {"kernel_shape": [2], "strides": [2]},
                            num_outputs=2)
    assert y.shape[:2] == ("n", 3) and y.shape[2].startswith("_")
    assert indices == I64[y.shape]
    y = infer_direct("MaxPool", [F32["n", 3, "2*h"]], {"kernel_shape": (2,), "strides": (2,),
                                                       "ceil_mode": 1})[0]
    assert y == F32["n", 3, "h"]


@pytest.mark.parametrize(("op", "attrs", "message"), [
    ("MaxPool", {}, "kernel_shape"),
    ("MaxPool", {"kernel_shape": [2]}, "kernel_shape"),
    ("MaxPool", {"kernel_shape": [0, 2]}, "kernel_shape"),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}, "pads"),
    ("MaxPool", {"kernel_shape": [2, 2], "storage_order": 2}, "storage_order"),
    ("MaxPool", {"kernel_shape": [2, 2], "ceil_mode": 2}, "ceil_mode"),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [1]}, "strides"),
    ("MaxPool", {"kernel_shape": [9, 2]}, "kernel size"),
    ("AveragePool", {"kernel_shape": [2, 2], "count_include_pad": 2}, "count_include_pad"),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "FOO"}, "auto_pad"),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "pads": [0, 0, 0, 0]},
     "pads"),
])
def test_pool_infer_errors(op, attrs, message):
    with pytest.raises(VerificationError, match=message):
        infer_type(op, [F32[1, 3, 5, 5]], attrs)


def test_pool_dtype_constraints():
    with pytest.raises(VerificationError, match="dtype"):
        infer_type("AveragePool", [I8[1, 1, 4]], {"kernel_shape": [2]})
    assert infer_type("MaxPool", [U8[1, 1, 4]], {"kernel_shape": [2]}) == U8[1, 1, 3]


# --- Global pools -----------------------------------------------------------

@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("dtype", dtypes_of("GlobalAveragePool"))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 3), (2, 3), (0, 2, 3)])
def test_global_pools(op, dtype, shape):
    x = random_array(dtype, shape, seed=16)
    axes = tuple(range(2, len(shape)))
    reduce = np.mean if op == "GlobalAveragePool" else np.max
    expected = reduce(wide(x), axis=axes, keepdims=True) if axes else wide(x)
    check(run_op(op, [x])[0], expected, dtype)


def test_global_pools_empty_spatial():
    x = np.zeros((1, 2, 0, 3), np.float32)
    assert np.isnan(run_op("GlobalAveragePool", [x])[0]).all()
    np.testing.assert_array_equal(run_op("GlobalMaxPool", [x])[0], np.full((1, 2, 1, 1), -np.inf))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_infer(op):
    assert infer_type(op, [F32["batch", "c", "h", "w"]]) == F32["batch", "c", 1, 1]
    with pytest.raises(VerificationError, match="rank >= 2"):
        infer_type(op, [F32[4]])


# --- Softmax / LogSoftmax ---------------------------------------------------

def softmax_ref(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    x = wide(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    s = e.sum(axis=axis, keepdims=True)
    return np.log(e / s) if log else e / s


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", dtypes_of("Softmax"))
@pytest.mark.parametrize(("shape", "axis"), [((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), -3),
                                             ((5,), 0)])
def test_softmax(op, dtype, shape, axis):
    x = random_array(dtype, shape, seed=17)
    got = run_op(op, [x], {"axis": axis})[0]
    check(got, softmax_ref(x, axis, op == "LogSoftmax"), dtype)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_extremes_and_empty(op):
    x = np.array([[1000.0, 0.0], [-np.inf, 0.0]], np.float32)
    got = run_op(op, [x])[0]
    expected = [[1.0, 0.0], [0.0, 1.0]] if op == "Softmax" else [[0.0, -1000.0], [-np.inf, 0.0]]
    np.testing.assert_allclose(got, expected)
    for shape, axis in [((0, 3), 1), ((2, 0), 1), ((2, 0), 0)]:
        out = run_op(op, [np.zeros(shape, np.float32)], {"axis": axis})[0]
        assert out.shape == shape


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_infer(op):
    assert infer_type(op, [F32["batch", "seq", 8]], {"axis": 1}) == F32["batch", "seq", 8]
    with pytest.raises(VerificationError, match="axis=3"):
        infer_type(op, [F32[2, 3, 4]], {"axis": 3})
    with pytest.raises(VerificationError, match="axis=-1"):
        infer_type(op, [F32[()]])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_decomposition(op, dtype, axis):
    x = random_array(dtype, (3, 4, 2), seed=18, low=-20, high=20)
    got = run_decomposed(op, [x], {"axis": axis})[0]
    np.testing.assert_allclose(got, run_op(op, [x], {"axis": axis})[0], rtol=1e-5, atol=1e-6)


# --- BatchNormalization -----------------------------------------------------

def bn_inputs(dtype: DType, shape: tuple[int, ...], seed: int = 19) -> list[np.ndarray]:
    c = shape[1] if len(shape) >= 2 else 1
    x = random_array(dtype, shape, seed=seed)
    scale, b, mean = (random_array(dtype, (c,), seed=seed + i) for i in (1, 2, 3))
    var = random_array(dtype, (c,), seed=seed + 4, low=0.1, high=2.0)
    return [x, scale, b, mean, var]


def bn_ref(x, scale, b, mean, var, eps):
    shape = (-1,) + (1,) * (x.ndim - 2) if x.ndim >= 2 else (-1,)
    x, scale, b, mean, var = (wide(a) for a in (x, scale, b, mean, var))
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape)
            + b.reshape(shape))


@pytest.mark.parametrize("dtype", dtypes_of("BatchNormalization"))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (5,), (0, 3, 2)])
def test_batch_norm(dtype, shape):
    inputs = bn_inputs(dtype, shape)
    got = run_op("BatchNormalization", inputs, {"epsilon": 1e-3})[0]
    check(got, bn_ref(*inputs, 1e-3), dtype)


def test_batch_norm_mixed_param_dtypes():
    x, scale, b, mean, var = bn_inputs(F32, (2, 3, 4))
    got = run_op("BatchNormalization", [x, scale.astype(np.float16), b.astype(np.float16),
                                        mean.astype(np.float64), var.astype(np.float64)])[0]
    assert got.dtype == np.float32
    expected = bn_ref(x, scale.astype(np.float16), b.astype(np.float16), mean, var, 1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_batch_norm_hand_values():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    ones, zeros = np.ones(2), np.zeros(2)
    got = run_op("BatchNormalization", [x, np.array([2.0, 1.0]), np.array([0.0, 1.0]),
                                        np.array([1.0, 2.0]), np.array([4.0, 1.0])],
                 {"epsilon": 0.0})[0]
    np.testing.assert_array_equal(got, [[0.0, 1.0], [2.0, 3.0]])
    got = run_op("BatchNormalization", [x, ones, zeros, zeros, ones], {"epsilon": 0.0})[0]
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (5,)])
def test_batch_norm_decomposition(dtype, shape):
    inputs = bn_inputs(dtype, shape)
    got = run_decomposed("BatchNormalization", inputs, {"epsilon": 1e-2})[0]
    expected = run_op("BatchNormalization", inputs, {"epsilon": 1e-2})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_batch_norm_decomposition_mixed_dtypes():
    x, scale, b, mean, var = bn_inputs(F64, (2, 3, 4))
    inputs = [x, scale.astype(np.float32), b.astype(np.float32), mean, var]
    got = run_decomposed("BatchNormalization", inputs)[0]
    np.testing.assert_allclose(got, run_op("BatchNormalization", inputs)[0], rtol=1e-12)


def test_batch_norm_training_mode_uses_batch_statistics():
    x, scale, b, mean, var = bn_inputs(F64, (4, 3, 5))
    y, running_mean, running_var = run_op("BatchNormalization", [x, scale, b, mean, var],
                                          {"training_mode": 1, "momentum": 0.8},
                                          num_outputs=3)
    batch_mean = x.mean(axis=(0, 2))
    batch_var = x.var(axis=(0, 2))
    expected = ((x - batch_mean[:, None]) / np.sqrt(batch_var[:, None] + 1e-5)
                * scale[:, None] + b[:, None])
    np.testing.assert_allclose(y, expected, rtol=1e-12)
    np.testing.assert_allclose(running_mean, mean * 0.8 + batch_mean * 0.2, rtol=1e-12)
    np.testing.assert_allclose(running_var, var * 0.8 + batch_var * 0.2, rtol=1e-12)
    assert infer_type("BatchNormalization", [F32["n", 3], *[F32[3]] * 4],
                      {"training_mode": 1}, num_outputs=3) == [F32["n", 3], F32[3], F32[3]]


def test_batch_norm_infer():
    c = F32[3]
    assert infer_type("BatchNormalization", [F32["batch", 3, "h", "w"], c, c, c, c]) \
        == F32["batch", 3, "h", "w"]
    assert infer_type("BatchNormalization", [F32["n", "c"], *[F32["c"]] * 4]) == F32["n", "c"]


@pytest.mark.parametrize(("types", "attrs", "num_outputs", "message"), [
    ([F32[2, 3], F32[4], F32[3], F32[3], F32[3]], {}, 1, "scale"),
    ([F32[2, 3], F32[3], F32[3], F32[3], F32[3, 1]], {}, 1, "input_var"),
    ([F32[4], F32[3], F32[3], F32[3], F32[3]], {}, 1, "scale"),
    ([F32[()], F32[1], F32[1], F32[1], F32[1]], {}, 1, "rank"),
    ([F32[2, 3], F32[3], F32[3], F32[3], F32[3]], {"training_mode": 2}, 1, "training_mode"),
    ([F32[2, 3], F32[3], F32[3], F32[3], F32[3]], {}, 3, "running_mean"),
])
def test_batch_norm_infer_errors(types, attrs, num_outputs, message):
    with pytest.raises(VerificationError, match=message):
        infer_type("BatchNormalization", types, attrs, num_outputs=num_outputs)


# --- LayerNormalization -----------------------------------------------------

def ln_ref(x, scale, b, axis, eps):
    """ONNX's function body: stage one in float32, Normalized cast back to X's dtype."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    xs = x.astype(np.float32)
    mean = xs.mean(axis=axes, keepdims=True)
    d = xs - mean
    inv = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + np.float32(eps))
    y = wide((d * inv).astype(x.dtype)) * wide(scale)
    return (y if b is None else y + wide(b)), mean, inv


@pytest.mark.parametrize("dtype", dtypes_of("LayerNormalization"))
@pytest.mark.parametrize(("shape", "axis", "param_shape"), [
    ((2, 3, 4), -1, (4,)), ((2, 3, 4), 1, (3, 4)), ((2, 3, 4), -3, (1, 3, 1)),
    ((2, 3, 4), 1, (1, 4)), ((6,), 0, (6,)),
])
def test_layer_norm(dtype, shape, axis, param_shape):
    x = random_array(dtype, shape, seed=20)
    scale, b = random_array(dtype, param_shape, seed=21), random_array(dtype, param_shape, seed=22)
    y, mean, inv = run_op("LayerNormalization", [x, scale, b], {"axis": axis}, num_outputs=3)
    ref_y, ref_mean, ref_inv = ln_ref(x, scale, b, axis, 1e-5)
    check(y, ref_y, dtype)
    check(mean, ref_mean, F32)
    check(inv, ref_inv, F32)


def test_layer_norm_without_bias_and_hand_values():
    x = np.array([[1.0, 3.0], [2.0, 2.0]])
    y, mean, inv = run_op("LayerNormalization", [x, np.array([1.0, 2.0])], {"epsilon": 0.0},
                          num_outputs=3)
    assert y.dtype == np.float64 and mean.dtype == inv.dtype == np.float32
    np.testing.assert_array_equal(mean, [[2.0], [2.0]])
    np.testing.assert_array_equal(inv[0], [1.0])
    np.testing.assert_array_equal(y[0], [-1.0, 2.0])
    assert np.isnan(y[1]).all()  # zero variance with epsilon 0: 0 * inf


def test_layer_norm_empty():
    x = np.zeros((0, 4), np.float32)
    y = run_op("LayerNormalization", [x, np.ones(4, np.float32)])[0]
    assert y.shape == (0, 4)
    y, mean, _ = run_op("LayerNormalization", [np.zeros((2, 0), np.float32),
                                               np.ones(0, np.float32)], num_outputs=3)
    assert y.shape == (2, 0) and np.isnan(mean).all()


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize(("axis", "with_bias"), [(-1, True), (1, False), (0, True)])
def test_layer_norm_decomposition(dtype, axis, with_bias):
    x = random_array(dtype, (2, 3, 4), seed=23)
    params = [random_array(dtype, (3, 4)[axis:] if axis else (2, 3, 4), seed=24 + i)
              for i in range(2 if with_bias else 1)]
    if axis == -1:
        params = [p[0] for p in params]
    got = run_decomposed("LayerNormalization", [x, *params], {"axis": axis})
    expected = run_op("LayerNormalization", [x, *params], {"axis": axis}, num_outputs=3)
    assert len(got) == 3
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_layer_norm_infer():
    y, mean, inv = infer_type("LayerNormalization", [F16["batch", "seq", 8], F16[8], F16[8]],
                              num_outputs=3)
    assert y == F16["batch", "seq", 8]
    assert mean == inv == F32["batch", "seq", 1]
    y, mean = infer_type("LayerNormalization", [F32["batch", "seq", "d"], F32["seq", "d"]],
                         {"axis": -2}, num_outputs=2)
    assert y == F32["batch", "seq", "d"] and mean == F32["batch", 1, 1]


@pytest.mark.parametrize(("types", "attrs", "message"), [
    ([F32[2, 3], F32[3]], {"axis": 2}, "axis=2"),
    ([F32[2, 3], F32[3]], {"axis": -3}, "axis=-3"),
    ([F32[2, 3], F32[4]], {}, "Scale"),
    ([F32[2, 3], F32[3], F32[2]], {}, "B"),
    ([F32[2, 3], F32[1, 2, 3]], {}, "Scale"),
    ([F32[2, 3], F32[3]], {"stash_type": 11}, "stash_type"),
])
def test_layer_norm_infer_errors(types, attrs, message):
    with pytest.raises(VerificationError, match=message):
        infer_type("LayerNormalization", types, attrs)


# --- LRN ----------------------------------------------------------------------

def lrn_ref(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    x = wide(x)
    y = np.empty_like(x)
    channels = x.shape[1]
    for c in range(channels):
        low = max(0, c - (size - 1) // 2)
        high = min(channels - 1, c + math.ceil((size - 1) / 2))
        square_sum = sum(x[:, i] ** 2 for i in range(low, high + 1))
        y[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    return y


@pytest.mark.parametrize("dtype", dtypes_of("LRN"))
@pytest.mark.parametrize(("shape", "size"), [((2, 5, 3, 3), 3), ((1, 6, 4), 4), ((2, 3), 1),
                                             ((1, 4, 2, 2), 9), ((0, 3, 2), 3),
                                             ((1, 4, 2), 2**40)])
def test_lrn(dtype, shape, size):
    x = random_array(dtype, shape, seed=25)
    attrs = {"size": size, "alpha": 0.5, "beta": 0.6, "bias": 2.0}
    check(run_op("LRN", [x], attrs)[0], lrn_ref(x, size, 0.5, 0.6, 2.0), dtype)


@pytest.mark.parametrize(("shape", "size"), [((2, 5, 3, 3), 3), ((1, 6, 4), 4), ((2, 3), 1),
                                             ((1, 4, 2, 2), 9), ((2, 3), 6), ((1, 4, 2), 2**40),
                                             ((2, 0), 3), ((1, 5, 0, 3), 3), ((0, 3, 2), 3)])
def test_lrn_decomposition(shape, size):
    """A window wider than the channels is cut to the channels it can reach, so a
    huge ``size`` makes no huge Conv kernel."""
    x = random_array(F64, shape, seed=26)
    attrs = {"size": size, "alpha": 0.5, "beta": 0.6, "bias": 2.0}
    got = run_decomposed("LRN", [x], attrs)[0]
    np.testing.assert_allclose(got, lrn_ref(x, size, 0.5, 0.6, 2.0), rtol=1e-12)


def test_lrn_over_symbolic_channels_decomposes_only_a_bounded_window():
    from polyhal.ir import GraphBuilder
    from polyhal.passes import decompose

    def decomposed_ops(size):
        g = GraphBuilder("lrn")
        g.output(g.op("LRN", g.input("x", F32["n", "c", 3]), size=size))
        return {node.op for node in decompose(g.build()).nodes}

    assert "LRN" not in decomposed_ops(5)
    assert decomposed_ops(2**40) == {"LRN"}  # left whole: no 2**40-wide kernel


def test_lrn_hand_values():
    x = np.array([[1.0, 2.0, 3.0]]).reshape(1, 3, 1)
    got = run_op("LRN", [x], {"size": 2, "alpha": 2.0, "beta": 1.0, "bias": 1.0})[0]
    # size 2: channel c sums channels c and c + 1
    np.testing.assert_allclose(got.reshape(-1), [1 / (1 + 5), 2 / (1 + 13), 3 / (1 + 9)])


def test_lrn_infer():
    assert infer_type("LRN", [F32["n", "c", "h"]], {"size": 3}) == F32["n", "c", "h"]
    with pytest.raises(VerificationError, match="size"):
        infer_type("LRN", [F32[1, 3, 3]])
    with pytest.raises(VerificationError, match="size=0"):
        infer_type("LRN", [F32[1, 3, 3]], {"size": 0})
    with pytest.raises(VerificationError, match="rank >= 2"):
        infer_type("LRN", [F32[3]], {"size": 3})


# --- Dropout ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", dtypes_of("Dropout"))
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_dropout_inference_is_identity(dtype, shape):
    x = random_array(dtype, shape, seed=26)
    out, mask = run_op("Dropout", [x], num_outputs=2)
    check(out, x, dtype)
    assert mask.dtype == np.bool_ and mask.shape == shape and mask.all()
    ratio = np.array(0.3, dtype.numpy)
    (out,) = run_op("Dropout", [x, ratio, np.array(False)])
    check(out, x, dtype)


def test_dropout_training_mode():
    x = random_array(F32, (2, 3))
    with pytest.raises(VerificationError, match="training_mode"):
        infer_type("Dropout", [F32[2, 3], None, B8[()]], consts={2: np.array(True)})
    with pytest.raises(VerificationError, match="training_mode"):
        run_op("Dropout", [x, np.array(0.5, np.float32), np.array(True)], const_inputs=[1, 2])
    with pytest.raises(UnsupportedError, match="training_mode"):
        run_op("Dropout", [x, np.array(0.5, np.float32), np.array(True)])
    # training with ratio 0 drops nothing, so it is the identity too
    out, mask = run_op("Dropout", [x, np.array(0.0, np.float32), np.array(True)],
                       const_inputs=[1, 2], num_outputs=2)
    np.testing.assert_array_equal(out, x)
    assert mask.all()


def test_dropout_infer():
    out, mask = infer_type("Dropout", [F16["batch", 4]], num_outputs=2)
    assert out == F16["batch", 4] and mask == B8["batch", 4]
    assert infer_type("Dropout", [F32[3], F32[1], B8[1, 1]]) == F32[3]
    with pytest.raises(VerificationError, match="ratio"):
        infer_type("Dropout", [F32[3], F32[2]])
    with pytest.raises(VerificationError, match="training_mode"):
        infer_type("Dropout", [F32[3], None, B8["n"]])
    with pytest.raises(VerificationError, match="dtype"):
        infer_type("Dropout", [F32[3], None, F32[()]])
