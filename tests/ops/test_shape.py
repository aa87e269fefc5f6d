"""Shape and data-movement ops: reference kernels against hand-computed or plain
numpy expectations, symbolic shape inference, and inference/run-time errors."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import polyhal.ops.movement  # noqa: F401  (registers until polyhal.ops imports it)
from polyhal.errors import ExecutionError, LimitExceededError, VerificationError
from polyhal.ir import DType, Graph, GraphBuilder, Node, TensorType, Value, f32, i32, i64
from polyhal.ir.verify import infer_node, resolve_attrs
from polyhal.ops import get_op
from polyhal.reference import run
from tests.helpers import infer_type, random_array, run_op

I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min


def dtypes(op: str, var: str = "T") -> list[DType]:
    return sorted(get_op(op).type_vars[var], key=lambda d: d.value)


def same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Bit-exact equality with dtype and shape (data movement never rounds)."""
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


def a64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def one(op: str, inputs, attrs=None, **kw) -> np.ndarray:
    (result,) = run_op(op, inputs, attrs, **kw)
    return result


def is_fresh(dim) -> bool:
    return isinstance(dim, str) and dim.startswith("_")


def verr(match: str):
    return pytest.raises(VerificationError, match=match)


# --------------------------------------------------------------------------- Reshape

@pytest.mark.parametrize("dtype", dtypes("Reshape"))
@pytest.mark.parametrize("const", [True, False])
def test_reshape_dtypes(dtype, const):
    x = random_array(dtype, (2, 3, 4))
    out = one("Reshape", [x, a64(4, -1)], const_inputs=[1] if const else [])
    same(out, x.reshape(4, 6))


@pytest.mark.parametrize("shape_in, spec, allowzero, expected", [
    ((2, 3, 4), (0, -1), 0, (2, 12)),
    ((2, 3, 4), (0, 0, 4), 0, (2, 3, 4)),
    ((2, 3, 4), (-1,), 0, (24,)),
    ((1,), (), 0, ()),
    ((), (1, 1), 0, (1, 1)),
    ((0, 3), (3, 0), 1, (3, 0)),
    ((0, 3), (0, 3), 0, (0, 3)),
    ((0, 3), (-1, 3), 0, (0, 3)),
    ((2, 3), (3, 2), 1, (3, 2)),
])
def test_reshape_values(shape_in, spec, allowzero, expected):
    x = np.arange(int(np.prod(shape_in)), dtype=np.float32).reshape(shape_in)
    for const in ([1], []):
        out = one("Reshape", [x, a64(*spec)], {"allowzero": allowzero}, const_inputs=const)
        same(out, np.arange(x.size, dtype=np.float32).reshape(expected))


def test_reshape_symbolic():
    assert infer_type("Reshape", [f32["batch", 784], None],
                      consts={1: a64(-1, 28, 28)}) == f32["batch", 28, 28]
    assert infer_type("Reshape", [f32["batch", 3, 4], None],
                      consts={1: a64(0, -1)}) == f32["batch", 12]
    assert infer_type("Reshape", [f32["b", "s", 8], None],
                      consts={1: a64(0, 0, 2, 4)}) == f32["b", "s", 2, 4]
    assert infer_type("Reshape", [f32["b", "s", 8], None],
                      consts={1: a64(-1, 8)}) == f32["b*s", 8]
    odd = infer_type("Reshape", [f32["batch", 3], None], consts={1: a64(-1, 2)})
    assert is_fresh(odd.shape[0]) and odd.shape[1] == 2
    dynamic = infer_type("Reshape", [f32["batch", 3], i64[3]])
    assert dynamic.rank == 3 and all(is_fresh(d) for d in dynamic.shape)


def test_reshape_symbolic_runs():
    g = GraphBuilder()
    x = g.input("x", f32["batch", 6])
    g.output(g.op("Reshape", x, a64(-1, 3, 2)), name="y")
    graph = g.build()
    assert graph.outputs[0].type == f32["batch", 3, 2]
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    same(run(graph, x)["y"], x.reshape(4, 3, 2))


@pytest.mark.parametrize("spec, allowzero, match", [
    ((-1, -1), 0, "shape.*more than one -1"),
    ((2, -2), 0, "shape.*negative"),
    ((5, 5), 0, "shape.*25 elements"),
    ((0, -1), 1, "shape.*allowzero=1"),
    ((0, 0, 0, 6), 0, "shape.*entry 2 is 0"),
    ((-1, 5), 0, "shape.*divide"),
    ((2, 3), 2, "allowzero"),
])
def test_reshape_errors(spec, allowzero, match):
    with verr(match):
        infer_type("Reshape", [f32[2, 3], None], {"allowzero": allowzero},
                   consts={1: a64(*spec)})


def test_reshape_shape_input_errors():
    with verr("shape.*symbolic length"):
        infer_type("Reshape", [f32[2, 3], i64["n"]])
    with verr("shape.*1-D"):
        infer_type("Reshape", [f32[2, 3], i64[1, 2]])
    with pytest.raises(ExecutionError, match="elements"):
        run_op("Reshape", [np.zeros((2, 3), np.float32), a64(4, 2)])
    with verr("other sizes multiply to 0"):
        infer_type("Reshape", [f32[0, 3], None], consts={1: a64(0, -1)})


# --------------------------------------------------------------------------- Transpose

