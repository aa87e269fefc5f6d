"""Reductions: ReduceSum/Mean/Max/Min/Prod and ArgMax/ArgMin."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal.errors import ExecutionError, VerificationError
from polyhal.ir import DType, f32, i64
from polyhal.ops import get_op
from tests.helpers import infer_type, random_array, run_op

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]
ARG_OPS = ["ArgMax", "ArgMin"]


def _dtypes(op: str) -> list[DType]:
    return sorted(get_op(op).type_vars["T"], key=lambda d: d.value)


def _cases(ops: list[str]) -> list[tuple[str, DType]]:
    return [(op, dt) for op in ops for dt in _dtypes(op)]


def _expected(op: str, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Straightforward numpy, in float64 for floats and int64 for integers."""
    dtype = DType.from_numpy(x.dtype)
    if dtype.is_float:
        wide = x.astype(np.float64)
    else:
        wide = x if dtype is DType.BOOL else x.astype(np.int64)
    fn = {"ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
          "ReduceProd": np.prod}.get(op)
    if fn is not None:
        return fn(wide, axis=axes, keepdims=keepdims)
    if dtype.is_float:
        return np.mean(wide, axis=axes, keepdims=keepdims)
    return np.trunc(np.mean(wide, axis=axes, keepdims=keepdims))


def _assert_close(got: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    assert got.dtype == dtype.numpy
    assert got.shape == np.shape(expected)
    if dtype.is_low_precision:
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-2, atol=5e-2)
    elif dtype.is_float:
        rtol = 1e-5 if dtype is DType.FLOAT32 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(dtype.numpy))


# ------------------------------------------------------------ Reduce* values


@pytest.mark.parametrize(("op", "dtype"), _cases(REDUCE_OPS))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_every_dtype(op: str, dtype: DType, keepdims: int) -> None:
    x = random_array(dtype, (2, 3, 4), seed=1, low=-2, high=2)
    (got,) = run_op(op, [x, np.array([0, -1], np.int64)], {"keepdims": keepdims},
                    const_inputs=[1])
    _assert_close(got, _expected(op, x, (0, 2), bool(keepdims)), dtype)


@pytest.mark.parametrize(("op", "dtype"), _cases(REDUCE_OPS))
def test_reduce_all_axes_by_default(op: str, dtype: DType) -> None:
    x = random_array(dtype, (3, 2), seed=2, low=-2, high=2)
    (got,) = run_op(op, [x])
    _assert_close(got, _expected(op, x, (0, 1), True), dtype)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_from_graph_input(op: str) -> None:
    x = random_array(DType.FLOAT64, (2, 3, 4), seed=3)
    (got,) = run_op(op, [x, np.array([-2], np.int64)], {"keepdims": 0})
    _assert_close(got, _expected(op, x, (1,), False), DType.FLOAT64)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_scalar(op: str) -> None:
    x = np.array(2.5, np.float32)
    (got,) = run_op(op, [x], {"keepdims": 0})
    assert got.shape == () and got.dtype == np.float32 and got == 2.5


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [None, []])
def test_reduce_noop_with_empty_axes(op: str, axes: list[int] | None) -> None:
    x = random_array(DType.FLOAT32, (2, 3), seed=4)
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    (got,) = run_op(op, inputs, {"noop_with_empty_axes": 1, "keepdims": 0}, const_inputs=[1])
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_explicit_empty_axes_reduces_all(op: str) -> None:
    x = random_array(DType.FLOAT64, (2, 3), seed=5)
    (got,) = run_op(op, [x, np.zeros(0, np.int64)], {"keepdims": 0})
    _assert_close(got, _expected(op, x, (0, 1), False), DType.FLOAT64)


