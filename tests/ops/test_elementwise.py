"""Tests of the elementwise ops: reference kernels against independent
expectations, type/shape inference (symbolic dims, errors), decompositions."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from polyhal.errors import VerificationError
from polyhal.ir import DType, TensorType
from polyhal.ops import get_op
from tests.helpers import infer_type, random_array, run_decomposed, run_op

B8, I8, U8, I16, I32, I64 = (DType.BOOL, DType.INT8, DType.UINT8, DType.INT16, DType.INT32,
                             DType.INT64)
F16, BF16, F32, F64 = DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64

TOLERANCE = {
    F16: {"rtol": 2e-3, "atol": 2e-3},
    BF16: {"rtol": 1.6e-2, "atol": 1.6e-2},
    F32: {"rtol": 1e-5, "atol": 1e-6},
    F64: {"rtol": 1e-12, "atol": 1e-12},
}
SHAPES = [(2, 3), (), (0, 3)]
BINARY_SHAPES = [((2, 1, 3), (4, 1)), ((), (3,)), ((0, 3), (1, 3)), ((), ())]


def dtypes_of(op: str, var: str = "T") -> list[DType]:
    """The dtypes type variable ``var`` of ``op`` admits, in a stable order."""
    return sorted(get_op(op).type_vars[var], key=lambda d: d.value)


def op_dtype_cases(ops: list[str], var: str = "T") -> list[tuple[str, DType]]:
    """``(op, dtype)`` for every op and every dtype it claims."""
    return [(op, d) for op in ops for d in dtypes_of(op, var)]


def as64(a: np.ndarray) -> np.ndarray:
    """Exact widening for computing expectations: float64 or int64."""
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    return a.astype(np.float64)


def check(out: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    """``out`` has ``dtype``, the expected shape, and the expected values."""
    expected = np.asarray(expected)
    assert out.dtype == dtype.numpy
    assert out.shape == expected.shape
    if dtype.is_float:
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                   **TOLERANCE[dtype])
    else:
        np.testing.assert_array_equal(out, expected.astype(dtype.numpy))


def small_ints(dtype: DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Integer-valued data in [-2, 2] (or [0, 2]) of any dtype: ties and zeros happen."""
    values = np.random.default_rng(seed).integers(-2, 3, size=shape)
    if dtype is B8:
        return values > 0
    if dtype is U8:
        values = np.abs(values)
    return values.astype(dtype.numpy)


# --------------------------------------------------------------------------- unary ops


def _erf64(v: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(v)


UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float, float]] = {
    # op: (expectation on float64 / int64 data, low, high of the random input)
    "Abs": (np.abs, -3, 3),
    "Neg": (np.negative, -3, 3),
    "Exp": (np.exp, -3, 3),
    "Log": (np.log, 0.1, 5),
    "Sqrt": (np.sqrt, 0, 5),
    "Reciprocal": (lambda v: 1.0 / v, 0.5, 4),
    "Tanh": (np.tanh, -3, 3),
    "Sigmoid": (lambda v: (np.tanh(v / 2) + 1) / 2, -6, 6),
    "Relu": (lambda v: np.where(v > 0, v, 0), -3, 3),
    "LeakyRelu": (lambda v: np.where(v < 0, 0.01 * v, v), -3, 3),
    "Elu": (lambda v: np.where(v < 0, np.exp(v) - 1, v), -3, 3),
    "Gelu": (lambda v: 0.5 * v * (1 + _erf64(v / math.sqrt(2))), -3, 3),
    "Erf": (_erf64, -2, 2),
    "Softplus": (lambda v: np.log(np.exp(v) + 1), -5, 5),
    "Sin": (np.sin, -3, 3),
    "Cos": (np.cos, -3, 3),
    "Floor": (np.floor, -3, 3),
    "Ceil": (np.ceil, -3, 3),
    "Round": (np.round, -3, 3),
    "Sign": (np.sign, -3, 3),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), op_dtype_cases(list(UNARY)), ids=str)
