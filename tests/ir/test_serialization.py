"""Serialization round trips exactly: structure, attributes, constants, dtypes."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyhal import ops
from polyhal.ir import DType, Graph, GraphBuilder, TensorType, load, save
from polyhal.ir.serialize import to_document

DTYPES = list(DType)
FLOAT_DTYPES = [DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64]
SPECIAL_FLOATS = st.sampled_from([0.0, -0.0, 1.5, 1e-30, 3.4e38, float("inf"), float("-inf"),
                                  float("nan")])
DIM = st.one_of(st.integers(0, 3), st.sampled_from(["batch", "seq"]))


def arrays(dtype: DType, shape: tuple[int, ...]):
    if dtype is DType.BOOL:
        elements = st.booleans()
    elif dtype.is_int:
        info = np.iinfo(dtype.numpy)
        elements = st.integers(int(info.min), int(info.max))
    else:
        elements = st.one_of(st.floats(-1e4, 1e4, width=32), SPECIAL_FLOATS)
    size = int(np.prod(shape)) if shape else 1

    def array(xs: list) -> np.ndarray:
        with np.errstate(over="ignore"):  # beyond float16's range: inf, a value to round-trip
            return (np.array(xs, dtype=np.float64 if dtype.is_float else dtype.numpy)
                    .astype(dtype.numpy).reshape(shape))

    return st.lists(elements, min_size=size, max_size=size).map(array)


@st.composite
def graphs(draw) -> Graph:
    g = GraphBuilder(draw(st.sampled_from(["g", "model", "a graph with spaces"])))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    shape = tuple(draw(st.lists(DIM, min_size=0, max_size=3)))
    x = g.input("x", TensorType(dtype, shape))
    values = [x]
    for _ in range(draw(st.integers(0, 3))):
        c_dtype = draw(st.sampled_from(DTYPES))
        c_shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        g.constant(draw(arrays(c_dtype, c_shape)))
    for _ in range(draw(st.integers(1, 6))):
        v = draw(st.sampled_from(values))
        kind = draw(st.sampled_from(["unary", "binary", "leaky", "cast", "transpose",
                                     "constant", "concat"]))
        if kind == "unary":
            out = g.op(draw(st.sampled_from(["Relu", "Neg", "Abs", "Exp", "Tanh"])), v)
        elif kind == "binary":
            out = g.op(draw(st.sampled_from(["Add", "Mul", "Sub", "Div"])), v, v)
        elif kind == "leaky":
            out = ops.leaky_relu(v, alpha=draw(SPECIAL_FLOATS))
        elif kind == "cast":
            out = ops.cast(v, to=draw(st.sampled_from(FLOAT_DTYPES)))
        elif kind == "transpose":
            perm = draw(st.permutations(range(v.type.rank)))
            out = ops.transpose(v, perm=list(perm))
        elif kind == "constant":
            c_dtype = draw(st.sampled_from(DTYPES))
            out = g.op("Constant", value=draw(arrays(c_dtype, (2,))))
            g.output(out)
            continue
        elif v.type.rank:
            out = ops.concat(v, v, axis=draw(st.integers(-v.type.rank, v.type.rank - 1)))
        else:
            continue
        values.append(out)
    g.output(values[-1])
    return g.build()


def _equal_documents(a: Graph, b: Graph) -> None:
    doc_a, tensors_a = to_document(a)
    doc_b, tensors_b = to_document(b)
    assert json.dumps(doc_a, sort_keys=True) == json.dumps(doc_b, sort_keys=True)
    assert tensors_a.keys() == tensors_b.keys()
    for key in tensors_a:
        assert tensors_a[key].dtype == tensors_b[key].dtype
        assert tensors_a[key].shape == tensors_b[key].shape
        assert tensors_a[key].tobytes() == tensors_b[key].tobytes()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(graph=graphs())
def test_round_trip_is_exact(tmp_path, graph):
    path = save(graph, tmp_path / "m.json")
    loaded = load(path)
    _equal_documents(graph, loaded)
    assert str(loaded) == str(graph)
    for name, array in graph.constants.items():
        assert loaded.constants[name].dtype == array.dtype


def test_bfloat16_constant_round_trips(tmp_path):
    import ml_dtypes

    g = GraphBuilder("bf")
    x = g.input("x", TensorType(DType.BFLOAT16, (3,)))
    c = g.constant(np.array([1.0, -2.5, np.nan], ml_dtypes.bfloat16), name="c")
    g.output(x + c)
    graph = g.build()
    loaded = load(save(graph, tmp_path / "bf.json"))
    assert loaded.constants["c"].dtype == ml_dtypes.bfloat16
    assert loaded.constants["c"].tobytes() == graph.constants["c"].tobytes()


def test_save_is_atomic_and_leaves_no_temporaries(tmp_path):
    g = GraphBuilder("g")
    g.output(ops.relu(g.input("x", TensorType(DType.FLOAT32, (2,)))))
    save(g.build(), tmp_path / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.npz"]