@pytest.mark.parametrize(("op", "value"), [
    ("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf),
    ("ReduceMin", np.inf), ("ReduceMean", np.nan)])
def test_reduce_empty_set_float(op: str, value: float) -> None:
    x = np.zeros((2, 0, 3), np.float32)
    (got,) = run_op(op, [x, np.array([1], np.int64)], {"keepdims": 1}, const_inputs=[1])
    np.testing.assert_array_equal(got, np.full((2, 1, 3), value, np.float32))


@pytest.mark.parametrize(("op", "dtype", "value"), [
    ("ReduceSum", DType.INT32, 0), ("ReduceProd", DType.INT64, 1),
    ("ReduceMean", DType.INT32, 0),
    ("ReduceMax", DType.INT8, -128), ("ReduceMax", DType.UINT8, 0),
    ("ReduceMin", DType.INT8, 127), ("ReduceMin", DType.UINT8, 255),
    ("ReduceMax", DType.BOOL, False), ("ReduceMin", DType.BOOL, True)])
def test_reduce_empty_set_int(op: str, dtype: DType, value: int) -> None:
    x = np.zeros((0, 2), dtype.numpy)
    (got,) = run_op(op, [x, np.array([0], np.int64)], {"keepdims": 0}, const_inputs=[1])
    np.testing.assert_array_equal(got, np.full((2,), value, dtype.numpy))
    assert got.dtype == dtype.numpy


def test_reduce_empty_non_reduced_dim() -> None:
    x = np.zeros((0, 3), np.float32)
    (got,) = run_op("ReduceSum", [x, np.array([1], np.int64)], {"keepdims": 0},
                    const_inputs=[1])
    assert got.shape == (0,)


def test_reduce_sum_and_prod_wrap() -> None:
    big = np.array([2**31 - 1, 1], np.int32)
    assert run_op("ReduceSum", [big], {"keepdims": 0})[0] == -(2**31)
    assert run_op("ReduceProd", [np.array([2**16, 2**16], np.int32)])[0][0] == 0


@pytest.mark.parametrize(("values", "mean"), [
    ([3, 4], 3), ([-3, -4], -3), ([-7, 0, 0], -2), ([2**62, 2**62], 2**62)])
def test_reduce_mean_int_truncates_exactly(values: list[int], mean: int) -> None:
    dtype = np.int64 if abs(values[0]) > 2**31 else np.int32
    (got,) = run_op("ReduceMean", [np.array(values, dtype)], {"keepdims": 0})
    assert got.dtype == dtype and int(got) == mean


def test_reduce_mean_int32_no_overflow() -> None:
    x = np.full(4, 2**31 - 1, np.int32)
    assert run_op("ReduceMean", [x])[0][0] == 2**31 - 1


def test_reduce_max_min_bool() -> None:
    x = np.array([[True, False], [False, False]])
    axes = np.array([1], np.int64)
    got_max = run_op("ReduceMax", [x, axes], {"keepdims": 0}, const_inputs=[1])[0]
    got_min = run_op("ReduceMin", [x, axes], {"keepdims": 0}, const_inputs=[1])[0]
    np.testing.assert_array_equal(got_max, [True, False])
    np.testing.assert_array_equal(got_min, [False, False])


def test_reduce_max_nan_propagates() -> None:
    x = np.array([1.0, np.nan, 3.0], np.float32)
    assert np.isnan(run_op("ReduceMax", [x])[0][0])


@pytest.mark.parametrize("axes", [[2], [-3], [0, 0]])
def test_reduce_runtime_bad_axes(axes: list[int]) -> None:
    with pytest.raises(ExecutionError, match="axes"):
        run_op("ReduceSum", [np.ones((2, 2), np.float32), np.array(axes, np.int64)])


# --------------------------------------------------------- Reduce* inference


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_infer_symbolic(op: str) -> None:
    data = f32["b", 3, "n"]
    axes = {1: np.array([1], np.int64)}
    assert infer_type(op, [data, i64[1]], consts=axes) == f32["b", 1, "n"]
    assert infer_type(op, [data, i64[1]], {"keepdims": 0}, consts=axes) == f32["b", "n"]
    assert infer_type(op, [data], {"keepdims": 0}) == f32[()]
    assert infer_type(op, [data], {"noop_with_empty_axes": 1}) == data


def test_reduce_infer_unknown_axes() -> None:
    kept = infer_type("ReduceSum", [f32["b", 1, 4], i64[2]])
    assert kept.rank == 3 and kept.shape[1] == 1
    assert all(isinstance(d, str) and d.startswith("_") for d in (kept.shape[0], kept.shape[2]))
    dropped = infer_type("ReduceSum", [f32["b", 1, 4], i64[2]], {"keepdims": 0})
    assert dropped.rank == 1
    assert infer_type("ReduceSum", [f32["b", 4], i64[0]], {"keepdims": 0}) == f32[()]


@pytest.mark.parametrize(("inputs", "attrs", "consts", "match"), [
    ([f32[2, 3], i64[1]], {}, {1: np.array([2])}, "axes"),
    ([f32[2, 3], i64[1]], {}, {1: np.array([-3])}, "axes"),
    ([f32[2, 3], i64[2]], {}, {1: np.array([1, -1])}, "axes"),
    ([f32[2, 3], i64[1, 1]], {}, {}, "axes"),
    ([f32[2, 3], i64[3]], {"keepdims": 0}, {}, "axes"),
    ([f32[2, 3], i64["k"]], {"keepdims": 0}, {}, "keepdims"),
    ([f32[2, 3]], {"keepdims": 2}, {}, "keepdims"),
    ([f32[2, 3]], {"noop_with_empty_axes": -1}, {}, "noop_with_empty_axes"),
])
def test_reduce_infer_errors(inputs: list, attrs: dict, consts: dict, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("ReduceSum", inputs, attrs, consts=consts)


def test_reduce_rejects_unsupported_dtype() -> None:
    with pytest.raises(VerificationError, match="dtype"):
        infer_type("ReduceSum", [DType.INT8[3]])


# ------------------------------------------------------------- ArgMax/ArgMin


@pytest.mark.parametrize(("op", "dtype"), _cases(ARG_OPS))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_every_dtype(op: str, dtype: DType, keepdims: int) -> None:
    x = random_array(dtype, (3, 4), seed=6, low=0, high=40)
    pick = np.argmax if op == "ArgMax" else np.argmin
    for axis in (0, 1, -1):
        (got,) = run_op(op, [x], {"axis": axis, "keepdims": keepdims})
        expected = pick(x.astype(np.float64), axis=axis, keepdims=bool(keepdims))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("op", "last", "expected"), [
    ("ArgMax", 0, [1, 0]), ("ArgMax", 1, [3, 2]),
    ("ArgMin", 0, [0, 1]), ("ArgMin", 1, [2, 3])])
def test_arg_ties(op: str, last: int, expected: list[int]) -> None:
    x = np.array([[1, 5, 1, 5], [7, 0, 7, 0]], np.int32)
    (got,) = run_op(op, [x], {"axis": 1, "keepdims": 0, "select_last_index": last})
    np.testing.assert_array_equal(got, expected)


def test_arg_nan_is_the_extreme() -> None:
    x = np.array([1.0, np.nan, 9.0, np.nan], np.float32)
    assert run_op("ArgMax", [x], {"keepdims": 0})[0] == 1
    assert run_op("ArgMin", [x], {"keepdims": 0})[0] == 1
    assert run_op("ArgMax", [x], {"keepdims": 0, "select_last_index": 1})[0] == 3


def test_arg_empty_other_dim() -> None:
    (got,) = run_op("ArgMax", [np.zeros((0, 3), np.float32)], {"axis": 1})
    assert got.shape == (0, 1) and got.dtype == np.int64


@pytest.mark.parametrize("op", ARG_OPS)
def test_arg_infer_symbolic(op: str) -> None:
    assert infer_type(op, [f32["b", "n", 4]], {"axis": 1}) == i64["b", 1, 4]
    assert infer_type(op, [f32["b", "n", 4]], {"axis": -1, "keepdims": 0}) == i64["b", "n"]


@pytest.mark.parametrize(("data", "attrs", "match"), [
    (f32[2, 3], {"axis": 2}, "axis"),
    (f32[2, 3], {"axis": -3}, "axis"),
    (f32[()], {}, "axis"),
    (f32[2, 0], {"axis": 1}, "axis"),
    (f32[2, 3], {"keepdims": 5}, "keepdims"),
    (f32[2, 3], {"select_last_index": 2}, "select_last_index"),
])
def test_arg_infer_errors(data, attrs: dict, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        infer_type("ArgMax", [data], attrs)


def test_arg_runtime_empty_axis() -> None:
    from polyhal.ir import GraphBuilder
    from polyhal.reference import run

    g = GraphBuilder()
    x = g.input("x", f32["n"])
    g.output(g.op("ArgMin", x), name="y")
    with pytest.raises(ExecutionError, match=r"attribute axis=0 selects an empty dimension of "
                       r"float32\[0\]: there is no index to return"):
        run(g.build(), np.zeros(0, np.float32))