def test_unary(op: str, dtype: DType, shape: tuple[int, ...]) -> None:
    fn, low, high = UNARY[op]
    x = random_array(dtype, shape, seed=1, low=low, high=high)
    [out] = run_op(op, [x])
    check(out, fn(as64(x)), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_not(shape: tuple[int, ...]) -> None:
    x = random_array(B8, shape)
    [out] = run_op("Not", [x])
    check(out, ~x, B8)


@pytest.mark.parametrize("dtype", dtypes_of("IsNaN", "T1"), ids=str)
def test_isnan(dtype: DType) -> None:
    x = np.array([1.0, np.nan, -np.inf, 0.0, np.nan]).astype(dtype.numpy)
    [out] = run_op("IsNaN", [x])
    check(out, np.array([False, True, False, False, True]), B8)
    [empty] = run_op("IsNaN", [np.zeros((0, 2), dtype.numpy)])
    check(empty, np.zeros((0, 2), bool), B8)


def test_abs_neg_wrap_int_min() -> None:
    x = np.array([-128, 127, 0, -1], np.int8)
    check(run_op("Abs", [x])[0], np.array([-128, 127, 0, 1]), I8)
    check(run_op("Neg", [x])[0], np.array([-128, -127, 0, 1]), I8)
    check(run_op("Abs", [np.array([0, 200, 255], np.uint8)])[0], np.array([0, 200, 255]), U8)


def test_sign_special_values() -> None:
    [out] = run_op("Sign", [np.array([np.nan, -0.0, 0.0, -np.inf, 2.5], np.float32)])
    np.testing.assert_array_equal(out, np.array([np.nan, 0, 0, -1, 1], np.float32))
    check(run_op("Sign", [np.array([0, 3, 255], np.uint8)])[0], np.array([0, 1, 1]), U8)


@pytest.mark.parametrize("dtype", dtypes_of("Round"), ids=str)
def test_round_half_to_even(dtype: DType) -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -4.5, 0.9, 2.3, -2.7, -0.0, np.inf, np.nan])
    [out] = run_op("Round", [x.astype(dtype.numpy)])
    expected = np.array([0, 2, 2, -0.0, -4, 1, 2, -3, -0.0, np.inf, np.nan])
    np.testing.assert_array_equal(out.astype(np.float64), expected)
    assert np.signbit(out[[3, 8]].astype(np.float64)).all()


def test_floor_ceil_special_values() -> None:
    x = np.array([-0.0, np.inf, -np.inf, np.nan, -1.5, 1.5], np.float32)
    np.testing.assert_array_equal(run_op("Floor", [x])[0],
                                  np.array([-0.0, np.inf, -np.inf, np.nan, -2, 1], np.float32))
    np.testing.assert_array_equal(run_op("Ceil", [x])[0],
                                  np.array([-0.0, np.inf, -np.inf, np.nan, -1, 2], np.float32))


@pytest.mark.filterwarnings("error")
def test_unary_domain_edges_are_defined_without_warnings() -> None:
    x = np.array([0.0, -1.0, np.inf], np.float32)
    np.testing.assert_array_equal(run_op("Log", [x])[0], [-np.inf, np.nan, np.inf])
    np.testing.assert_array_equal(run_op("Sqrt", [x])[0], [0.0, np.nan, np.inf])
    np.testing.assert_array_equal(run_op("Reciprocal", [x])[0], [np.inf, -1.0, 0.0])
    np.testing.assert_array_equal(run_op("Exp", [np.array([1000.0], np.float32)])[0], [np.inf])


