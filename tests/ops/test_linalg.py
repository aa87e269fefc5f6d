"""Linear algebra: MatMul and Gemm (and Gemm's decomposition)."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal.errors import ExecutionError, VerificationError
from polyhal.ir import DType, f32, f64, i32
from polyhal.ops import get_op
from tests.helpers import infer_type, random_array, run_decomposed, run_op


def _dtypes(op: str) -> list[DType]:
    return sorted(get_op(op).type_vars["T"], key=lambda d: d.value)


def _reference_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Matmul by explicit sums of products, in float64 or int64."""
    dtype = DType.from_numpy(a.dtype)
    wide = np.float64 if dtype.is_float else np.int64
    a2 = a.astype(wide)[None, :] if a.ndim == 1 else a.astype(wide)
    b2 = b.astype(wide)[:, None] if b.ndim == 1 else b.astype(wide)
    y = (a2[..., :, :, None] * b2[..., None, :, :]).sum(axis=-2)
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return y


def _assert_close(got: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    assert got.dtype == dtype.numpy
    assert got.shape == np.shape(expected)
    if dtype.is_low_precision:
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-2, atol=0.1)
    elif dtype.is_float:
        rtol = 1e-5 if dtype is DType.FLOAT32 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(dtype.numpy))


# -------------------------------------------------------------------- MatMul

MATMUL_SHAPES = [
    ((2, 3), (3, 4)),
    ((2, 1, 2, 3), (5, 3, 2)),   # batch broadcast
    ((3,), (3, 4)),              # 1-D A
    ((2, 2, 3), (3,)),           # 1-D B
    ((3,), (3,)),                # both 1-D: a scalar
    ((2, 0), (0, 3)),            # empty K: zeros
    ((0, 3), (3, 2)),            # empty M
]


@pytest.mark.parametrize("dtype", _dtypes("MatMul"))
@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES)
def test_matmul_every_dtype(dtype: DType, sa: tuple, sb: tuple) -> None:
    a = random_array(dtype, sa, seed=1)
    b = random_array(dtype, sb, seed=2)
    (got,) = run_op("MatMul", [a, b])
    _assert_close(got, _reference_matmul(a, b), dtype)


def test_matmul_int32_wraps() -> None:
    a = np.array([[2**30, 2**30]], np.int32)
    b = np.array([[2], [2]], np.int32)
    assert run_op("MatMul", [a, b])[0][0, 0] == 0  # 2**32 wraps to 0


def test_matmul_infer_symbolic() -> None:
    assert infer_type("MatMul", [f32["b", "s", 4], f32[4, 8]]) == f32["b", "s", 8]
    assert infer_type("MatMul", [f32["b", 1, "m", "k"], f32["h", "k", 5]]) == \
        f32["b", "h", "m", 5]
    assert infer_type("MatMul", [f32["k"], f32["b", "k", 3]]) == f32["b", 3]
    assert infer_type("MatMul", [f32["b", 3, 4], f32[4]]) == f32["b", 3]


