"""Element-wise indexing ops (GatherElements, ScatterElements, ScatterND, OneHot):
reference kernels against hand-written loops, symbolic shape inference, and
inference/run-time errors that name the node and the op."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyhal.errors import ExecutionError, VerificationError
from polyhal.ir import DType, f32, i32, i64
from polyhal.ops import get_op
from tests.helpers import infer_type, random_array, run_op

BOOL, U8, I8, I32, I64 = DType.BOOL, DType.UINT8, DType.INT8, DType.INT32, DType.INT64
F16, BF16, F32, F64 = DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64


def dtypes(op: str, var: str = "T") -> list[DType]:
    return sorted(get_op(op).type_vars[var], key=lambda d: d.value)


def one(op: str, inputs, attrs=None, **kw) -> np.ndarray:
    (result,) = run_op(op, inputs, attrs, **kw)
    return result


def same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal dtype, shape and bits (indexing never rounds)."""
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


def a64(*rows) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def verr(match: str):
    return pytest.raises(VerificationError, match=match)


def xerr(match: str):
    return pytest.raises(ExecutionError, match=match)


def wrap(index: int, size: int) -> int:
    return index + size if index < 0 else index


COMBINE = {
    "none": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "max": lambda old, new: max(old, new),
    "min": lambda old, new: min(old, new),
}
BOOL_COMBINE = {"add": lambda old, new: old or new, "mul": lambda old, new: old and new}


def combine(reduction: str, dtype: DType):
    if dtype is BOOL and reduction in BOOL_COMBINE:
        return BOOL_COMBINE[reduction]
    return COMBINE[reduction]


# --------------------------------------------------------------------------- loops