@pytest.mark.filterwarnings("error")
def test_sigmoid_saturates() -> None:
    x = np.array([-1000.0, 1000.0, -np.inf, np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(run_op("Sigmoid", [x])[0], [0.0, 1.0, 0.0, 1.0, 0.5])


def test_erf_hand_values() -> None:
    x = np.array([0.0, 0.5, 1.0, -2.0, np.inf, -np.inf])
    expected = [0.0, 0.5204998778130465, 0.8427007929497149, -0.9953222650189527, 1.0, -1.0]
    np.testing.assert_allclose(run_op("Erf", [x])[0], expected, rtol=1e-15)


def test_gelu_hand_values() -> None:
    x = np.array([1.0, -1.0, 0.0, 3.0])
    exact = [0.8413447460685429, -0.15865525393145707, 0.0, 2.99595030590511]
    np.testing.assert_allclose(run_op("Gelu", [x])[0], exact, rtol=1e-14)
    scale = math.sqrt(2 / math.pi)
    approx = [0.5 * v * (1 + math.tanh(scale * (v + 0.044715 * v**3))) for v in x]
    np.testing.assert_allclose(run_op("Gelu", [x], {"approximate": "tanh"})[0], approx,
                               rtol=1e-14)
    assert approx[0] != pytest.approx(exact[0], rel=1e-6)  # the two modes really differ


@pytest.mark.filterwarnings("error")
def test_softplus_large_inputs_do_not_overflow() -> None:
    x = np.array([100.0, -100.0, 0.0, 1000.0], np.float32)
    [out] = run_op("Softplus", [x])
    np.testing.assert_allclose(out, [100.0, 0.0, math.log(2), 1000.0], rtol=1e-6, atol=1e-30)
    [out64] = run_op("Softplus", [np.array([-100.0, 800.0])])
    np.testing.assert_allclose(out64, [math.exp(-100.0), 800.0], rtol=1e-12)


@pytest.mark.parametrize("dtype", dtypes_of("LeakyRelu"), ids=str)
def test_leaky_relu_and_elu_alpha(dtype: DType) -> None:
    x = np.array([-2.0, -0.5, 0.0, 1.5]).astype(dtype.numpy)
    check(run_op("LeakyRelu", [x], {"alpha": 0.25})[0], [-0.5, -0.125, 0.0, 1.5], dtype)
    expected = [0.5 * (math.exp(-2.0) - 1), 0.5 * (math.exp(-0.5) - 1), 0.0, 1.5]
    check(run_op("Elu", [x], {"alpha": 0.5})[0], expected, dtype)


# --------------------------------------------------------------------------- binary ops


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda p, q: abs(p) // abs(q) * (1 if (p < 0) == (q < 0) else -1),
                        otypes=[np.int64])(a, b)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a / b if a.dtype.kind == "f" else _int_div(a, b)


def _python_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.vectorize(lambda p, q: p % q, otypes=[np.float64])(a, b)
    return out.astype(a.dtype)


def _c_fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.vectorize(math.fmod, otypes=[np.float64])(a, b)
    return out.astype(a.dtype)


ARITHMETIC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _div,
    "Mod": _python_mod,
    "Max": np.maximum,
    "Min": np.minimum,
}
COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Equal": np.equal,
    "Less": lambda a, b: a < b,
    "Greater": lambda a, b: a > b,
    "LessOrEqual": lambda a, b: a <= b,
    "GreaterOrEqual": lambda a, b: a >= b,
}
LOGIC: dict[str, list[bool]] = {
    # truth table of (F,F), (F,T), (T,F), (T,T)
    "And": [False, False, False, True],
    "Or": [False, True, True, True],
    "Xor": [False, True, True, False],
}


def _nonzero(b: np.ndarray) -> np.ndarray:
    return np.where(b == 0, b.dtype.type(2), b)


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), op_dtype_cases(list(ARITHMETIC)), ids=str)
def test_arithmetic(op: str, dtype: DType, shapes: tuple[tuple[int, ...], ...]) -> None:
    a = random_array(dtype, shapes[0], seed=2)
    b = random_array(dtype, shapes[1], seed=3)
    if op in ("Div", "Mod"):
        b = _nonzero(b)
    [out] = run_op(op, [a, b])
    # int64 expectations cast back with astype wrap exactly like two's complement.
    check(out, ARITHMETIC[op](as64(a), as64(b)), dtype)


@pytest.mark.parametrize("shapes", BINARY_SHAPES[:3], ids=str)
@pytest.mark.parametrize("dtype", dtypes_of("Mod"), ids=str)
def test_mod_fmod(dtype: DType, shapes: tuple[tuple[int, ...], ...]) -> None:
    a = random_array(dtype, shapes[0], seed=4, low=-9, high=9)
    b = _nonzero(random_array(dtype, shapes[1], seed=5))
    [out] = run_op("Mod", [a, b], {"fmod": 1})
    check(out, _c_fmod(as64(a), as64(b)), dtype)


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), op_dtype_cases(list(COMPARISONS)), ids=str)
def test_comparison(op: str, dtype: DType, shapes: tuple[tuple[int, ...], ...]) -> None:
    a, b = small_ints(dtype, shapes[0], seed=6), small_ints(dtype, shapes[1], seed=7)
    [out] = run_op(op, [a, b])
    check(out, COMPARISONS[op](as64(a), as64(b)), B8)