@pytest.mark.parametrize(("a", "b", "match"), [
    (f32[2, 3], f32[4, 5], "inner dimensions"),
    (f32[()], f32[3], "input A"),
    (f32[3], f32[()], "input B"),
    (f32[2, 2, 3], f32[3, 3, 1], "broadcast"),
])
def test_matmul_infer_errors(a, b, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("MatMul", [a, b])


def test_matmul_rejects_int8() -> None:
    with pytest.raises(VerificationError, match="dtype"):
        infer_type("MatMul", [DType.INT8[2, 2], DType.INT8[2, 2]])


def test_matmul_runtime_inner_mismatch_is_named_in_the_verifiers_words() -> None:
    a = np.ones((2, 3), np.float32)
    b = np.ones((4, 2), np.float32)
    from polyhal.ir import GraphBuilder
    from polyhal.reference import run

    g = GraphBuilder()
    g.output(g.input("a", f32[2, "k"]) @ g.input("b", f32["j", 2]), name="y")
    # k and j verify as different symbols; bound to 3 and 4 the kernel cannot run, and the
    # error says why as the verifier would have, not in numpy's gufunc terms.
    with pytest.raises(ExecutionError, match=r"node 'matmul_1' \(core.MatMul\) failed on "
                       r"inputs \(float32\[2, 3\], float32\[4, 2\]\): inner dimensions differ: "
                       r"A is float32\[2, 3\] \(K=3\), B is float32\[4, 2\] \(K=4\)$"):
        run(g.build(), a, b)


def test_a_broadcast_the_bound_sizes_break_is_named_in_the_verifiers_words() -> None:
    from polyhal.ir import GraphBuilder
    from polyhal.reference import run

    g = GraphBuilder()
    g.output(g.input("a", f32[3, "n", 5]) + g.input("b", f32[4, 5]), name="y")
    with pytest.raises(ExecutionError, match=r"failed on inputs \(float32\[3, 2, 5\], "
                       r"float32\[4, 5\]\): cannot broadcast dimension 2 \(from the right\): "
                       r"2 vs 4$"):
        run(g.build(), np.ones((3, 2, 5), np.float32), np.ones((4, 5), np.float32))


# ---------------------------------------------------------------------- Gemm


def _reference_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float,
                    beta: float, trans_a: int, trans_b: int) -> np.ndarray:
    a2 = a.T if trans_a else a
    b2 = b.T if trans_b else b
    y = alpha * _reference_matmul(a2, b2)
    if c is not None:
        wide = np.float64 if y.dtype == np.float64 else np.int64
        y = y + beta * c.astype(wide)
    return y


C_SHAPES = [None, (), (1,), (4,), (3, 1), (1, 4), (3, 4)]


@pytest.mark.parametrize("dtype", _dtypes("Gemm"))
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_every_dtype(dtype: DType, trans_a: int, trans_b: int) -> None:
    a = random_array(dtype, (2, 3) if trans_a else (3, 2), seed=1)
    b = random_array(dtype, (4, 2) if trans_b else (2, 4), seed=2)
    c = random_array(dtype, (3, 4), seed=3)
    attrs = {"alpha": 2.0, "beta": 3.0, "transA": trans_a, "transB": trans_b}
    (got,) = run_op("Gemm", [a, b, c], attrs)
    _assert_close(got, _reference_gemm(a, b, c, 2.0, 3.0, trans_a, trans_b), dtype)


@pytest.mark.parametrize("c_shape", C_SHAPES)
def test_gemm_c_broadcast(c_shape: tuple | None) -> None:
    a = random_array(DType.FLOAT64, (3, 5), seed=4)
    b = random_array(DType.FLOAT64, (5, 4), seed=5)
    c = None if c_shape is None else random_array(DType.FLOAT64, c_shape, seed=6)
    inputs = [a, b] if c is None else [a, b, c]
    (got,) = run_op("Gemm", inputs, {"alpha": 0.5, "beta": -1.5})
    _assert_close(got, _reference_gemm(a, b, c, 0.5, -1.5, 0, 0), DType.FLOAT64)


def test_gemm_hand_values() -> None:
    a = np.array([[1, 2], [3, 4]], np.float32)
    b = np.array([[1, 0], [0, 1]], np.float32)
    c = np.array([10, 20], np.float32)
    (got,) = run_op("Gemm", [a, b, c], {"alpha": 2.0, "beta": 0.5, "transA": 1})
    np.testing.assert_array_equal(got, [[7, 16], [9, 18]])


@pytest.mark.parametrize(("sa", "sb"), [((0, 3), (3, 2)), ((2, 0), (0, 3))])
def test_gemm_empty(sa: tuple, sb: tuple) -> None:
    a = np.ones(sa, np.float32)
    b = np.ones(sb, np.float32)
    c = np.full((sa[0], sb[1]), 2.0, np.float32)
    (got,) = run_op("Gemm", [a, b, c])
    np.testing.assert_array_equal(got, c)


def test_gemm_int32_wraps() -> None:
    a = np.array([[2**30]], np.int32)
    b = np.array([[1]], np.int32)
    c = np.array([[2**31 - 1]], np.int32)
    (got,) = run_op("Gemm", [a, b, c], {"alpha": 2.0, "beta": 1.0})
    assert got[0, 0] == np.int32(-(2**31)) + np.int32(2**31 - 1)  # 2**31 wraps to -2**31