@pytest.mark.parametrize("dtype", dtypes("Transpose"))
def test_transpose_dtypes(dtype):
    x = random_array(dtype, (2, 3, 4))
    same(one("Transpose", [x], {"perm": [1, 2, 0]}), np.transpose(x, (1, 2, 0)))
    same(one("Transpose", [x]), np.transpose(x, (2, 1, 0)))


@pytest.mark.parametrize("shape", [(), (5,), (0, 3), (2, 0, 1)])
def test_transpose_edge_shapes(shape):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    same(one("Transpose", [x]), x.T)


def test_transpose_hand_values():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    same(one("Transpose", [x], {"perm": [1, 0]}), np.array([[1, 4], [2, 5], [3, 6]]))


def test_transpose_symbolic_and_errors():
    assert infer_type("Transpose", [f32["a", "b", 3]], {"perm": [2, 0, 1]}) == f32[3, "a", "b"]
    assert infer_type("Transpose", [f32["a", "b", 3]]) == f32[3, "b", "a"]
    for perm in ([0, 1], [0, 0, 1], [0, 1, 3], [-1, 0, 1]):
        with verr("perm"):
            infer_type("Transpose", [f32[2, 3, 4]], {"perm": perm})


# --------------------------------------------------------------------------- Concat

@pytest.mark.parametrize("dtype", dtypes("Concat"))
def test_concat_dtypes(dtype):
    parts = [random_array(dtype, (2, n), seed=n) for n in (1, 3, 2)]
    same(one("Concat", parts, {"axis": -1}), np.concatenate(parts, axis=1))
    same(one("Concat", parts[:1], {"axis": 0}), parts[0])


def test_concat_empty_and_hand_values():
    a = np.array([[1, 2]], np.int32)
    b = np.zeros((0, 2), np.int32)
    same(one("Concat", [a, b, a], {"axis": 0}), np.array([[1, 2], [1, 2]], np.int32))
    same(one("Concat", [b, b], {"axis": 1}), np.zeros((0, 4), np.int32))


def test_concat_symbolic():
    assert infer_type("Concat", [f32["a", 3], f32["b", 3]], {"axis": 0}) == f32["a+b", 3]
    assert infer_type("Concat", [f32["a", 3], f32["a", 3]], {"axis": 0}) == f32["2*a", 3]
    assert infer_type("Concat", [f32["batch", 2], f32["batch", 3]],
                      {"axis": -1}) == f32["batch", 5]
    assert infer_type("Concat", [f32["n", 2], f32[4, 3]], {"axis": 1}) == f32[4, 5]


def test_concat_errors():
    with verr("axis"):
        infer_type("Concat", [f32[2, 3], f32[2, 3]], {"axis": 2})
    with verr("rank"):
        infer_type("Concat", [f32[2, 3], f32[2, 3, 1]], {"axis": 0})
    with verr("dimension 0"):
        infer_type("Concat", [f32[2, 3], f32[4, 3]], {"axis": 1})
    with verr("scalar"):
        infer_type("Concat", [f32[()], f32[()]], {"axis": 0})
    with verr("required attribute 'axis'"):
        infer_type("Concat", [f32[2], f32[2]])


# --------------------------------------------------------------------------- Split

def split_graph(x: np.ndarray, count: int, split: np.ndarray | None = None,
                const_split: bool = True, **attrs) -> tuple[Graph, dict]:
    """A one-node Split graph; built by hand so that num_outputs can be an attribute."""
    op = get_op("Split")
    types, names, consts = [TensorType.of(x)], ["x"], [None]
    inputs, constants, feeds = [Value("x", types[0])], {}, {"x": x}
    if split is not None:
        types.append(TensorType.of(split))
        names.append("s")
        consts.append(split if const_split else None)
        if const_split:
            constants["s"] = split
        else:
            inputs.append(Value("s", types[1]))
            feeds["s"] = split
    out_types = infer_node(op, "split", types, resolve_attrs(op, attrs, "split"), count, consts)
    outs = tuple(Value(f"y{i}", t) for i, t in enumerate(out_types))
    node = Node("Split", "split", tuple(names), outs, attrs)
    return Graph("g", tuple(inputs), outs, (node,), constants), feeds


def run_split(x, count, split=None, const_split=True, **attrs) -> list[np.ndarray]:
    graph, feeds = split_graph(x, count, split, const_split, **attrs)
    return list(run(graph, **feeds).values())


def split_types(t: TensorType, count: int, split=None, **attrs):
    op = get_op("Split")
    types = [t] if split is None else [t, TensorType.of(split)]
    return infer_node(op, "split", types, resolve_attrs(op, attrs, "split"), count,
                      [None] if split is None else [None, split])


@pytest.mark.parametrize("dtype", dtypes("Split"))
def test_split_dtypes(dtype):
    x = random_array(dtype, (2, 6))
    outs = run_split(x, 3, a64(1, 2, 3), axis=1)
    for out, expected in zip(outs, (x[:, :1], x[:, 1:3], x[:, 3:]), strict=True):
        same(out, expected)
    outs = run_split(x, 2, num_outputs=2, axis=-1)
    same(outs[0], x[:, :3])
    same(outs[1], x[:, 3:])


@pytest.mark.parametrize("size, count, sizes", [
    (6, 3, [2, 2, 2]), (7, 3, [3, 3, 1]), (5, 4, [2, 2, 1, 0]), (6, 4, [2, 2, 2, 0]),
    (2, 4, [1, 1, 0, 0]), (0, 2, [0, 0]), (1, 1, [1]),
])
def test_split_num_outputs_uneven(size, count, sizes):
    x = np.arange(size, dtype=np.int64)
    outs = run_split(x, count, num_outputs=count)
    bounds = np.cumsum([0, *sizes])
    for i, out in enumerate(outs):
        same(out, x[bounds[i]:bounds[i + 1]])
    assert [t.shape[0] for t in split_types(i64[size], count, num_outputs=count)] == sizes