@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_comparison_nan_is_false(op: str) -> None:
    a = np.array([np.nan, np.nan, 1.0], np.float32)
    b = np.array([np.nan, 1.0, np.nan], np.float32)
    check(run_op(op, [a, b])[0], [False, False, False], B8)


@pytest.mark.parametrize("op", sorted(LOGIC))
def test_logic_truth_table_broadcast(op: str) -> None:
    a = np.array([[False], [True]])
    b = np.array([False, True])
    [out] = run_op(op, [a, b])
    check(out, np.array(LOGIC[op]).reshape(2, 2), B8)
    [empty] = run_op(op, [np.zeros((0, 2), bool), np.array(True)])
    check(empty, np.zeros((0, 2), bool), B8)


def test_integer_div_truncates_and_defines_zero_divisor() -> None:
    a = np.array([-7, 7, -7, 7, 5, -128, 0], np.int8)
    b = np.array([2, 2, -2, -2, 0, -1, 0], np.int8)
    check(run_op("Div", [a, b])[0], [-3, 3, 3, -3, 0, -128, 0], I8)
    check(run_op("Div", [np.array([7, 255, 5], np.uint8), np.array([2, 16, 0], np.uint8)])[0],
          [3, 15, 0], U8)
    big = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64)
    check(run_op("Div", [big, np.array([-1, -1], np.int64)])[0],
          [np.iinfo(np.int64).min, -np.iinfo(np.int64).max], I64)


@pytest.mark.filterwarnings("error")
def test_float_div_by_zero() -> None:
    [out] = run_op("Div", [np.array([1.0, -1.0, 0.0], np.float32), np.array(0.0, np.float32)])
    np.testing.assert_array_equal(out, [np.inf, -np.inf, np.nan])


@pytest.mark.filterwarnings("error")
def test_integer_mod_signs_and_zero_divisor() -> None:
    a = np.array([-7, 7, -7, 7, 5, -128], np.int8)
    b = np.array([2, 2, -2, -2, 0, -1], np.int8)
    check(run_op("Mod", [a, b])[0], [1, 1, -1, -1, 5, 0], I8)
    check(run_op("Mod", [a, b], {"fmod": 1})[0], [-1, 1, -1, 1, 5, 0], I8)


@pytest.mark.filterwarnings("error")
def test_float_mod_special_cases() -> None:
    inf, nan = np.inf, np.nan
    a = np.array([0.0, -0.0, 3.0, -3.0, inf, 3.0, nan, 5.5, -5.5])
    b = np.array([-3.0, 3.0, inf, inf, 2.0, 0.0, 1.0, -2.0, 2.0])
    [floor_mod] = run_op("Mod", [a, b])
    np.testing.assert_array_equal(floor_mod, [-0.0, 0.0, 3.0, inf, nan, nan, nan, -0.5, 0.5])
    assert np.signbit(floor_mod[0]) and not np.signbit(floor_mod[1])
    [c_fmod] = run_op("Mod", [a, b], {"fmod": 1})
    np.testing.assert_array_equal(c_fmod, [0.0, -0.0, 3.0, -3.0, nan, nan, nan, 1.5, -1.5])


def test_max_min_propagate_nan() -> None:
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(run_op("Max", [a, b])[0], [np.nan, np.nan, 2.0])
    np.testing.assert_array_equal(run_op("Min", [a, b])[0], [np.nan, np.nan, 1.0])


# --------------------------------------------------------------------------- Pow


def _pow_expected(x: np.ndarray, y: np.ndarray, dtype: DType) -> np.ndarray:
    """x ** y with Python numbers: exact ints wrapped to ``dtype``, floats in float64."""

    def one(p: float, q: float) -> float:
        if dtype.is_float:
            return float(p) ** float(q)
        if float(q).is_integer() and q >= 0:
            bits = dtype.itemsize * 8
            wrapped = int(p) ** int(q) % (1 << bits)
            return wrapped - (1 << bits) if wrapped >= 1 << (bits - 1) else wrapped
        return math.trunc(float(p) ** float(q))

    return np.vectorize(one, otypes=[object])(x, y)