def test_gemm_infer_symbolic() -> None:
    assert infer_type("Gemm", [f32["batch", 4], f32[4, 8]]) == f32["batch", 8]
    assert infer_type("Gemm", [f32[4, "m"], f32["n", 4], f32["n"]],
                      {"transA": 1, "transB": 1}) == f32["m", "n"]
    assert infer_type("Gemm", [f32["m", "k"], f32["k", 3], f32["m", 1]]) == f32["m", 3]


@pytest.mark.parametrize(("inputs", "attrs", "match"), [
    ([f32[2, 3, 4], f32[4, 5]], {}, "input A"),
    ([f32[2, 3], f32[3]], {}, "input B"),
    ([f32[2, 3], f32[4, 5]], {}, "inner dimensions"),
    ([f32[3, 2], f32[3, 5]], {"transA": 0}, "transA"),
    ([f32[2, 3], f32[3, 5], f32[3, 5]], {}, "input C"),
    ([f32[2, 3], f32[3, 5], f32[4]], {}, "input C"),
    ([f32[2, 3], f32[3, 5], f32[1, 2, 5]], {}, "input C"),
    ([f32[2, 3], f32[3, 5]], {"transA": 2}, "transA"),
    ([f32[2, 3], f32[3, 5]], {"transB": -1}, "transB"),
    ([i32[2, 3], i32[3, 5]], {"alpha": 0.5}, "alpha"),
    ([i32[2, 3], i32[3, 5], i32[5]], {"beta": 1e20}, "beta"),
])
def test_gemm_infer_errors(inputs: list, attrs: dict, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("Gemm", inputs, attrs)


@pytest.mark.parametrize("dtype", [DType.FLOAT32, DType.FLOAT64])
@pytest.mark.parametrize("c_shape", [None, (), (4,), (3, 1), (3, 4)])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.25, -2.0)])
def test_gemm_decomposition(dtype: DType, c_shape: tuple | None, alpha: float,
                            beta: float) -> None:
    a = random_array(dtype, (3, 5), seed=7)
    b = random_array(dtype, (5, 4), seed=8)
    inputs = [a, b]
    if c_shape is not None:
        inputs.append(random_array(dtype, c_shape, seed=9))
    attrs = {"alpha": alpha, "beta": beta, "transA": 0, "transB": 0}
    (kernel,) = run_op("Gemm", inputs, attrs)
    (decomposed,) = run_decomposed("Gemm", inputs, attrs)
    np.testing.assert_allclose(decomposed, kernel, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [DType.FLOAT32, DType.FLOAT64])
@pytest.mark.parametrize(("trans_a", "trans_b"), [(1, 0), (0, 1), (1, 1)])
def test_gemm_decomposition_transposed(dtype: DType, trans_a: int, trans_b: int) -> None:
    """Needs Transpose (polyhal.ops.shape)."""
    a = random_array(dtype, (5, 3) if trans_a else (3, 5), seed=10)
    b = random_array(dtype, (4, 5) if trans_b else (5, 4), seed=11)
    c = random_array(dtype, (4,), seed=12)
    attrs = {"alpha": 1.5, "beta": 0.5, "transA": trans_a, "transB": trans_b}
    (kernel,) = run_op("Gemm", [a, b, c], attrs)
    (decomposed,) = run_decomposed("Gemm", [a, b, c], attrs)
    np.testing.assert_allclose(decomposed, kernel, rtol=1e-5, atol=1e-6)


def test_gemm_decomposition_int32() -> None:
    a = random_array(DType.INT32, (3, 5), seed=13)
    b = random_array(DType.INT32, (5, 4), seed=14)
    c = random_array(DType.INT32, (3, 4), seed=15)
    attrs = {"alpha": 3.0, "beta": -2.0}
    np.testing.assert_array_equal(run_decomposed("Gemm", [a, b, c], attrs)[0],
                                  run_op("Gemm", [a, b, c], attrs)[0])


def test_gemm_decomposition_keeps_symbolic_batch() -> None:
    from polyhal.ir import GraphBuilder

    g = GraphBuilder()
    a = g.input("a", f64["m", 5])
    b = g.input("b", f64[5, 4])
    y = get_op("Gemm").decompose(a, b, alpha=2.0, beta=1.0, transA=0, transB=0)
    assert y.type == f64["m", 4]