def test_split_input_runtime_and_empty():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    outs = run_split(x, 2, a64(3, 0), const_split=False, axis=0)
    same(outs[0], x)
    same(outs[1], x[3:])
    with pytest.raises(ExecutionError, match="sums to 5"):
        run_split(x, 2, a64(3, 2), const_split=False, axis=0)
    g = GraphBuilder()
    v = g.input("x", f32[3, 4])
    a, b = g.op("Split", v, a64(1, 3), axis=1, num_outputs=2)
    g.output(a, b)
    outs = list(run(g.build(), x).values())
    same(outs[0], x[:, :1])
    same(outs[1], x[:, 1:])


def test_split_symbolic():
    t = f32["batch", 6]
    assert split_types(t, 2, a64(2, 4), axis=1) == [f32["batch", 2], f32["batch", 4]]
    assert split_types(f32["2*n", 3], 2, num_outputs=2) == [f32["n", 3], f32["n", 3]]
    parts = split_types(f32["n", 3], 2, num_outputs=2)
    assert all(is_fresh(p.shape[0]) and p.shape[1] == 3 for p in parts)
    assert split_types(t, 2, num_outputs=2, axis=0)[0].shape[1] == 6


def test_split_errors():
    with verr("not both"):
        split_types(f32[4], 2, a64(2, 2), num_outputs=2)
    with verr("num_outputs"):
        split_types(f32[4], 2)
    with verr("num_outputs=3"):
        split_types(f32[4], 2, num_outputs=3)
    with verr("split.*sums to 3"):
        split_types(f32[4], 2, a64(1, 2))
    with verr("split.*3 entries"):
        split_types(f32[4], 2, a64(1, 2, 1))
    with verr("split.*negative"):
        split_types(f32[4], 2, a64(5, -1))
    with verr("axis"):
        split_types(f32[4], 2, num_outputs=2, axis=1)


# --------------------------------------------------------------------------- Slice

@pytest.mark.parametrize("dtype", dtypes("Slice"))
def test_slice_dtypes(dtype):
    x = random_array(dtype, (4, 5))
    out = one("Slice", [x, a64(1, 0), a64(3, 5), a64(0, 1), a64(1, 2)], const_inputs=[1, 2, 3, 4])
    same(out, x[1:3, 0:5:2])


@pytest.mark.parametrize("starts, ends, axes, steps, expected", [
    # ONNX doc example 1 and 2
    ([1, 0], [2, 3], [0, 1], [1, 2], [[5, 7]]),
    ([0, 1], [-1, 1000], None, None, [[2, 3, 4]]),
    ([0], [I64_MIN], [1], [-1], [[1], [5]]),
    ([0], [I64_MAX], [1], [-1], np.zeros((2, 0), np.int32)),
    ([-1], [I64_MIN], [1], [-1], [[4, 3, 2, 1], [8, 7, 6, 5]]),
    ([I64_MAX], [I64_MIN], [-1], [-2], [[4, 2], [8, 6]]),
    ([I64_MIN], [I64_MAX], [-1], [3], [[1, 4], [5, 8]]),
    ([-10], [-20], [1], [-1], [[1], [5]]),  # ONNX clamps start to 0: element 0 stays
    ([2], [1], [1], [1], np.zeros((2, 0), np.int32)),
    ([3], [3], [1], [-1], np.zeros((2, 0), np.int32)),
    ([], [], None, None, [[1, 2, 3, 4], [5, 6, 7, 8]]),
])
def test_slice_hand_values(starts, ends, axes, steps, expected):
    x = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int32)
    inputs = [x, a64(*starts), a64(*ends), None if axes is None else a64(*axes),
              None if steps is None else a64(*steps)]
    while inputs[-1] is None:
        inputs.pop()
    expected = np.asarray(expected, np.int32)
    for const in ([1, 2, 3, 4], []):
        same(one("Slice", inputs, const_inputs=const), expected)


@pytest.mark.parametrize("start, end, step", [
    (0, 5, 1), (1, -1, 2), (-2, 10, 1), (4, 0, -1), (3, -6, -2), (10, -10, -3), (-1, -6, -1),
])
def test_slice_matches_numpy_in_range(start, end, step):
    x = np.arange(15, dtype=np.float64).reshape(3, 5)
    out = one("Slice", [x, a64(start), a64(end), a64(-1), a64(step)])
    same(out, x[:, start:end:step])


def test_slice_empty_dim_and_int32():
    x = np.zeros((0, 3), np.float32)
    idx = [np.array(v, np.int32) for v in ([0, 1], [5, 3])]
    same(one("Slice", [x, *idx]), x[0:5, 1:3])
    same(one("Slice", [x, a64(-1), a64(I64_MIN), a64(0), a64(-1)]), x)