@pytest.mark.parametrize("shapes", BINARY_SHAPES[:3], ids=str)
@pytest.mark.parametrize("exp_dtype", dtypes_of("Pow", "T1"), ids=str)
@pytest.mark.parametrize("dtype", dtypes_of("Pow"), ids=str)
def test_pow(dtype: DType, exp_dtype: DType, shapes: tuple[tuple[int, ...], ...]) -> None:
    x = random_array(dtype, shapes[0], seed=8, low=0, high=4)
    y = random_array(exp_dtype, shapes[1], seed=9, low=0, high=3)
    if exp_dtype.is_float:
        y = (np.round(y.astype(np.float64) * 2) / 2).astype(exp_dtype.numpy)  # halves
    [out] = run_op("Pow", [x, y])
    expected = _pow_expected(as64(x), as64(y), dtype)
    check(out, expected.astype(np.float64 if dtype.is_float else np.int64), dtype)


def test_integer_pow_negative_exponents_and_wrap() -> None:
    x = np.array([1, -1, -1, 2, 0, -3, 3, 2], np.int32)
    y = np.array([-5, -2, -3, -1, -1, -2, 40, 31], np.int64)
    wrapped = (3**40 + 2**31) % 2**32 - 2**31
    check(run_op("Pow", [x, y])[0], [1, 1, -1, 0, 0, 0, wrapped, -(2**31)], I32)


def test_integer_pow_float_exponent_truncates() -> None:
    x = np.array([4, 3, -2, 2, 10], np.int64)
    y = np.array([0.5, 2.5, 0.5, -1.0, 30.0], np.float32)
    # 3**2.5 = 15.59 -> 15; sqrt(-2) = NaN -> 0; 2**-1 -> 0; 10**30 saturates.
    check(run_op("Pow", [x, y])[0], [2, 15, 0, 0, np.iinfo(np.int64).max], I64)


@pytest.mark.filterwarnings("error")
def test_float_pow_int_exponent() -> None:
    x = np.array([2.0, -2.0, 0.0, -8.0], np.float32)
    y = np.array([3, 3, -1, 0], np.int64)
    np.testing.assert_array_equal(run_op("Pow", [x, y])[0], [8.0, -8.0, np.inf, 1.0])
    [out] = run_op("Pow", [np.array([-8.0], np.float32), np.array([0.5], np.float32)])
    assert np.isnan(out).all()


# --------------------------------------------------------------------------- Where, Clip


@pytest.mark.parametrize("dtype", dtypes_of("Where"), ids=str)
def test_where(dtype: DType) -> None:
    cond = np.array([[True], [False]])
    x = random_array(dtype, (1, 3), seed=10)
    y = random_array(dtype, (), seed=11)
    [out] = run_op("Where", [cond, x, y])
    expected = np.array([list(as64(x)[0]), [as64(y)] * 3])
    check(out, expected, dtype)
    [empty] = run_op("Where", [np.zeros((0, 1), bool), x, y])
    check(empty, np.zeros((0, 3)), dtype)


CLIP_BOUNDS = [(None, None), (-1, None), (None, 1), (-1, 2), (2, 1)]


@pytest.mark.parametrize("bounds", CLIP_BOUNDS, ids=str)
@pytest.mark.parametrize("dtype", dtypes_of("Clip"), ids=str)
def test_clip(dtype: DType, bounds: tuple[int | None, int | None]) -> None:
    lo, hi = bounds
    if dtype is U8 and lo is not None and lo < 0:
        lo = 1
    x = random_array(dtype, (2, 3), seed=12)
    args = [x, None if lo is None else np.array(lo, dtype.numpy),
            None if hi is None else np.array(hi, dtype.numpy)]
    [out] = run_op("Clip", args)
    expected = as64(x)
    if lo is not None:
        expected = np.where(expected < lo, lo, expected)
    if hi is not None:
        expected = np.where(expected > hi, hi, expected)  # lo > hi: everything is hi
    check(out, expected, dtype)


def test_clip_scalar_empty_and_nan() -> None:
    lo, hi = np.array(0.0, np.float32), np.array(1.0, np.float32)
    check(run_op("Clip", [np.array(5.0, np.float32), lo, hi])[0], np.array(1.0), F32)
    check(run_op("Clip", [np.zeros((0, 2), np.float32), lo, hi])[0], np.zeros((0, 2)), F32)
    [out] = run_op("Clip", [np.array([np.nan, -3.0], np.float32), lo, hi])
    np.testing.assert_array_equal(out, [np.nan, 0.0])


# --------------------------------------------------------------------------- variadic