def gather_elements_loop(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    out = np.empty(indices.shape, dtype=data.dtype)
    for pos in np.ndindex(*indices.shape):
        source = list(pos)
        source[axis] = wrap(int(indices[pos]), data.shape[axis])
        out[pos] = data[tuple(source)]
    return out


def scatter_elements_loop(data, indices, updates, axis, reduction, dtype=F32):
    out, f = data.copy(), combine(reduction, dtype)
    for pos in np.ndindex(*indices.shape):
        target = list(pos)
        target[axis] = wrap(int(indices[pos]), data.shape[axis])
        out[tuple(target)] = f(out[tuple(target)], updates[pos])
    return out


def scatter_nd_loop(data, indices, updates, reduction, dtype=F32):
    out, f = data.copy(), combine(reduction, dtype)
    for pos in np.ndindex(*indices.shape[:-1]):
        target = tuple(wrap(int(v), data.shape[j]) for j, v in enumerate(indices[pos]))
        if out[target].ndim == 0:
            out[target] = f(out[target], updates[pos])
        else:  # a slice: element by element
            for rest in np.ndindex(*out[target].shape):
                out[target + rest] = f(out[target + rest], updates[pos + rest])
    return out


def one_hot_loop(indices, depth, off, on, axis, dtype):
    out = np.full((*indices.shape, depth), off, dtype=dtype)
    for pos in np.ndindex(*indices.shape):
        value = float(indices[pos])
        if np.isnan(value) or np.isinf(value):
            continue
        k = int(value)  # truncation toward zero
        if -depth <= k < depth:
            out[(*pos, wrap(k, depth))] = on
    return np.moveaxis(out, -1, axis)


# --------------------------------------------------------------------------- GatherElements


def test_gather_elements_hand_values():
    data = np.array([[10, 11, 12], [20, 21, 22]], np.int32)
    same(one("GatherElements", [data, a64([2, 0], [-1, 1])], {"axis": 1}),
         np.array([[12, 10], [22, 21]], np.int32))
    same(one("GatherElements", [data, a64([1, 0, 1])]), np.array([[20, 11, 22]], np.int32))


@pytest.mark.parametrize("dtype", dtypes("GatherElements"))
@pytest.mark.parametrize("index_dtype", dtypes("GatherElements", "Tind"))
def test_gather_elements_dtypes(dtype, index_dtype):
    data = random_array(dtype, (3, 4, 2), seed=1)
    rng = np.random.default_rng(2)
    indices = rng.integers(-4, 4, size=(2, 5, 2)).astype(index_dtype.numpy)
    same(one("GatherElements", [data, indices], {"axis": 1}),
         gather_elements_loop(data, indices, 1))


@pytest.mark.parametrize(("data_shape", "index_shape", "axis"), [
    ((5,), (7,), 0),                 # longer than data along the axis
    ((3, 4), (3, 4), -1),
    ((3, 4), (1, 2), 0),             # shorter along the other axes
    ((2, 3, 4), (2, 3, 1), -3),
    ((2, 1, 3, 2), (2, 1, 3, 2), 2),
    ((2, 0, 3), (2, 0, 5), 2),       # empty
    ((2, 3), (2, 0), 1),
])
def test_gather_elements_shapes_and_axes(data_shape, index_shape, axis):
    data = random_array(F64, data_shape, seed=3)
    size = data_shape[axis]
    indices = np.random.default_rng(4).integers(-size, max(size, 1), size=index_shape)
    if size == 0:
        indices = np.zeros(index_shape, np.int64)
    same(one("GatherElements", [data, indices], {"axis": axis}),
         gather_elements_loop(data, indices, axis % len(data_shape)))


def test_gather_elements_out_of_range_names_node_and_op():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    for bad in (3, -4):
        with xerr(rf"core.GatherElements.*index {bad} is out of range for axis 1 of size 3"):
            run_op("GatherElements", [data, a64([0, bad])], {"axis": 1})
    with verr(r"core.GatherElements.*input 1 \(indices\).*index 7"):
        infer_type("GatherElements", [f32[2, 3], None], {"axis": 1}, consts={1: a64([7])})


def test_gather_elements_infer():
    assert infer_type("GatherElements", [f32["batch", 5], i64["batch", "k"]],
                      {"axis": 1}) == f32["batch", "k"]
    assert infer_type("GatherElements", [DType.BOOL["n"], i32[9]]) == DType.BOOL[9]
    assert infer_type("GatherElements", [f32[2, 3], i64[2, 3]], {"axis": -1}) == f32[2, 3]


@pytest.mark.parametrize(("types", "attrs", "message"), [
    ([f32[()], i64[()]], {}, "rank >= 1"),
    ([f32[2, 3], i64[2]], {}, "rank 1.*rank 2"),
    ([f32[2, 3], i64[2, 4]], {"axis": 0}, "size 4 in dimension 1"),
    ([f32[2, 3], i64[2, 3]], {"axis": 2}, "axis=2 is out of range"),
    ([f32[2, 3], f32[2, 3]], {}, "dtype"),
])
def test_gather_elements_infer_errors(types, attrs, message):
    with verr(rf"core.GatherElements.*{message}"):
        infer_type("GatherElements", types, attrs)


def test_gather_elements_run_time_shape_error():
    # a symbolic size that turns out too small for the indices
    from polyhal.ir import GraphBuilder
    from polyhal.reference import run

    g = GraphBuilder("g")
    out = g.op("GatherElements", g.input("x", f32["n", 3]), g.input("i", i64["m", 3]), axis=1)
    g.output(out)
    with xerr("size 4 in dimension 0"):
        run(g.build(), np.zeros((2, 3), np.float32), np.zeros((4, 3), np.int64))


# --------------------------------------------------------------------------- ScatterElements


def test_scatter_elements_hand_values():
    data = np.zeros((2, 4), np.float32)
    got = one("ScatterElements", [data, a64([1, -1]), np.array([[5, 6]], np.float32)],
              {"axis": 1})
    same(got, np.array([[0, 5, 0, 6], [0, 0, 0, 0]], np.float32))
    got = one("ScatterElements", [np.ones(3, np.int64), a64(0, 0, 2), a64(2, 3, 4)],
              {"reduction": "add"})
    same(got, a64(6, 1, 5))
    got = one("ScatterElements", [np.ones(3, np.int64), a64(0, 0, 2), a64(2, 3, 4)],
              {"reduction": "mul"})
    same(got, a64(6, 1, 4))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", dtypes("ScatterElements"))
def test_scatter_elements_every_reduction_and_dtype(reduction, dtype):
    data = random_array(dtype, (3, 4), seed=5)
    rng = np.random.default_rng(6)
    if reduction == "none":  # distinct indices along the axis
        indices = np.stack([rng.permutation(3)[:2] for _ in range(4)], axis=1) - 3 * (
            rng.random((2, 4)) < 0.5)
    else:
        indices = rng.integers(-3, 3, size=(5, 4))
    updates = random_array(dtype, indices.shape, seed=7)
    attrs = {"axis": 0, "reduction": reduction}
    got = one("ScatterElements", [data, indices.astype(np.int32), updates], attrs)
    if dtype in (F16, BF16):  # the reference reduces 16-bit floats in float32, rounds once
        expected = scatter_elements_loop(data.astype(np.float32), indices,
                                         updates.astype(np.float32), 0, reduction)
        same(got, expected.astype(dtype.numpy))
    else:
        same(got, scatter_elements_loop(data, indices, updates, 0, reduction, dtype))


@pytest.mark.parametrize(("data_shape", "index_shape", "axis"), [
    ((5,), (3,), 0),
    ((3, 4), (3, 2), -1),
    ((2, 3, 4), (1, 2, 4), 1),
    ((2, 1, 3, 2), (2, 1, 2, 2), -2),
    ((2, 0, 3), (2, 0, 3), 1),
])
def test_scatter_elements_shapes_and_axes(data_shape, index_shape, axis):
    data = random_array(F64, data_shape, seed=8)
    updates = random_array(F64, index_shape, seed=9)
    size = data_shape[axis]
    indices = np.random.default_rng(10).integers(-size, max(size, 1), size=index_shape)
    got = one("ScatterElements", [data, indices, updates], {"axis": axis, "reduction": "add"})
    same(got, scatter_elements_loop(data, indices, updates, axis % len(data_shape), "add"))


def test_scatter_elements_special_values_propagate():
    data = np.array([1.0, np.nan, 3.0], np.float32)
    got = one("ScatterElements", [data, a64(0, 2, 1), np.array([np.nan, -np.inf, 5.0],
                                                                 np.float32)],
              {"reduction": "max"})
    same(got, np.array([np.nan, np.nan, 3.0], np.float32))


def test_scatter_elements_does_not_change_its_input():
    data = np.zeros(3, np.float32)
    one("ScatterElements", [data, a64(1), np.ones(1, np.float32)], const_inputs=[0])
    assert not data.any()


def test_scatter_elements_errors_name_node_and_op():
    data, updates = np.zeros((2, 3), np.float32), np.ones((1, 2), np.float32)
    with xerr(r"core.ScatterElements.*index 3 is out of range for axis 1 of size 3"):
        run_op("ScatterElements", [data, a64([0, 3]), updates], {"axis": 1})
    with verr(r"core.ScatterElements.*input 1 \(indices\).*index -4"):
        infer_type("ScatterElements", [f32[2, 3], None, f32[1, 2]], {"axis": 1},
                   consts={1: a64([0, -4])})


@pytest.mark.parametrize(("types", "attrs", "message"), [
    ([f32[2, 3], i64[1, 2], f32[1, 2]], {"reduction": "sum"}, "reduction='sum'"),
    ([f32[2, 3], i64[1, 2], f32[2, 2]], {}, r"input 2 \(updates\).*shape of input 1"),
    ([f32[2, 3], i64[1, 2], f32[2]], {}, r"input 2 \(updates\)"),
    ([f32[2, 3], i64[3, 2], f32[3, 2]], {"axis": 1}, "size 3 in dimension 0"),
    ([f32[2, 3], i64[2], f32[2]], {}, "rank"),
    ([f32[()], i64[()], f32[()]], {}, "rank >= 1"),
    ([f32[2, 3], i64[1, 2], f32[1, 2]], {"axis": -3}, "axis=-3"),
    ([f32[2, 3], i64[1, 2], i64[1, 2]], {}, "updates"),
])
def test_scatter_elements_infer_errors(types, attrs, message):
    with verr(rf"core.ScatterElements.*{message}"):
        infer_type("ScatterElements", types, attrs)


def test_scatter_elements_infer_symbolic():
    t = infer_type("ScatterElements", [f32["batch", 7], i64["batch", "k"], f32["batch", "k"]],
                   {"axis": 1, "reduction": "add"})
    assert t == f32["batch", 7]


# --------------------------------------------------------------------------- ScatterND


def test_scatter_nd_hand_values():
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    same(one("ScatterND", [data, a64([1, 0], [0, -1]), a64(10, 20)]), a64([0, 1, 20],
                                                                          [10, 4, 5]))
    same(one("ScatterND", [data, a64([-1]), a64([7, 8, 9])]), a64([0, 1, 2], [7, 8, 9]))
    same(one("ScatterND", [data, a64([0], [0]), a64([1, 1, 1], [2, 2, 2])],
             {"reduction": "add"}), a64([3, 4, 5], [3, 4, 5]))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize(("data_shape", "batch_shape", "k"), [
    ((6,), (4,), 1),            # elements of a vector
    ((3, 4), (2,), 1),          # rows
    ((2, 3, 4), (2, 2), 2),     # rows of a 3-D tensor, a 2-D batch of tuples
    ((2, 3, 2), (3,), 3),       # elements
    ((2, 3), (2,), 0),          # k = 0: every update covers all of data
    ((2, 0, 3), (2,), 1),       # empty slices
])
def test_scatter_nd_matches_loops(reduction, data_shape, batch_shape, k):
    rng = np.random.default_rng(11)
    data = random_array(F64, data_shape, seed=12)
    lead = data_shape[:k]
    unique = reduction == "none"
    if unique and np.prod(batch_shape) > np.prod(lead):  # as many updates as distinct tuples
        batch_shape = (int(np.prod(lead)),)
    flat = rng.choice(int(np.prod(lead)), size=batch_shape, replace=not unique)
    tuples = np.stack([*np.unravel_index(flat, lead)], axis=-1) if k else (
        np.zeros((*batch_shape, 0), np.int64))
    tuples = np.where(rng.random(tuples.shape) < 0.5, tuples - np.array(lead, np.int64), tuples)
    updates = random_array(F64, (*batch_shape, *data_shape[k:]), seed=13)
    got = one("ScatterND", [data, tuples.astype(np.int64), updates], {"reduction": reduction})
    same(got, scatter_nd_loop(data, tuples, updates, reduction))


@pytest.mark.parametrize("dtype", dtypes("ScatterND"))
def test_scatter_nd_dtypes(dtype):
    data = random_array(dtype, (3, 2), seed=14)
    updates = random_array(dtype, (2, 2), seed=15)
    same(one("ScatterND", [data, a64([2], [-3]), updates]),
         scatter_nd_loop(data, a64([2], [-3]), updates, "none", dtype))
    indices = a64([0, 1], [0, 1], [-1, 0])
    values = random_array(dtype, (3,), seed=16)
    got = one("ScatterND", [data, indices, values], {"reduction": "max"})
    same(got, scatter_nd_loop(data, indices, values, "max", dtype))


def test_scatter_nd_errors_name_node_and_op():
    data = np.zeros((2, 3), np.float32)
    with xerr(r"core.ScatterND.*index 3 is out of range for axis 1 of size 3"):
        run_op("ScatterND", [data, a64([0, 3]), np.ones(1, np.float32)])
    with xerr(r"core.ScatterND.*index -3 is out of range for axis 0 of size 2"):
        run_op("ScatterND", [data, a64([-3]), np.ones((1, 3), np.float32)])
    with verr(r"core.ScatterND.*input 1 \(indices\).*index 2.*axis 0"):
        infer_type("ScatterND", [f32[2, 3], None, f32[1]], consts={1: a64([2, 0])})


@pytest.mark.parametrize(("types", "attrs", "message"), [
    ([f32[2, 3], i64[1, 3], f32[1]], {}, "tuples of length 3, more than the rank 2"),
    ([f32[2, 3], i64[4, 1], f32[4, 2]], {}, r"updates.*expected.*\[4, 3\]"),
    ([f32[2, 3], i64[4, 2], f32[4, 1]], {}, r"expected.*\[4\]"),
    ([f32[()], i64[1, 0], f32[1]], {}, "rank >= 1"),
    ([f32[2, 3], i64[()], f32[2, 3]], {}, r"input 1 \(indices\) must have rank >= 1"),
    ([f32[2, 3], i64[1, 2], f32[1]], {"reduction": "avg"}, "reduction='avg'"),
    ([f32[2, 3], i32[1, 2], f32[1]], {}, "dtype"),
])
def test_scatter_nd_infer_errors(types, attrs, message):
    with verr(rf"core.ScatterND.*{message}"):
        infer_type("ScatterND", types, attrs)


def test_scatter_nd_infer_symbolic():
    assert infer_type("ScatterND", [f32["b", 4], i64["n", 1], f32["n", 4]]) == f32["b", 4]
    # an unknown tuple length leaves updates unchecked
    assert infer_type("ScatterND", [f32[2, 4], i64[3, "k"], f32[3, 4]]) == f32[2, 4]


# --------------------------------------------------------------------------- OneHot


def test_one_hot_hand_values():
    got = one("OneHot", [a64(0, 2, -1, 3, -4), np.array(3, np.int64),
                         np.array([0.0, 1.0], np.float32)])
    same(got, np.array([[1, 0, 0], [0, 0, 1], [0, 0, 1], [0, 0, 0], [0, 0, 0]], np.float32))
    got = one("OneHot", [a64(1, 0), np.array([2], np.int32), np.array([5, 9], np.int8)],
              {"axis": 0})
    same(got, np.array([[5, 9], [9, 5]], np.int8))


@pytest.mark.parametrize("value_dtype", dtypes("OneHot", "T3"))
@pytest.mark.parametrize("index_dtype", dtypes("OneHot", "T1"))
def test_one_hot_dtypes(index_dtype, value_dtype):
    rng = np.random.default_rng(17)
    low = 0 if index_dtype is U8 else -5
    indices = rng.integers(low, 6, size=(2, 3)).astype(index_dtype.numpy)
    pair = np.array([False, True]) if value_dtype is BOOL else (
        np.array([1, 3]).astype(value_dtype.numpy))
    got = one("OneHot", [indices, np.array(4).astype(index_dtype.numpy), pair], {"axis": 1})
    same(got, one_hot_loop(indices, 4, pair[0], pair[1], 1, value_dtype.numpy))


@pytest.mark.parametrize("axis", [-4, -3, -2, -1, 0, 1, 2, 3])
def test_one_hot_every_axis(axis):
    indices = np.random.default_rng(18).integers(-4, 5, size=(2, 3, 2))
    pair = np.array([-1.5, 2.5])
    same(one("OneHot", [indices, np.array(4), pair], {"axis": axis}),
         one_hot_loop(indices, 4, -1.5, 2.5, axis, np.float64))


def test_one_hot_float_indices_and_depth_truncate():
    indices = np.array([0.9, -0.9, 1.7, -1.2, 2.5, np.nan, np.inf, -np.inf], np.float32)
    got = one("OneHot", [indices, np.array(2.9, np.float64), np.array([0, 1], np.int64)])
    expected = one_hot_loop(indices, 2, 0, 1, -1, np.int64)
    same(got, expected)
    assert got.shape == (8, 2) and got[:4].tolist() == [[1, 0], [1, 0], [0, 1], [0, 1]]
    assert not got[4:].any()


def test_one_hot_bfloat16_values():
    got = one("OneHot", [np.array([-1], np.int32), np.array([3], np.int64),
                         np.array([0.5, 1.25], BF16.numpy)])
    same(got, np.array([[0.5, 0.5, 1.25]], BF16.numpy))


def test_one_hot_infer_depth():
    values = np.array([0, 1], np.float32)
    t = infer_type("OneHot", [i64["batch", 3], None, None], {"axis": 1},
                   consts={1: np.array(10, np.int64), 2: values})
    assert t == f32["batch", 10, 3]
    t = infer_type("OneHot", [i64["batch", 3], i64[()], DType.BOOL[2]])
    assert t.dtype is DType.BOOL and t.shape[:2] == ("batch", 3)
    assert isinstance(t.shape[2], str) and t.shape[2].startswith("_")  # fresh: bound at run time
    t = infer_type("OneHot", [f32[4], None, f32[2]], {"axis": 0},
                   consts={1: np.array([2.5], np.float32)})
    assert t == f32[2, 4]


def test_one_hot_non_constant_depth_binds_at_run_time():
    got = run_op("OneHot", [a64(1, 0), np.array(3, np.int64), np.array([0, 1], np.int32)])[0]
    same(got, np.array([[0, 1, 0], [1, 0, 0]], np.int32))


@pytest.mark.parametrize(("types", "attrs", "consts", "message"), [
    ([i64[()], i64[()], f32[2]], {}, {}, r"input 0 \(indices\) must have rank >= 1"),
    ([i64[3], i64[2], f32[2]], {}, {}, r"input 1 \(depth\) must be a scalar"),
    ([i64[3], i64[1, 1], f32[2]], {}, {}, r"input 1 \(depth\)"),
    ([i64[3], i64[()], f32[3]], {}, {}, r"input 2 \(values\) must be a 1-D"),
    ([i64[3], i64[()], f32[()]], {}, {}, r"input 2 \(values\)"),
    ([i64[3], i64[()], f32[2]], {"axis": 2}, {}, "axis=2 is out of range for rank 2"),
    ([i64[3], i64[()], f32[2]], {"axis": -3}, {}, "axis=-3"),
    ([i64[3], None, f32[2]], {}, {1: np.array(0)}, "depth.*at least 1"),
    ([i64[3], None, f32[2]], {}, {1: np.array(np.nan)}, "not finite"),
    ([DType.BOOL[3], i64[()], f32[2]], {}, {}, "dtype"),
])
def test_one_hot_infer_errors(types, attrs, consts, message):
    with verr(rf"core.OneHot.*{message}"):
        infer_type("OneHot", types, attrs, consts=consts)


def test_one_hot_run_time_errors():
    with xerr(r"core.OneHot.*depth.*at least 1"):
        run_op("OneHot", [a64(0), np.array(-2, np.int64), np.array([0, 1], np.float32)])


# --------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_scatter_elements_inverts_gather_elements(data):
    """Scattering gathered values back (distinct indices) restores those positions."""
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(-rank, rank - 1))
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    size = shape[axis]
    taken = data.draw(st.integers(1, size))
    keys = rng.random(shape)
    indices = np.take(np.argsort(keys, axis=axis), np.arange(taken), axis=axis)
    indices = np.where(rng.random(indices.shape) < 0.5, indices - size, indices)
    gathered = one("GatherElements", [x, indices], {"axis": axis})
    same(gathered, gather_elements_loop(x, indices, axis % rank))
    restored = one("ScatterElements", [np.zeros(shape), indices, gathered], {"axis": axis})
    mask = one("ScatterElements", [np.zeros(shape), indices, np.ones(indices.shape)],
               {"axis": axis}).astype(bool)
    np.testing.assert_array_equal(restored[mask], x[mask])
    assert not restored[~mask].any()


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 2**16), st.sampled_from(["add", "mul", "max", "min"]))
def test_scatter_nd_reductions_equal_scatter_elements_on_vectors(seed, reduction):
    """On a 1-D tensor ScatterND with k = 1 and ScatterElements are the same op."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-5, 6, size=7)
    indices = rng.integers(-7, 7, size=9)
    updates = rng.integers(-5, 6, size=9)
    by_elements = one("ScatterElements", [x, indices, updates], {"reduction": reduction})
    by_nd = one("ScatterND", [x, indices.reshape(9, 1), updates], {"reduction": reduction})
    same(by_elements, by_nd)


# --------------------------------------------------------------------------- schema vs ONNX

_ONNX_TYPES = {"bool": BOOL, "int8": I8, "uint8": U8, "int16": DType.INT16, "int32": I32,
               "int64": I64, "float16": F16, "bfloat16": BF16, "float": F32, "double": F64}
OPS = ["GatherElements", "ScatterElements", "ScatterND", "OneHot", "ConvTranspose"]


@pytest.mark.parametrize("op", OPS)
def test_schema_follows_onnx(op):
    from onnx import defs
    schema, mine = defs.get_schema(op), get_op(op)
    assert mine.onnx_since == schema.since_version
    assert [i.name for i in mine.inputs] == [i.name for i in schema.inputs]
    assert [o.name for o in mine.outputs] == [o.name for o in schema.outputs]
    assert {a.name for a in mine.attrs} == set(schema.attributes)
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    for spec, theirs in zip(mine.inputs, schema.inputs, strict=True):
        strs = allowed.get(theirs.type_str, [theirs.type_str])
        expected = {_ONNX_TYPES[t[7:-1]] for t in strs if t[7:-1] in _ONNX_TYPES}
        assert mine.type_vars[spec.type_var] == expected, spec.name
        assert spec.optional == (theirs.option.name == "Optional")
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default.HasField("i"):
            assert mine.attr_specs[name].default == default.i, name
        elif default.HasField("s"):
            assert mine.attr_specs[name].default == default.s.decode(), name


def test_differentiability_flags():
    for op in ("GatherElements", "ScatterElements", "ScatterND", "ConvTranspose"):
        assert get_op(op).differentiable, op
    assert not get_op("OneHot").differentiable


def test_kernels_are_vectorized():
    """Large scatters run in numpy, not a Python loop per element."""
    import time

    rng = np.random.default_rng(19)
    data = np.zeros((400, 500))
    indices = rng.integers(-400, 400, size=(400, 500))
    start = time.perf_counter()
    one("ScatterElements", [data, indices, np.ones((400, 500))], {"reduction": "add"})
    one("GatherElements", [data, indices])
    tuples = rng.integers(0, 400, size=(200_000, 1))
    one("ScatterND", [np.zeros((400, 500)), np.concatenate([tuples, tuples], axis=1),
                      np.ones(200_000)], {"reduction": "add"})
    one("OneHot", [rng.integers(0, 100, size=(2000,)), np.array(100), np.array([0.0, 1.0])])
    assert time.perf_counter() - start < 2.0


def test_every_element_of_data_is_kept_or_replaced():
    """A scatter changes exactly the addressed positions."""
    data = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    indices = a64([[1, 0, 2, 1]], [[0, 2, 1, 0]])
    updates = -np.ones((2, 1, 4), np.int64)
    got = one("ScatterElements", [data, indices, updates], {"axis": 1})
    for n, c, w in product(range(2), range(3), range(4)):
        hit = indices[n, 0, w] == c
        assert got[n, c, w] == (-1 if hit else data[n, c, w])