def test_slice_symbolic():
    consts = {1: a64(2), 2: a64(8), 3: a64(1)}
    assert infer_type("Slice", [f32["batch", 10], None, None, None],
                      consts=consts) == f32["batch", 6]
    whole = {1: a64(0), 2: a64(I64_MAX), 3: a64(0)}
    assert infer_type("Slice", [f32["batch", 10], None, None, None],
                      consts=whole) == f32["batch", 10]
    reverse = {1: a64(-1), 2: a64(I64_MIN), 3: a64(0), 4: a64(-1)}
    assert infer_type("Slice", [f32["batch", 10], None, None, None, None],
                      consts=reverse) == f32["batch", 10]
    part = infer_type("Slice", [f32["seq", 10], None, None, None], consts={
        1: a64(1), 2: a64(I64_MAX), 3: a64(0)})
    assert is_fresh(part.shape[0]) and part.shape[1] == 10
    dynamic = infer_type("Slice", [f32["b", 10, 4], i64[1], i64[1], None], consts={3: a64(-2)})
    assert dynamic.shape[0] == "b" and is_fresh(dynamic.shape[1]) and dynamic.shape[2] == 4
    no_axes = infer_type("Slice", [f32["b", 10, 4], i64[2], i64[2]])
    assert is_fresh(no_axes.shape[0]) and is_fresh(no_axes.shape[1]) and no_axes.shape[2] == 4


def test_slice_symbolic_runs():
    g = GraphBuilder()
    x = g.input("x", f32["seq", 4])
    g.output(g.op("Slice", x, a64(1), a64(I64_MAX), a64(0)), name="y")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    same(run(g.build(), x)["y"], x[1:])


@pytest.mark.parametrize("consts, match", [
    ({1: a64(0), 2: a64(1), 3: a64(0), 4: a64(0)}, "steps.*0"),
    ({1: a64(0, 0), 2: a64(1, 1), 3: a64(1, -1), 4: a64(1, 1)}, "axes.*repeats"),
    ({1: a64(0), 2: a64(1), 3: a64(2), 4: a64(1)}, "axes.*out of range"),
    ({1: a64(0), 2: a64(1, 2), 3: a64(0), 4: a64(1)}, "ends.*2 entries"),
    ({1: a64(0), 2: a64(1), 3: a64(0, 1), 4: a64(1)}, "axes.*2 entries"),
    ({1: a64(0), 2: a64(1), 3: a64(0), 4: a64(1, 1)}, "steps.*2 entries"),
])
def test_slice_errors(consts, match):
    with verr(match):
        infer_type("Slice", [f32[3, 4], None, None, None, None], consts=consts)
    with verr("starts.*3 entries"):
        infer_type("Slice", [f32[3, 4], None, None], consts={1: a64(0, 0, 0), 2: a64(1, 1, 1)})
    with pytest.raises(ExecutionError, match="steps"):
        run_op("Slice", [np.zeros((3, 4), np.float32), a64(0), a64(1), a64(0), a64(0)])


# --------------------------------------------------------------------------- Gather

@pytest.mark.parametrize("dtype", dtypes("Gather"))
def test_gather_dtypes(dtype):
    x = random_array(dtype, (4, 3))
    idx = a64(3, 0, -1, 1)
    same(one("Gather", [x, idx]), x[[3, 0, 3, 1]])


@pytest.mark.parametrize("index_dtype", dtypes("Gather", "I"))
def test_gather_axes_and_index_shapes(index_dtype):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[0, -1], [2, 1]], index_dtype.numpy)
    same(one("Gather", [x, idx], {"axis": -1}), x[:, :, [[0, 3], [2, 1]]])
    same(one("Gather", [x, np.array(-2, index_dtype.numpy)], {"axis": 1}), x[:, 1, :])
    same(one("Gather", [x, np.zeros((0,), index_dtype.numpy)], {"axis": 0}),
         np.zeros((0, 3, 4), np.float32))
    empty = np.zeros((0, 3), np.float32)
    same(one("Gather", [empty, np.array([2, 0], index_dtype.numpy)], {"axis": 1}),
         np.zeros((0, 2), np.float32))


def test_gather_hand_values():
    x = np.array([[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]], np.float32)
    same(one("Gather", [x, a64(0, 1, 1, 2).reshape(2, 2)]),
         np.array([[[1.0, 1.2], [2.3, 3.4]], [[2.3, 3.4], [4.5, 5.7]]], np.float32))


def test_gather_out_of_range():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for bad in (3, -4):
        with pytest.raises(ExecutionError, match=f"index {bad} is out of range"):
            run_op("Gather", [x, a64(0, bad)], {"axis": 1})
    with verr("indices.*index 7"):
        infer_type("Gather", [f32[2, 3], None], consts={1: a64(7)}, attrs={"axis": 1})


def test_gather_symbolic_and_errors():
    assert infer_type("Gather", [f32["batch", 10], i64["k"]], {"axis": 1}) == f32["batch", "k"]
    assert infer_type("Gather", [f32["v", "d"], i32["b", "s"]]) == f32["b", "s", "d"]
    assert infer_type("Gather", [f32["v", "d"], i64[()]], {"axis": 0}) == f32["d"]
    with verr("axis"):
        infer_type("Gather", [f32[2, 3], i64[1]], {"axis": 2})
    with verr("rank"):
        infer_type("Gather", [f32[()], i64[1]])


# --------------------------------------------------------------------------- Squeeze / Unsqueeze

@pytest.mark.parametrize("dtype", dtypes("Squeeze"))
def test_squeeze_dtypes(dtype):
    x = random_array(dtype, (1, 3, 1, 2))
    same(one("Squeeze", [x, a64(0, -2)]), x.reshape(3, 2))
    same(one("Squeeze", [x]), x.reshape(3, 2))
    same(one("Squeeze", [x, a64(2)], const_inputs=[1]), x.reshape(1, 3, 2))