VARIADIC_SHAPES = [(2, 1, 3), (4, 1), (3,)]


def _variadic_expected(op: str, xs: list[np.ndarray]) -> np.ndarray:
    widened = [as64(x) for x in xs]
    if op == "Sum":
        return sum(widened[1:], widened[0])
    if op == "Mean":
        return sum(widened[1:], widened[0]) / len(xs)
    out = widened[0]
    for x in widened[1:]:
        out = np.where(x > out, x, out) if op == "Max" else np.where(x < out, x, out)
    return out + np.zeros(np.broadcast_shapes(*(x.shape for x in xs)), out.dtype)


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize(("op", "dtype"), op_dtype_cases(["Sum", "Mean", "Max", "Min"]),
                         ids=str)
def test_variadic(op: str, dtype: DType, count: int) -> None:
    xs = [random_array(dtype, s, seed=20 + i) for i, s in enumerate(VARIADIC_SHAPES[:count])]
    [out] = run_op(op, xs)
    check(out, _variadic_expected(op, xs), dtype)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic_scalar_and_empty(op: str) -> None:
    scalars = [np.array(1.0, np.float32), np.array(4.0, np.float32)]
    expected = {"Sum": 5.0, "Mean": 2.5, "Max": 4.0, "Min": 1.0}[op]
    check(run_op(op, scalars)[0], np.array(expected), F32)
    [empty] = run_op(op, [np.zeros((0, 3), np.float32), np.ones((3,), np.float32)])
    check(empty, np.zeros((0, 3)), F32)


# --------------------------------------------------------------------------- Cast


@pytest.mark.parametrize("to", dtypes_of("Cast", "T2"), ids=str)
@pytest.mark.parametrize("source", dtypes_of("Cast", "T1"), ids=str)
def test_cast_every_pair(source: DType, to: DType) -> None:
    values = [False, True, True] if source is B8 else [0, 1, 3]
    [out] = run_op("Cast", [np.array(values, source.numpy)], {"to": to})
    check(out, np.array([int(v) for v in values]), to)


@pytest.mark.parametrize("shape", [(), (0, 2)], ids=str)
def test_cast_scalar_and_empty(shape: tuple[int, ...]) -> None:
    x = np.full(shape, 2.5, np.float32)
    check(run_op("Cast", [x], {"to": I16})[0], np.full(shape, 2), I16)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("to", [d for d in dtypes_of("Cast", "T2") if d.is_int], ids=str)
@pytest.mark.parametrize("source", [F16, BF16, F32, F64], ids=str)
def test_cast_float_to_int_truncates_and_saturates(source: DType, to: DType) -> None:
    info = np.iinfo(to.numpy)
    with np.errstate(over="ignore"):  # 1e30 is inf in float16: still out of range
        x = np.array([2.7, -2.7, 0.5, -0.5, np.nan, np.inf, -np.inf, 1e30, -1e30, 1.0]
                     ).astype(source.numpy)
    expected = [2, max(-2, info.min), 0, 0, 0, info.max, info.min, info.max, info.min, 1]
    check(run_op("Cast", [x], {"to": to})[0], np.array(expected, np.int64), to)


def test_cast_float64_to_int64_at_the_boundary() -> None:
    x = np.array([2.0**63, -(2.0**63), 2.0**63 - 1024, -(2.0**63) - 4096])
    expected = [2**63 - 1, -(2**63), 2**63 - 1024, -(2**63)]
    check(run_op("Cast", [x], {"to": I64})[0], np.array(expected, np.int64), I64)


def test_cast_int_to_narrower_int_wraps() -> None:
    check(run_op("Cast", [np.array([200, -200, 300], np.int16)], {"to": I8})[0],
          np.array([-56, 56, 44]), I8)
    check(run_op("Cast", [np.array([-1, 256, 257], np.int32)], {"to": "uint8"})[0],
          np.array([255, 0, 1]), U8)


@pytest.mark.filterwarnings("error")
def test_cast_to_bool_and_float_overflow() -> None:
    x = np.array([0.0, -0.0, 0.5, np.nan, -np.inf])
    check(run_op("Cast", [x], {"to": B8})[0], [False, False, True, True, True], B8)
    check(run_op("Cast", [np.array([0, -3, 7], np.int8)], {"to": B8})[0],
          [False, True, True], B8)
    [half] = run_op("Cast", [np.array([1e6, -1e6, 1.0])], {"to": F16})
    np.testing.assert_array_equal(half, np.array([np.inf, -np.inf, 1.0], np.float16))
    [from_int] = run_op("Cast", [np.array([70000, 3], np.int64)], {"to": F16})
    np.testing.assert_array_equal(from_int, np.array([np.inf, 3.0], np.float16))


