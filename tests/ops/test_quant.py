"""Quantization: QuantizeLinear, DequantizeLinear, MatMulInteger, QLinearMatMul."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal.errors import ExecutionError, VerificationError
from polyhal.ir import DType, GraphBuilder, bf16, f16, f32, i8, i16, i32, u8
from polyhal.ops import get_op
from polyhal.reference import run
from tests.helpers import infer_type, random_array, run_op


def _dtypes(op: str, var: str) -> list[DType]:
    return sorted(get_op(op).type_vars[var], key=lambda d: d.value)


def _requantize(real: np.ndarray, zero: np.ndarray | int, dtype: np.dtype) -> np.ndarray:
    """Round half to even, add the zero point, saturate (NaN -> 0)."""
    info = np.iinfo(dtype)
    rounded = np.nan_to_num(np.round(real), nan=0.0, posinf=np.inf, neginf=-np.inf)
    return np.clip(rounded + np.asarray(zero, np.float64), info.min, info.max).astype(dtype)


# ------------------------------------------------------------ QuantizeLinear


@pytest.mark.parametrize("x_dtype", _dtypes("QuantizeLinear", "T1"))
@pytest.mark.parametrize("y_dtype", _dtypes("QuantizeLinear", "T3"))
def test_quantize_every_input_and_output_dtype(x_dtype: DType, y_dtype: DType) -> None:
    if x_dtype.is_float:
        x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.25, 1e4, -1e4], x_dtype.numpy)
        scale = np.array(0.5, np.float32)
    else:
        x = np.array([1, 3, 5, -1, -3, 7, 20000, -20000], np.int32)
        scale = np.array(2.0, np.float32)
    zero = np.array(10, y_dtype.numpy)
    (got,) = run_op("QuantizeLinear", [x, scale, zero])
    expected = _requantize(x.astype(np.float64) / float(scale), 10, y_dtype.numpy)
    assert got.dtype == y_dtype.numpy
    np.testing.assert_array_equal(got, expected)


def test_quantize_rounds_half_to_even_and_saturates() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 300.0, -300.0, np.inf, -np.inf, np.nan],
                 np.float32)
    (got,) = run_op("QuantizeLinear", [x, np.array(1.0, np.float32), np.array(0, np.int8)])
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, 127, -128, 127, -128, 0])
    (got,) = run_op("QuantizeLinear", [x, np.array(1.0, np.float32),
                                       np.array(128, np.uint8)])
    np.testing.assert_array_equal(got, [128, 130, 130, 128, 126, 255, 0, 255, 0, 128])


@pytest.mark.parametrize("scale_dtype", _dtypes("QuantizeLinear", "T2"))
def test_quantize_every_scale_dtype(scale_dtype: DType) -> None:
    x = np.array([-7.0, -2.0, 0.0, 3.0, 9.0, 1000.0], np.float32)
    scale = np.array(2, scale_dtype.numpy)
    (got,) = run_op("QuantizeLinear", [x, scale])
    assert got.dtype == np.uint8  # no zero point, no output_dtype
    np.testing.assert_array_equal(got, [0, 0, 0, 2, 4, 255])


def test_quantize_int32_precision_is_exact() -> None:
    x = np.array([5, 7, -5, 2**31 - 1, 3], np.int32)
    scale = np.array(2, np.int32)
    (got,) = run_op("QuantizeLinear", [x, scale, np.array(0, np.int16)])
    np.testing.assert_array_equal(got, [2, 4, -2, 32767, 2])


def test_quantize_precision_attribute() -> None:
    # 101.49 rounds to 101.5 in float16, which then rounds half-to-even to 102.
    x = np.array([101.49], np.float32)
    scale = np.array(1.0, np.float32)
    assert run_op("QuantizeLinear", [x, scale])[0][0] == 101
    assert run_op("QuantizeLinear", [x, scale], {"precision": "float16"})[0][0] == 102


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantize_output_dtype_attribute(dtype: str) -> None:
    x = np.array([1.0, -1.0, 400.0], np.float32)
    (got,) = run_op("QuantizeLinear", [x, np.array(1.0, np.float32)], {"output_dtype": dtype})
    info = np.iinfo(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.clip([1, -1, 400], info.min, info.max))


@pytest.mark.parametrize("axis", [2, -1])
def test_quantize_per_axis(axis: int) -> None:
    x = random_array(DType.FLOAT32, (2, 3, 4), seed=1, low=-20, high=20)
    scale = np.array([0.5, 1.0, 2.0, 4.0], np.float32)
    zero = np.array([0, 10, -10, 5], np.int8)
    (got,) = run_op("QuantizeLinear", [x, scale, zero], {"axis": axis})
    expected = _requantize(x.astype(np.float64) / scale.astype(np.float64), zero, np.int8)
    np.testing.assert_array_equal(got, expected)


def test_quantize_per_axis_default_axis() -> None:
    x = random_array(DType.FLOAT32, (2, 3, 2), seed=2, low=-20, high=20)
    scale = np.array([0.5, 1.0, 2.0], np.float32)
    (got,) = run_op("QuantizeLinear", [x, scale])
    expected = _requantize(x.astype(np.float64) / scale.reshape(1, 3, 1), 0, np.uint8)
    np.testing.assert_array_equal(got, expected)


def test_quantize_rank1_per_axis_ignores_axis() -> None:
    x = np.array([4.0, 4.0, 4.0], np.float32)
    scale = np.array([1.0, 2.0, 4.0], np.float32)
    (got,) = run_op("QuantizeLinear", [x, scale])
    np.testing.assert_array_equal(got, [4, 2, 1])


def test_quantize_blocked() -> None:
    x = random_array(DType.FLOAT32, (2, 5), seed=3, low=-50, high=50)
    scale = np.array([[1.0, 2.0, 4.0], [0.5, 3.0, 8.0]], np.float32)
    zero = np.array([[0, 1, 2], [3, 4, 5]], np.int16)
    (got,) = run_op("QuantizeLinear", [x, scale, zero], {"axis": 1, "block_size": 2})
    expected = np.zeros((2, 5), np.int16)
    for i in range(2):
        for j in range(5):
            expected[i, j] = _requantize(np.float64(x[i, j]) / scale[i, j // 2],
                                         zero[i, j // 2], np.int16)
    np.testing.assert_array_equal(got, expected)


def test_quantize_blocked_negative_axis_huge_block() -> None:
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    (got,) = run_op("QuantizeLinear", [x, np.array([[0.5]], np.float32)],
                    {"axis": -1, "block_size": 10**9})
    np.testing.assert_array_equal(got, [[2, 4, 6]])


def test_quantize_empty_and_scalar() -> None:
    (got,) = run_op("QuantizeLinear", [np.zeros((0, 3), np.float32),
                                       np.ones(3, np.float32)])
    assert got.shape == (0, 3) and got.dtype == np.uint8
    (got,) = run_op("QuantizeLinear", [np.array(2.5, np.float32), np.array(1.0, np.float32),
                                       np.array(-1, np.int8)])
    assert got.shape == () and got == 1


def test_quantize_low_precision_input() -> None:
    x = np.array([1.0, 2.5, -3.5], np.float16)
    (got,) = run_op("QuantizeLinear", [x, np.array(0.5, np.float16), np.array(0, np.int8)])
    np.testing.assert_array_equal(got, [2, 5, -7])


def test_quantize_infer_symbolic() -> None:
    assert infer_type("QuantizeLinear", [f32["b", 4], f32[4], i8[4]]) == i8["b", 4]
    assert infer_type("QuantizeLinear", [f32["b", 4], f32[()]]) == u8["b", 4]
    assert infer_type("QuantizeLinear", [f32["b", 4], f32["b", 2]], {"block_size": 2}) == \
        u8["b", 4]
    assert infer_type("QuantizeLinear", [bf16["b"], f32[()]], {"output_dtype": "int16"}) == \
        i16["b"]


@pytest.mark.parametrize(("inputs", "attrs", "match"), [
    ([f32[2, 3], f32[2, 3]], {}, "block_size"),
    ([f32[2, 3], f32[4]], {}, "axis"),
    ([f32[2, 3], f32[2]], {"axis": 2}, "axis"),
    ([f32[()], f32[2]], {}, "y_scale"),
    ([f32[2, 3], f32[3], i8[2]], {}, "y_zero_point"),
    ([f32[2, 3], f32[3], i8[()]], {}, "y_zero_point"),
    ([f32[2, 3], f32[2]], {"block_size": 2}, "block_size"),
    ([f32[2, 5], f32[2, 2]], {"block_size": 2}, "block_size"),
    ([f32[2, 5], f32[1, 3]], {"block_size": 2}, "axis"),
    ([f32[2, 5], f32[2, 3]], {"block_size": -1}, "block_size"),
    ([f32[2, 5], f32[2, 3]], {"block_size": 2, "axis": 3}, "axis"),
    ([f32[2], f32[()], i8[()]], {"output_dtype": "uint8"}, "output_dtype"),
    ([f32[2], f32[()]], {"output_dtype": "float32"}, "output_dtype"),
    ([f32[2], f32[()]], {"precision": "float64"}, "precision"),
    ([f32[2], f32[()]], {"saturate": 3}, "saturate"),
])
def test_quantize_infer_errors(inputs: list, attrs: dict, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("QuantizeLinear", inputs, attrs)


def test_quantize_runtime_bad_scale() -> None:
    g = GraphBuilder()
    x = g.input("x", f32[2, "n"])
    s = g.input("s", f32["m"])
    g.output(g.op("QuantizeLinear", x, s), name="y")
    with pytest.raises(ExecutionError, match="y_scale"):
        run(g.build(), np.ones((2, 3), np.float32), np.ones(2, np.float32))


# ---------------------------------------------------------- DequantizeLinear


@pytest.mark.parametrize("x_dtype", _dtypes("DequantizeLinear", "T1"))
@pytest.mark.parametrize("scale_dtype", _dtypes("DequantizeLinear", "T2"))
def test_dequantize_every_dtype(x_dtype: DType, scale_dtype: DType) -> None:
    info = np.iinfo(x_dtype.numpy)
    lo, hi = (-(2**16), 2**16) if x_dtype is DType.INT32 else (info.min, info.max)
    x = np.array([lo, -1 if lo < 0 else 0, 0, 7, hi], x_dtype.numpy)
    zero = np.array(3, x_dtype.numpy)
    scale = np.array(0.25, scale_dtype.numpy)
    (got,) = run_op("DequantizeLinear", [x, scale, zero])
    expected = (x.astype(np.float64) - 3) * 0.25
    assert got.dtype == scale_dtype.numpy
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-2 if
                               scale_dtype.is_low_precision else 1e-7)


@pytest.mark.parametrize("out", _dtypes("DequantizeLinear", "T3"))
def test_dequantize_output_dtype(out: DType) -> None:
    x = np.array([-128, 0, 5, 127], np.int8)
    (got,) = run_op("DequantizeLinear", [x, np.array(0.5, np.float32)],
                    {"output_dtype": out.value})
    assert got.dtype == out.numpy
    np.testing.assert_array_equal(got.astype(np.float64), [-64.0, 0.0, 2.5, 63.5])


def test_dequantize_output_dtype_rounds_once() -> None:
    # 2049 * 1.0 in float16 precision: 2049 first rounds to 2048 (ties to even).
    x = np.array([2049], np.int16)
    (got,) = run_op("DequantizeLinear", [x, np.array(1.0, np.float32)],
                    {"output_dtype": "float16"})
    assert got[0] == 2048


def test_dequantize_int32_exact_difference() -> None:
    x = np.array([2**31 - 1, -(2**31)], np.int32)
    zero = np.array(-(2**31), np.int32)
    (got,) = run_op("DequantizeLinear", [x, np.array(1.0, np.float32), zero])
    np.testing.assert_array_equal(got, np.array([2**32 - 1, 0], np.float64).astype(np.float32))


@pytest.mark.parametrize("axis", [0, -2])
def test_dequantize_per_axis(axis: int) -> None:
    x = random_array(DType.UINT8, (3, 4), seed=4, low=0, high=255)
    scale = np.array([0.5, 2.0, 0.125], np.float32)
    zero = np.array([128, 0, 3], np.uint8)
    (got,) = run_op("DequantizeLinear", [x, scale, zero], {"axis": axis})
    expected = (x.astype(np.float64) - zero[:, None]) * scale[:, None]
    np.testing.assert_allclose(got, expected, rtol=1e-7)


def test_dequantize_blocked() -> None:
    x = random_array(DType.INT8, (5, 2), seed=5, low=-100, high=100)
    scale = np.array([[0.5, 1.0], [2.0, 4.0]], np.float32)
    zero = np.array([[1, -1], [2, -2]], np.int8)
    (got,) = run_op("DequantizeLinear", [x, scale, zero], {"axis": 0, "block_size": 3})
    expected = np.zeros((5, 2))
    for i in range(5):
        for j in range(2):
            expected[i, j] = (float(x[i, j]) - zero[i // 3, j]) * scale[i // 3, j]
    np.testing.assert_allclose(got, expected, rtol=1e-7)


def test_dequantize_empty_and_scalar() -> None:
    (got,) = run_op("DequantizeLinear", [np.zeros((2, 0), np.int8), np.ones(0, np.float32)])
    assert got.shape == (2, 0) and got.dtype == np.float32
    (got,) = run_op("DequantizeLinear", [np.array(10, np.uint8), np.array(0.5, np.float32),
                                         np.array(4, np.uint8)])
    assert got.shape == () and got == 3.0


def test_quantize_dequantize_round_trip() -> None:
    x = random_array(DType.FLOAT32, (4, 6), seed=6, low=-1, high=1)
    scale = np.array(2 / 255, np.float32)
    zero = np.array(0, np.int8)
    (q,) = run_op("QuantizeLinear", [x, scale, zero])
    (back,) = run_op("DequantizeLinear", [q, scale, zero])
    assert np.max(np.abs(back - x)) <= scale / 2 + 1e-7


def test_dequantize_infer_symbolic() -> None:
    assert infer_type("DequantizeLinear", [i8["b", 4], f16[4], i8[4]]) == f16["b", 4]
    assert infer_type("DequantizeLinear", [i32["b"], f32[()]],
                      {"output_dtype": "bfloat16"}) == bf16["b"]


@pytest.mark.parametrize(("inputs", "attrs", "match"), [
    ([i8[2, 3], f32[2, 3]], {}, "block_size"),
    ([i8[2, 3], f32[2]], {}, "axis"),
    ([i8[2, 3], f32[3], i8[1]], {}, "x_zero_point"),
    ([i8[2, 3], f32[2, 3]], {"block_size": 2}, "block_size"),
    ([i8[2], f32[()]], {"output_dtype": "float64"}, "output_dtype"),
    ([i8[2], f32[()]], {"output_dtype": "int8"}, "output_dtype"),
    ([i8[2], f32[()], u8[()]], {}, "x_zero_point"),
])
def test_dequantize_infer_errors(inputs: list, attrs: dict, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("DequantizeLinear", inputs, attrs)


# ------------------------------------------------------------- MatMulInteger


def _int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sums of products in int64, by broadcasting (independent of np.matmul)."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    y = (a2[..., :, :, None].astype(np.int64) * b2[..., None, :, :]).sum(axis=-2)
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return y


INT8S = _dtypes("MatMulInteger", "T1")


@pytest.mark.parametrize("a_dtype", INT8S)
@pytest.mark.parametrize("b_dtype", INT8S)
def test_matmul_integer_every_dtype(a_dtype: DType, b_dtype: DType) -> None:
    a = random_array(a_dtype, (2, 3, 4), seed=7, low=-128, high=255)
    b = random_array(b_dtype, (4, 5), seed=8, low=-128, high=255)
    az = random_array(a_dtype, (), seed=9, low=-128, high=255)
    bz = random_array(b_dtype, (5,), seed=10, low=-128, high=255)
    (got,) = run_op("MatMulInteger", [a, b, az, bz])
    expected = _int_matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_matmul_integer_no_zero_points_and_1d() -> None:
    a = np.array([1, 2, 3], np.uint8)
    b = np.array([[1, 0], [0, 1], [-1, 2]], np.int8)
    np.testing.assert_array_equal(run_op("MatMulInteger", [a, b])[0], [-2, 8])
    np.testing.assert_array_equal(run_op("MatMulInteger", [b.T.copy(), a])[0], [-2, 8])
    assert run_op("MatMulInteger", [a, a])[0] == 14


@pytest.mark.parametrize(("az_shape", "bz_shape"), [
    ((3,), (2,)), ((3, 1), (1, 2)), ((1,), (1,)), ((2, 3, 1), (2, 1, 2))])
def test_matmul_integer_per_row_and_column(az_shape: tuple, bz_shape: tuple) -> None:
    a = random_array(DType.UINT8, (2, 3, 4), seed=11, low=0, high=255)
    b = random_array(DType.INT8, (2, 4, 2), seed=12, low=-128, high=127)
    az = random_array(DType.UINT8, az_shape, seed=13, low=0, high=255)
    bz = random_array(DType.INT8, bz_shape, seed=14, low=-128, high=127)
    (got,) = run_op("MatMulInteger", [a, b, az, bz])
    az_b = az.astype(np.int64).reshape(az_shape if len(az_shape) > 1 else (-1, 1))
    bz_b = bz.astype(np.int64)
    expected = _int_matmul(a.astype(np.int64) - az_b, b.astype(np.int64) - bz_b)
    np.testing.assert_array_equal(got, expected)


def test_matmul_integer_wraps_in_int32() -> None:
    k = 33100  # 255 * 255 * 33100 > 2**31 - 1
    a = np.full(k, 255, np.uint8)
    (got,) = run_op("MatMulInteger", [a, a])
    assert got == np.int64(255 * 255 * k) - 2**32


def test_matmul_integer_empty() -> None:
    (got,) = run_op("MatMulInteger", [np.zeros((2, 0), np.int8), np.zeros((0, 3), np.int8),
                                      np.array(5, np.int8)])
    np.testing.assert_array_equal(got, np.zeros((2, 3), np.int32))


def test_matmul_integer_infer_symbolic() -> None:
    assert infer_type("MatMulInteger", [u8["b", "m", 4], i8[4, 6], u8["m"], i8[6]]) == \
        i32["b", "m", 6]


@pytest.mark.parametrize(("inputs", "match"), [
    ([u8[3, 4], i8[5, 6]], "inner dimensions"),
    ([u8[3, 4], i8[4, 6], u8[4]], "a_zero_point"),
    ([u8[3, 4], i8[4, 6], u8[3, 4]], "a_zero_point"),
    ([u8[3, 4], i8[4, 6], u8[()], i8[4]], "b_zero_point"),
    ([u8[3, 4], i8[4, 6], u8[()], i8[4, 1]], "b_zero_point"),
    ([u8[3, 4], i8[4, 6], u8[()], i8[2, 1, 6]], "b_zero_point"),
    ([u8[4], i8[4, 6], u8[3]], "a_zero_point"),
])
def test_matmul_integer_infer_errors(inputs: list, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("MatMulInteger", inputs)


def test_matmul_integer_runtime_bad_zero_point() -> None:
    g = GraphBuilder()
    a, b = g.input("a", u8[2, 3]), g.input("b", i8[3, 2])
    g.output(g.op("MatMulInteger", a, b, g.input("az", u8["n"])), name="y")
    with pytest.raises(ExecutionError, match="a_zero_point"):
        run(g.build(), np.ones((2, 3), np.uint8), np.ones((3, 2), np.int8),
            np.ones(3, np.uint8))


# ------------------------------------------------------------- QLinearMatMul


def _qlinear_expected(a, sa, za, b, sb, zb, sy, zy) -> np.ndarray:
    """Dequantize in float64, multiply, requantize."""
    row = lambda p: p.reshape(-1, 1) if p.ndim == 1 else p  # noqa: E731
    col = lambda p: p.reshape(1, -1) if p.ndim == 1 else p  # noqa: E731
    real_a = (a.astype(np.float64) - row(za)) * row(sa).astype(np.float64)
    real_b = (b.astype(np.float64) - col(zb)) * col(sb).astype(np.float64)
    real = (real_a[..., :, :, None] * real_b[..., None, :, :]).sum(axis=-2)
    return _requantize(real / np.float64(sy), zy, zy.dtype)


@pytest.mark.parametrize("a_dtype", INT8S)
@pytest.mark.parametrize("b_dtype", INT8S)
@pytest.mark.parametrize("y_dtype", _dtypes("QLinearMatMul", "T3"))
@pytest.mark.parametrize("s_dtype", _dtypes("QLinearMatMul", "TS"))
def test_qlinear_matmul_every_dtype(a_dtype: DType, b_dtype: DType, y_dtype: DType,
                                    s_dtype: DType) -> None:
    a = random_array(a_dtype, (3, 4), seed=15, low=-128, high=255)
    b = random_array(b_dtype, (4, 2), seed=16, low=-128, high=255)
    sa, sb, sy = (np.array(v, s_dtype.numpy) for v in (0.5, 0.25, 2.0))
    za, zb = np.array(3, a_dtype.numpy), np.array(5, b_dtype.numpy)
    zy = np.array(10, y_dtype.numpy)
    (got,) = run_op("QLinearMatMul", [a, sa, za, b, sb, zb, sy, zy])
    assert got.dtype == y_dtype.numpy
    np.testing.assert_array_equal(got, _qlinear_expected(a, sa, za, b, sb, zb, sy, zy))


def test_qlinear_matmul_per_row_and_column() -> None:
    a = random_array(DType.UINT8, (2, 3, 4), seed=17, low=0, high=255)
    b = random_array(DType.INT8, (4, 5), seed=18, low=-128, high=127)
    sa = np.array([0.01, 0.02, 0.03], np.float32)
    za = np.array([120, 128, 136], np.uint8)
    sb = np.linspace(0.01, 0.05, 5).astype(np.float32)
    zb = np.array([0, 1, -1, 2, -2], np.int8)
    sy, zy = np.array(0.05, np.float32), np.array(128, np.uint8)
    (got,) = run_op("QLinearMatMul", [a, sa, za, b, sb, zb, sy, zy])
    np.testing.assert_array_equal(got, _qlinear_expected(a, sa, za, b, sb, zb, sy, zy))


def test_qlinear_matmul_hand_values() -> None:
    a = np.array([[1, 2]], np.int8)
    b = np.array([[1], [1]], np.int8)
    one = np.array(1.0, np.float32)
    zero = np.array(0, np.int8)

    def go(y_scale: float, y_zero: int) -> int:
        return int(run_op("QLinearMatMul", [a, one, zero, b, one, zero,
                                            np.array(y_scale, np.float32),
                                            np.array(y_zero, np.int8)])[0][0, 0])

    assert go(2.0, 0) == 2        # 3 / 2 = 1.5 -> 2 (half to even)
    assert go(1.2, 0) == 2        # 2.5 -> 2
    assert go(0.01, 0) == 127     # 300 saturates
    assert go(0.01, -128) == 127
    assert go(-0.01, 0) == -128


def test_qlinear_matmul_1d_and_empty() -> None:
    one, z8 = np.array(1.0, np.float32), np.array(0, np.int8)
    a = np.array([1, 2, 3], np.int8)
    b = np.array([[1, 0], [0, 1], [1, 1]], np.int8)
    (got,) = run_op("QLinearMatMul", [a, one, z8, b, one, z8, one, z8])
    np.testing.assert_array_equal(got, [4, 5])
    (got,) = run_op("QLinearMatMul", [np.zeros((2, 0), np.int8), one, z8,
                                      np.zeros((0, 3), np.int8), one, z8, one,
                                      np.array(7, np.int8)])
    np.testing.assert_array_equal(got, np.full((2, 3), 7, np.int8))


def test_qlinear_matmul_infer_symbolic() -> None:
    types = [u8["b", "m", 4], f32["m"], u8["m"], i8[4, 6], f32[()], i8[()], f32[()], i8[()]]
    assert infer_type("QLinearMatMul", types) == i8["b", "m", 6]


def _qtypes(**over) -> list:
    base = {"a": u8[3, 4], "sa": f32[()], "za": u8[()], "b": i8[4, 5], "sb": f32[()],
            "zb": i8[()], "sy": f32[()], "zy": u8[()]}
    base.update(over)
    return list(base.values())


@pytest.mark.parametrize(("types", "match"), [
    (_qtypes(b=i8[3, 5]), "inner dimensions"),
    (_qtypes(sa=f32[4], za=u8[4]), "a_scale"),
    (_qtypes(sa=f32[3], za=u8[()]), "a_zero_point"),
    (_qtypes(sb=f32[5], zb=i8[4]), "b_zero_point"),
    (_qtypes(sb=f32[4, 1], zb=i8[4, 1]), "b_scale"),
    (_qtypes(sy=f32[2]), "y_scale"),
    (_qtypes(zy=u8[1, 1]), "y_zero_point"),
    (_qtypes(sb=f16[()]), "b_scale"),
])
def test_qlinear_matmul_infer_errors(types: list, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("QLinearMatMul", types)