def test_squeeze_edge_shapes():
    same(one("Squeeze", [np.array(5, np.int8)]), np.array(5, np.int8))
    same(one("Squeeze", [np.zeros((0, 1), np.int8)]), np.zeros((0,), np.int8))
    same(one("Squeeze", [np.ones((1, 1), np.int8), a64()]), np.ones((1, 1), np.int8))


def test_squeeze_symbolic_and_errors():
    assert infer_type("Squeeze", [f32["batch", 1, 3], None],
                      consts={1: a64(1)}) == f32["batch", 3]
    assert infer_type("Squeeze", [f32[1, 3, 1]]) == f32[3]
    dynamic = infer_type("Squeeze", [f32["b", 1, 3], i64[1]])
    assert dynamic.rank == 2 and all(is_fresh(d) for d in dynamic.shape)
    with verr("symbolic.*axes"):
        infer_type("Squeeze", [f32["batch", 1, 3]])
    with verr("axes.*size 3"):
        infer_type("Squeeze", [f32[1, 3], None], consts={1: a64(1)})
    with verr("axes.*out of range"):
        infer_type("Squeeze", [f32[1, 3], None], consts={1: a64(2)})
    with verr("axes.*repeats"):
        infer_type("Squeeze", [f32[1, 3], None], consts={1: a64(0, -2)})
    with pytest.raises(ExecutionError, match="size 3"):
        run_op("Squeeze", [np.zeros((1, 3), np.float32), a64(1)])


@pytest.mark.parametrize("dtype", dtypes("Unsqueeze"))
def test_unsqueeze_dtypes(dtype):
    x = random_array(dtype, (3, 2))
    same(one("Unsqueeze", [x, a64(0, -1)]), x.reshape(1, 3, 2, 1))
    same(one("Unsqueeze", [x, a64(1)], const_inputs=[1]), x.reshape(3, 1, 2))


def test_unsqueeze_edge_shapes():
    same(one("Unsqueeze", [np.array(2.5, np.float32), a64(0)]), np.array([2.5], np.float32))
    same(one("Unsqueeze", [np.zeros((0,), np.int64), a64(-1, 0)]), np.zeros((1, 0, 1), np.int64))


def test_unsqueeze_symbolic_and_errors():
    assert infer_type("Unsqueeze", [f32["b", "s"], None],
                      consts={1: a64(1, -1)}) == f32["b", 1, "s", 1]
    dynamic = infer_type("Unsqueeze", [f32["b"], i64[2]])
    assert dynamic.rank == 3 and all(is_fresh(d) for d in dynamic.shape)
    with verr("axes.*out of range"):
        infer_type("Unsqueeze", [f32[2], None], consts={1: a64(2)})
    with verr("axes.*repeats"):
        infer_type("Unsqueeze", [f32[2], None], consts={1: a64(0, -3)})


# --------------------------------------------------------------------------- Flatten

@pytest.mark.parametrize("dtype", dtypes("Flatten"))
def test_flatten_dtypes(dtype):
    x = random_array(dtype, (2, 3, 4))
    same(one("Flatten", [x]), x.reshape(2, 12))
    same(one("Flatten", [x], {"axis": -1}), x.reshape(6, 4))


@pytest.mark.parametrize("shape, axis, expected", [
    ((2, 3, 4), 0, (1, 24)), ((2, 3, 4), 3, (24, 1)), ((2, 3, 4), -3, (1, 24)),
    ((), 0, (1, 1)), ((0, 3), 1, (0, 3)), ((3, 0, 2), 1, (3, 0)),
])
def test_flatten_shapes(shape, axis, expected):
    x = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    same(one("Flatten", [x], {"axis": axis}), x.reshape(expected))


def test_flatten_symbolic_and_errors():
    assert infer_type("Flatten", [f32["batch", 3, 4]], {"axis": 1}) == f32["batch", 12]
    assert infer_type("Flatten", [f32["batch", 3, 4]], {"axis": -1}) == f32["3*batch", 4]
    assert infer_type("Flatten", [f32["b", "s", 4]], {"axis": 0}) == f32[1, "4*b*s"]
    for axis in (4, -4):
        with verr("axis"):
            infer_type("Flatten", [f32[2, 3, 4]], {"axis": axis})


# --------------------------------------------------------------------------- Expand

@pytest.mark.parametrize("dtype", dtypes("Expand"))
def test_expand_dtypes(dtype):
    x = random_array(dtype, (3, 1))
    same(one("Expand", [x, a64(2, 1, 4)]), np.broadcast_to(x, (2, 3, 4)))
    same(one("Expand", [x, a64(1, 1)], const_inputs=[1]), x)


@pytest.mark.parametrize("shape, target, expected", [
    ((2, 3), (1,), (2, 3)),      # bidirectional: a 1 keeps the input size
    ((2, 1), (1, 5), (2, 5)),
    ((), (2, 2), (2, 2)),
    ((0, 1), (0, 3), (0, 3)),
    ((1,), (0,), (0,)),
    ((4,), (), (4,)),
])
def test_expand_shapes(shape, target, expected):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    for const in ([1], []):
        same(one("Expand", [x, a64(*target)], const_inputs=const), np.broadcast_to(x, expected))