def test_cast_rounds_to_nearest_even() -> None:
    # 1 + 2**-11 lies halfway between two float16 values: ties go to the even one (1.0).
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11], np.float64)
    [out] = run_op("Cast", [x], {"to": F16})
    np.testing.assert_array_equal(out.astype(np.float64), [1.0, 1 + 2**-9])


# --------------------------------------------------------------------------- inference


UNARY_OPS = [*UNARY, "Not", "IsNaN"]
BINARY_OPS = [*ARITHMETIC, "Pow", *COMPARISONS, *LOGIC]


def _first_dtype(op: str, index: int = 0) -> DType:
    spec = get_op(op).input_spec(index)
    return dtypes_of(op, spec.type_var)[-1]


@pytest.mark.parametrize("op", UNARY_OPS)
def test_infer_unary_symbolic(op: str) -> None:
    dtype = _first_dtype(op)
    out = infer_type(op, [dtype["batch", "2*n"]])
    expected_dtype = B8 if op == "IsNaN" else dtype
    assert out == TensorType(expected_dtype, ("batch", "2*n"))


@pytest.mark.parametrize("op", BINARY_OPS)
def test_infer_binary_symbolic(op: str) -> None:
    a_dtype, b_dtype = _first_dtype(op, 0), _first_dtype(op, 1)
    out_dtype = B8 if op in COMPARISONS or op in LOGIC else a_dtype
    out = infer_type(op, [a_dtype["batch", 1], b_dtype[4]])
    assert out == TensorType(out_dtype, ("batch", 4))
    assert infer_type(op, [a_dtype["n", "m"], b_dtype["m"]]).shape == ("n", "m")
    fresh = infer_type(op, [a_dtype["a"], b_dtype["b"]]).shape[0]
    assert isinstance(fresh, str) and fresh.startswith("_")
    assert infer_type(op, [a_dtype[()], b_dtype[()]]).shape == ()


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_infer_variadic_symbolic(op: str) -> None:
    out = infer_type(op, [F32["b", 1, 1], F32[1, "c", 1], F32["k"]])
    assert out == F32["b", "c", "k"]
    assert infer_type(op, [F32["b", 3]]) == F32["b", 3]


def test_infer_where_clip_cast_symbolic() -> None:
    assert infer_type("Where", [B8["n", 1], I8[1, "m"], I8[()]]) == I8["n", "m"]
    assert infer_type("Clip", [F32["n", 3], F32[()], None]) == F32["n", 3]
    assert infer_type("Clip", [U8["n"], None, U8[()]]) == U8["n"]
    assert infer_type("Cast", [F32["batch", "n+1"]], {"to": I8}) == I8["batch", "n+1"]
    assert infer_type("Cast", [I64["b"]], {"to": "float16"}) == F16["b"]
    assert infer_type("Pow", [I32["n", 1], F64[3]]) == I32["n", 3]


INFER_ERRORS = [
    ("Add", [F32[3], F32[4]], {}, "broadcast"),
    ("Where", [B8[2], F32[3], F32[3]], {}, "broadcast"),
    ("Sum", [F32[2, 3], F32[3], F32[5, 1, 1, 2]], {}, "broadcast"),
    ("Add", [F32[3], I32[3]], {}, "must match"),
    ("Pow", [I8[3], I8[3]], {}, "allowed"),
    ("Less", [B8[3], B8[3]], {}, "allowed"),
    ("Sum", [], {}, "data_0"),
    ("Mod", [I32[3], I32[3]], {"fmod": 2}, "fmod"),
    ("Gelu", [F32[3]], {"approximate": "erf"}, "approximate"),
    ("Cast", [F32[3]], {"to": I8, "round_mode": "sideways"}, "round_mode"),
    ("Cast", [F32[3]], {"to": I8, "saturate": 3}, "saturate"),
    ("Cast", [F32[3]], {}, "'to'"),
    ("Clip", [F32[3], F32[1], None], {}, "min"),
    ("Clip", [F32[3], None, F32["n"]], {}, "max"),
    ("LeakyRelu", [F32[3]], {"alpha": "big"}, "alpha"),
]