def test_expand_symbolic_and_errors():
    assert infer_type("Expand", [f32["batch", 1], None],
                      consts={1: a64(1, 5)}) == f32["batch", 5]
    assert infer_type("Expand", [f32[3, 1], None],
                      consts={1: a64(2, 1, 1)}) == f32[2, 3, 1]
    dynamic = infer_type("Expand", [f32["b", 1, 4], i64[4]])
    assert [is_fresh(d) for d in dynamic.shape] == [True, True, True, False]
    assert dynamic.shape[3] == 4
    with verr("shape.*negative"):
        infer_type("Expand", [f32[3], None], consts={1: a64(-1)})
    with verr("shape.*does not broadcast"):
        infer_type("Expand", [f32[3], None], consts={1: a64(4)})
    with pytest.raises(ExecutionError, match="does not broadcast"):
        run_op("Expand", [np.zeros(3, np.float32), a64(4)])


def test_expand_huge_constant_shape_fails_at_construction():
    tracemalloc.start()
    try:
        g = GraphBuilder()
        x = g.input("x", f32[1])
        with pytest.raises(LimitExceededError, match="1000000000000 elements"):
            g.output(g.op("Expand", x, a64(10**6, 10**6)))  # the builder or the verifier
            g.build()
        assert tracemalloc.get_traced_memory()[1] < 10 << 20
    finally:
        tracemalloc.stop()


def test_expand_huge_runtime_shape_fails_in_kernel():
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceededError, match="Expand"):
            run_op("Expand", [np.ones(1, np.float32), a64(10**6, 10**6)])
        assert tracemalloc.get_traced_memory()[1] < 10 << 20
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- Shape / Identity

@pytest.mark.parametrize("dtype", dtypes("Shape"))
def test_shape_dtypes(dtype):
    same(one("Shape", [random_array(dtype, (2, 3, 4))]), a64(2, 3, 4))


@pytest.mark.parametrize("start, end, expected", [
    (0, None, [2, 3, 4]), (-1, None, [4]), (0, -1, [2, 3]), (1, 2, [3]), (-10, 10, [2, 3, 4]),
    (2, 1, []), (5, None, []), (0, -5, []),
])
def test_shape_start_end(start, end, expected):
    x = np.zeros((2, 3, 4), np.bool_)
    out = one("Shape", [x], {"start": start, "end": end})
    same(out, np.array(expected, np.int64))
    assert infer_type("Shape", [f32["a", "b", 4]], {"start": start, "end": end}) == i64[
        len(expected)]


def test_shape_scalar_and_empty():
    same(one("Shape", [np.array(1.0, np.float32)]), np.zeros((0,), np.int64))
    same(one("Shape", [np.zeros((0, 5), np.int8)]), a64(0, 5))


@pytest.mark.parametrize("dtype", dtypes("Identity"))
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_identity(dtype, shape):
    x = random_array(dtype, shape)
    same(one("Identity", [x]), x)
    assert infer_type("Identity", [TensorType(dtype, ("n", 3))]) == TensorType(dtype, ("n", 3))


# --------------------------------------------------------------------------- Constant

def run_constant(**attrs) -> np.ndarray:
    g = GraphBuilder()
    g.output(g.op("Constant", **attrs), name="y")
    return run(g.build())["y"]


@pytest.mark.parametrize("dtype", dtypes("Constant"))
def test_constant_value(dtype):
    value = random_array(dtype, (2, 3))
    same(run_constant(value=value), value)
    same(run_constant(value=value[:1, :1].reshape(())), value[:1, :1].reshape(()))


def test_constant_scalar_attributes():
    same(run_constant(value_float=1.5), np.array(1.5, np.float32))
    same(run_constant(value_floats=[1.0, -2.5]), np.array([1.0, -2.5], np.float32))
    same(run_constant(value_int=-7), np.array(-7, np.int64))
    same(run_constant(value_ints=[3, I64_MAX]), a64(3, I64_MAX))
    same(run_constant(value_ints=[]), np.zeros((0,), np.int64))


def test_constant_feeds_shape_inference():
    g = GraphBuilder()
    x = g.input("x", f32["batch", 6])
    shape = g.op("Constant", value=a64(-1, 2, 3))
    assert g.op("Reshape", x, shape).type == f32["batch", 2, 3]


def test_constant_errors():
    with verr("exactly one"):
        run_constant()
    with verr("exactly one.*value_float.*value_int"):
        run_constant(value_float=1.0, value_int=1)
    with verr("value_string"):
        run_constant(value_string="hi")


# --------------------------------------------------------------------------- ConstantOfShape

@pytest.mark.parametrize("dtype", dtypes("ConstantOfShape", "T2"))
def test_constant_of_shape_dtypes(dtype):
    value = random_array(dtype, (1,), seed=3)
    out = one("ConstantOfShape", [a64(2, 3)], {"value": value})
    same(out, np.full((2, 3), value[0], dtype.numpy))


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_constant_of_shape_default_and_shapes(shape):
    for const in ([0], []):
        out = one("ConstantOfShape", [a64(*shape)], const_inputs=const)
        same(out, np.zeros(shape, np.float32))
    out = one("ConstantOfShape", [a64(*shape)], {"value": np.array(7, np.int32)})
    same(out, np.full(shape, 7, np.int32))


def test_constant_of_shape_inference_and_errors():
    assert infer_type("ConstantOfShape", [None], {"value": np.array([1], np.int8)},
                      consts={0: a64(4, 0)}) == DType.INT8[4, 0]
    dynamic = infer_type("ConstantOfShape", [i64[2]])
    assert dynamic.dtype is DType.FLOAT32 and all(is_fresh(d) for d in dynamic.shape)
    with verr("input.*negative"):
        infer_type("ConstantOfShape", [None], consts={0: a64(2, -1)})
    with verr("value.*one element"):
        infer_type("ConstantOfShape", [None], {"value": np.array([1, 2], np.int8)},
                   consts={0: a64(2)})
    with pytest.raises(ExecutionError, match="negative"):
        run_op("ConstantOfShape", [a64(-1)])
    with pytest.raises(LimitExceededError):
        run_op("ConstantOfShape", [a64(10**6, 10**6)])
    with pytest.raises(LimitExceededError):
        run_op("ConstantOfShape", [a64(10**6, 10**6)], const_inputs=[0])


# --------------------------------------------------------------------------- Pad

DOC_DATA = np.array([[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]], np.float32)


@pytest.mark.parametrize("mode, pads, expected", [  # the ONNX doc examples
    ("constant", (0, 2, 0, 0), [[0, 0, 1.0, 1.2], [0, 0, 2.3, 3.4], [0, 0, 4.5, 5.7]]),
    ("reflect", (0, 2, 0, 0), [[1.0, 1.2, 1.0, 1.2], [2.3, 3.4, 2.3, 3.4],
                               [4.5, 5.7, 4.5, 5.7]]),
    ("edge", (0, 2, 0, 0), [[1.0, 1.0, 1.0, 1.2], [2.3, 2.3, 2.3, 3.4], [4.5, 4.5, 4.5, 5.7]]),
    ("wrap", (2, 1, 1, 1), [[3.4, 2.3, 3.4, 2.3], [5.7, 4.5, 5.7, 4.5], [1.2, 1.0, 1.2, 1.0],
                            [3.4, 2.3, 3.4, 2.3], [5.7, 4.5, 5.7, 4.5], [1.2, 1.0, 1.2, 1.0]]),
])
def test_pad_doc_examples(mode, pads, expected):
    for const in ([1], []):
        out = one("Pad", [DOC_DATA, a64(*pads)], {"mode": mode}, const_inputs=const)
        same(out, np.array(expected, np.float32))


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes_match_numpy(mode):
    x = np.arange(20, dtype=np.float64).reshape(4, 5)
    for pads in ((1, 3, 2, 4), (3, 2, 1, 4), (9, 0, 5, 11)):
        out = one("Pad", [x, a64(*pads)], {"mode": mode})
        same(out, np.pad(x, ((pads[0], pads[2]), (pads[1], pads[3])), mode=mode))
    same(one("Pad", [x[:, :1], a64(0, 2, 0, 1)], {"mode": mode}),
         np.pad(x[:, :1], ((0, 0), (2, 1)), mode=mode))


def test_pad_wrap_more_than_size():
    x = np.array([1, 2], np.int32)
    expected = np.array([2, 1, 2, 1, 2, 1, 2, 1, 2], np.int32)
    same(one("Pad", [x, a64(3, 4)], {"mode": "wrap"}), expected)


@pytest.mark.parametrize("dtype", dtypes("Pad"))
def test_pad_dtypes(dtype):
    x = random_array(dtype, (2, 3))
    fill = random_array(dtype, (), seed=9)
    out = one("Pad", [x, a64(1, 0, 0, 2), fill])
    same(out, np.pad(x, ((1, 0), (0, 2)), constant_values=fill))
    same(one("Pad", [x, a64(0, 1, 0, 1)], {"mode": "edge"}), np.pad(x, ((0, 0), (1, 1)), "edge"))


def test_pad_negative_axes_and_crop():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    same(one("Pad", [x, a64(-1, 2), None, a64(-1)]), np.pad(x[:, 1:], ((0, 0), (0, 2))))
    same(one("Pad", [x, a64(1, -2), None, np.array([0], np.int32)], const_inputs=[1, 3]),
         np.pad(x[:1], ((1, 0), (0, 0))))
    # cropping happens first, then edge padding copies the new edge
    same(one("Pad", [x, a64(0, -1, 0, 1)], {"mode": "edge"}),
         np.pad(x[:, 1:], ((0, 0), (0, 1)), "edge"))
    same(one("Pad", [x, a64(-3, 0, 0, 0)]), np.zeros((0, 4), np.int64))


def test_pad_empty_and_scalar():
    x = np.zeros((0, 2), np.float32)
    same(one("Pad", [x, a64(1, 1, 1, 0), np.array(5.0, np.float32)]),
         np.full((2, 3), 5.0, np.float32))
    s = np.array(3, np.int8)
    same(one("Pad", [s, a64()]), s)


def test_pad_symbolic():
    assert infer_type("Pad", [f32["batch", 3], None], consts={1: a64(0, 1, 0, 1)}) == f32[
        "batch", 5]
    assert infer_type("Pad", [f32["n", 3], None, None, None],
                      consts={1: a64(2, -1), 3: a64(0)}) == f32["n+1", 3]
    dynamic = infer_type("Pad", [f32["b", 3], i64[2], None, None], consts={3: a64(1)})
    assert dynamic.shape[0] == "b" and is_fresh(dynamic.shape[1])