@pytest.mark.parametrize(("op", "types", "attrs", "needle"), INFER_ERRORS,
                         ids=[f"{e[0]}-{e[3]}" for e in INFER_ERRORS])
def test_infer_errors(op: str, types: list, attrs: dict, needle: str) -> None:
    with pytest.raises(VerificationError, match=needle):
        if types:
            infer_type(op, types, attrs)
        else:
            from polyhal.ir import GraphBuilder

            GraphBuilder().op(op)


# --------------------------------------------------------------------------- decompositions


DECOMPOSITIONS = [
    ("Gelu", 1, {}),
    ("Gelu", 1, {"approximate": "none"}),
    ("Gelu", 1, {"approximate": "tanh"}),
    ("Softplus", 1, {}),
    ("LeakyRelu", 1, {}),
    ("LeakyRelu", 1, {"alpha": 0.2}),
    ("Elu", 1, {}),
    ("Elu", 1, {"alpha": 0.5}),
    ("Mean", 1, {}),
    ("Mean", 2, {}),
    ("Mean", 3, {}),
]


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize(("op", "count", "attrs"), DECOMPOSITIONS, ids=str)
def test_decomposition_matches_kernel(op: str, count: int, attrs: dict, dtype: DType) -> None:
    shapes = VARIADIC_SHAPES if op == "Mean" else [(3, 5)]
    xs = [random_array(dtype, s, seed=30 + i, low=-6, high=6)
          for i, s in enumerate(shapes[:count])]
    [expected] = run_op(op, xs, attrs)
    [got] = run_decomposed(op, xs, attrs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bounds", CLIP_BOUNDS, ids=str)
@pytest.mark.parametrize("dtype", [F32, F64, I32], ids=str)
def test_clip_decomposition(dtype: DType, bounds: tuple[int | None, int | None]) -> None:
    lo, hi = bounds
    x = random_array(dtype, (3, 4), seed=40)
    args = [x, None if lo is None else np.array(lo, dtype.numpy),
            None if hi is None else np.array(hi, dtype.numpy)]
    while args and args[-1] is None:
        args.pop()  # trailing optional inputs left off, as a node would
    np.testing.assert_array_equal(run_decomposed("Clip", args)[0], run_op("Clip", args)[0])


def test_softplus_decomposition_wide_range() -> None:
    x = np.linspace(-60, 60, 41)
    np.testing.assert_allclose(run_decomposed("Softplus", [x])[0], run_op("Softplus", [x])[0],
                               rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------- schema vs ONNX


MY_OPS = sorted([*UNARY_OPS, *BINARY_OPS, "Where", "Clip", "Sum", "Mean", "Cast"])
_ONNX_TYPES = {"bool": B8, "int8": I8, "uint8": U8, "int16": I16, "int32": I32, "int64": I64,
               "float16": F16, "bfloat16": BF16, "float": F32, "double": F64}


@pytest.mark.parametrize("op", MY_OPS)
def test_schema_follows_onnx(op: str) -> None:
    from onnx import defs
    schema = defs.get_schema(op)
    mine = get_op(op)
    assert mine.onnx_since == schema.since_version
    assert [i.name for i in mine.inputs] == [i.name for i in schema.inputs]
    assert [o.name for o in mine.outputs] == [o.name for o in schema.outputs]
    assert {a.name for a in mine.attrs} == set(schema.attributes)
    for spec, onnx_in in zip(mine.inputs, schema.inputs, strict=True):
        allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        onnx_types = {_ONNX_TYPES[t[7:-1]] for t in allowed[onnx_in.type_str]
                      if t[7:-1] in _ONNX_TYPES}
        assert mine.type_vars[spec.type_var] == onnx_types, spec.name
        assert spec.optional == (onnx_in.option.name == "Optional")
        assert spec.variadic == (onnx_in.option.name == "Variadic")


def test_differentiability_flags() -> None:
    for op in ("Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "Equal", "And", "Less"):
        assert not get_op(op).differentiable, op
    for op in ("Gelu", "Softplus", "Div", "Pow", "Where", "Clip", "Sum", "Mean", "Cast", "Max"):
        assert get_op(op).differentiable, op