@pytest.mark.parametrize("pads, attrs, match", [
    ((0, 0), {"mode": "mirror"}, "mode='mirror'"),
    ((0, 0), {}, "pads.*2 entries, expected 2 \\* 2"),
    ((-2, 0, -2, 0), {}, "pads.*remove more"),
])
def test_pad_errors(pads, attrs, match):
    with verr(match):
        infer_type("Pad", [f32[3, 3], None], attrs, consts={1: a64(*pads)})
    with verr("edge.*non-empty"):
        infer_type("Pad", [f32[0, 3], None], {"mode": "edge"}, consts={1: a64(1, 0, 0, 0)})
    with verr("constant_value.*scalar"):
        infer_type("Pad", [f32[3], i64[2], f32[2]])
    with pytest.raises(ExecutionError, match=r"reflect.*non-empty"):
        run_op("Pad", [np.zeros(0, np.float32), a64(3, 0)], {"mode": "reflect"})


def test_pad_runtime_limit():
    with pytest.raises(LimitExceededError):
        run_op("Pad", [np.zeros((1, 1), np.float32), a64(10**6, 10**6, 0, 0)])


# --------------------------------------------------------------------------- Tile

@pytest.mark.parametrize("dtype", dtypes("Tile"))
def test_tile_dtypes(dtype):
    x = random_array(dtype, (2, 3))
    same(one("Tile", [x, a64(2, 3)]), np.tile(x, (2, 3)))
    same(one("Tile", [x, a64(1, 2)], const_inputs=[1]), np.tile(x, (1, 2)))


def test_tile_edge_shapes():
    x = np.array([[1, 2]], np.int32)
    same(one("Tile", [x, a64(2, 0)]), np.zeros((2, 0), np.int32))
    same(one("Tile", [x, a64(3, 1)]), np.array([[1, 2], [1, 2], [1, 2]], np.int32))
    same(one("Tile", [np.array(4, np.int8), a64()]), np.array(4, np.int8))
    same(one("Tile", [np.zeros((0, 2), np.int8), a64(3, 2)]), np.zeros((0, 4), np.int8))


def test_tile_symbolic_and_errors():
    assert infer_type("Tile", [f32["batch", 3], None], consts={1: a64(2, 1)}) == f32[
        "2*batch", 3]
    dynamic = infer_type("Tile", [f32["b", 3], i64[2]])
    assert all(is_fresh(d) for d in dynamic.shape)
    with verr("repeats.*1 entries"):
        infer_type("Tile", [f32[2, 3], None], consts={1: a64(2)})
    with verr("repeats.*negative"):
        infer_type("Tile", [f32[2, 3], None], consts={1: a64(2, -1)})
    with pytest.raises(LimitExceededError):
        run_op("Tile", [np.zeros((1, 1), np.float32), a64(10**6, 10**6)])


# --------------------------------------------------------------------------- Range

def scalars(dtype: DType, *values) -> list[np.ndarray]:
    return [np.array(v, dtype.numpy) for v in values]


@pytest.mark.parametrize("dtype", dtypes("Range"))
def test_range_dtypes(dtype):
    for start, limit, delta, expected in ((3, 9, 3, [3, 6]), (10, 4, -2, [10, 8, 6]),
                                          (1, 1, 1, []), (5, 1, 1, []), (-2, 3, 2, [-2, 0, 2])):
        for const in ([0, 1, 2], []):
            out = one("Range", scalars(dtype, start, limit, delta), const_inputs=const)
            same(out, np.array(expected, dtype.numpy))


@pytest.mark.parametrize("dtype", [d for d in dtypes("Range") if d.is_float])
def test_range_fractional(dtype):
    out = one("Range", scalars(dtype, 0.5, 2.0, 0.25))
    np.testing.assert_allclose(out.astype(np.float64), [0.5, 0.75, 1.0, 1.25, 1.5, 1.75])
    assert out.dtype == dtype.numpy
    out = one("Range", scalars(dtype, 1.0, 0.0, -0.3))
    np.testing.assert_allclose(out.astype(np.float64), [1.0, 0.7, 0.4, 0.1], atol=1e-2)


def test_range_integer_extremes():
    info = np.iinfo(np.int64)
    out = one("Range", scalars(DType.INT64, info.min, info.max, info.max))
    same(out, np.array([info.min, -1, info.max - 1], np.int64))
    out = one("Range", scalars(DType.INT16, 32760, 32767, 3))
    same(out, np.array([32760, 32763, 32766], np.int16))


def test_range_inference_and_errors():
    assert infer_type("Range", [None, None, None],
                      consts={0: a64(0).reshape(()), 1: a64(10).reshape(()),
                              2: a64(3).reshape(())}) == i64[4]
    dynamic = infer_type("Range", [f32[()], f32[()], f32[()]])
    assert is_fresh(dynamic.shape[0])
    with verr("delta.*0"):
        infer_type("Range", [None, None, None], consts={i: np.array(v, np.int32)
                                                        for i, v in enumerate((0, 3, 0))})
    with verr("limit.*scalar"):
        infer_type("Range", [f32[()], f32[1], f32[()]])
    with verr("stash_type"):
        infer_type("Range", [f32[()], f32[()], f32[()]], {"stash_type": 10})
    with pytest.raises(ExecutionError, match="delta"):
        run_op("Range", scalars(DType.INT32, 0, 3, 0))
    with pytest.raises(ExecutionError, match="finite"):
        run_op("Range", scalars(DType.FLOAT32, 0, np.inf, 1))
    with pytest.raises(LimitExceededError):
        run_op("Range", scalars(DType.INT64, 0, 10**12, 1))
    with pytest.raises(LimitExceededError):
        run_op("Range", scalars(DType.FLOAT64, 0, 1e12, 1), const_inputs=[0, 1, 2])
