"""Graphs: the builder, verification on construction, the printer and the executor."""

import dataclasses
import pickle

import numpy as np
import pytest

from polyhal import ops
from polyhal.errors import ExecutionError, InputBindingError, VerificationError
from polyhal.ir import DType, Graph, GraphBuilder, Node, TensorType, Value, f16, f32, i32
from polyhal.passes import FUSION_RULES, apply_rules, simplify, specialize_to
from polyhal.reference import ReferenceExecutor, run


def mlp() -> Graph:
    g = GraphBuilder("mlp")
    x = g.input("x", f32["batch", 4])
    w = g.constant(np.arange(8, dtype=np.float32).reshape(4, 2), name="w")
    g.output(ops.relu(x @ w - 10.0), name="y")
    return g.build()


def test_dtype_indexing_makes_tensor_types():
    assert f32["batch", 3] == TensorType(DType.FLOAT32, ("batch", 3))
    assert f32[()] == TensorType(DType.FLOAT32, ())
    assert str(f16[2, "n*2"]) == "float16[2, 2*n]"


def test_builder_infers_symbolic_types():
    graph = mlp()
    assert graph.outputs[0].type == f32["batch", 2]
    assert [n.op for n in graph.nodes] == ["MatMul", "Sub", "Relu"]


def test_graph_is_immutable():
    graph = mlp()
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        graph.constants["w"][0, 0] = 1.0
    with pytest.raises(TypeError):
        graph.nodes[0].attrs["x"] = 1  # type: ignore[index]


def test_constant_is_copied_from_user_array():
    array = np.ones(3, np.float32)
    g = GraphBuilder()
    x = g.input("x", f32[3])
    g.output(x + g.constant(array))
    graph = g.build()
    array[:] = 5
    assert run(graph, np.zeros(3, np.float32))[graph.outputs[0].name].tolist() == [1, 1, 1]


def test_read_only_constants_are_shared_and_views_of_writeable_arrays_copied():
    shared = np.ones(3, np.float32)
    shared.flags.writeable = False
    base = np.ones(6, np.float32)
    view = base[:3]
    view.flags.writeable = False  # still changes with base
    g = GraphBuilder()
    x = g.input("x", f32["n", 3])
    g.output(x + g.constant(shared, name="a") + g.constant(view, name="b"), name="y")
    graph = g.build()
    assert graph.constants["a"] is shared
    base[:] = 5
    assert graph.constants["b"].tolist() == [1, 1, 1]
    # Graphs that passes derive from it hold the same arrays, not copies.
    specialized = apply_rules(simplify(specialize_to(graph, [(2, 3)])), FUSION_RULES)
    assert all(any(a is b for b in graph.constants.values())
               for a in specialized.constants.values())
    assert Graph("g", graph.inputs, graph.outputs, graph.nodes,
                 dict(graph.constants)).constants["b"] is graph.constants["b"]


def test_replace_reverifies():
    graph = mlp()
    with pytest.raises(VerificationError, match="declared"):
        dataclasses.replace(graph, outputs=(Value("y", f32["batch", 3]),))


def test_a_pickled_graph_comes_back_whole_without_being_verified_again(monkeypatch):
    """Pickles carry graphs between polyhal's own processes, made of verified graphs:
    verifying again cost more than a small case's compile in a worker."""
    graph = mlp()
    data = pickle.dumps(graph)
    import polyhal.ir.verify

    def refuse(graph):
        raise AssertionError("verified again")

    monkeypatch.setattr(polyhal.ir.verify, "verify_graph", refuse)
    copy = pickle.loads(data)
    assert str(copy) == str(graph)
    assert dict(copy.value_types) == dict(graph.value_types)
    assert copy.value_type("y") == f32["batch", 2]
    np.testing.assert_array_equal(copy.constants["w"], graph.constants["w"])
    with pytest.raises(ValueError):
        copy.constants["w"][0, 0] = 1.0  # read-only, as every graph's constants
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.name = "other"  # type: ignore[misc]
    x = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(run(copy, x)["y"], run(graph, x)["y"])


def test_executor_binds_symbols_and_runs():
    graph = mlp()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = np.maximum(x @ np.arange(8, dtype=np.float32).reshape(4, 2) - 10, 0)
    np.testing.assert_array_equal(run(graph, x)["y"], expected)
    np.testing.assert_array_equal(run(graph, x=x[:1])["y"], expected[:1])


def test_executor_checks_inputs():
    graph = mlp()
    with pytest.raises(InputBindingError, match="dtype float64"):
        run(graph, np.zeros((2, 4)))
    with pytest.raises(InputBindingError, match="dimension 1 is 5"):
        run(graph, np.zeros((2, 5), np.float32))
    with pytest.raises(InputBindingError, match="missing input"):
        run(graph)
    with pytest.raises(InputBindingError, match="no input 'z'"):
        run(graph, z=np.zeros((2, 4), np.float32))


@pytest.mark.parametrize("make", [ops.transpose, ops.flatten,
                                  lambda x: ops.reshape(x, np.array([4], np.int64))],
                         ids=["transpose", "flatten", "reshape"])
def test_a_result_never_shares_memory_with_the_callers_input(make):
    """Transpose, Flatten and Reshape kernels return views of their input: written to,
    a result changed the caller's array."""
    g = GraphBuilder("views")
    g.output(make(g.input("x", f32[2, 2])), name="y")
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    result = run(g.build(), x)["y"]
    result[...] = -1
    np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32).reshape(2, 2))


def test_ndarray_subclasses_run_as_plain_arrays_and_masked_arrays_are_refused():
    """numpy's kernels honour a mask that a device's upload drops: refused, so that every
    device sees the same input."""
    g = GraphBuilder("sum")
    g.output(ops.reduce_sum(g.input("x", f32[2, 2]), keepdims=0), name="y")
    graph = g.build()
    tagged = np.ones((2, 2), np.float32).view(type("Tagged", (np.ndarray,), {}))
    assert type(run(graph, tagged)["y"]) is np.ndarray and run(graph, tagged)["y"] == 4
    masked = np.ma.masked_array(np.ones((2, 2), np.float32), mask=[[0, 1], [0, 0]])
    with pytest.raises(InputBindingError, match=r"input 'x' \(expects float32\[2, 2\]\): got a "
                                                "masked array"):
        run(graph, masked)


def test_symbols_bind_consistently_across_inputs():
    g = GraphBuilder()
    a = g.input("a", f32["n"])
    b = g.input("b", f32["n"])
    g.output(a + b)
    graph = g.build()
    with pytest.raises(InputBindingError, match="expected n"):
        run(graph, np.zeros(2, np.float32), np.zeros(3, np.float32))


def test_low_precision_computes_in_float32_and_rounds_once():
    g = GraphBuilder()
    a = g.input("a", f16[3])
    g.output(a * a)
    x = np.array([0.1, 200.0, 1e-4], np.float16)
    out = run(g.build(), x)
    expected = (x.astype(np.float32) * x.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(next(iter(out.values())), expected)


def test_kernel_errors_name_the_node():
    graph = Graph("g", (Value("x", f32[2]),), (Value("y", f32[2]),),
                  (Node("Relu", "bad", ("x",), (Value("y", f32[2]),)),))
    executor = ReferenceExecutor(graph)
    executor._plan[0] = (executor._plan[0][0],
                         dataclasses.replace(executor._plan[0][1], kernel=lambda x: x[5]),
                         executor._plan[0][2])
    with pytest.raises(ExecutionError, match=r"node 'bad' \(core.Relu\).*IndexError"):
        executor(np.zeros(2, np.float32))


def test_kernel_returning_wrong_dtype_is_caught():
    graph = Graph("g", (Value("x", i32[2]),), (Value("y", i32[2]),),
                  (Node("Relu", "r", ("x",), (Value("y", i32[2]),)),))
    executor = ReferenceExecutor(graph)
    node, op, attrs = executor._plan[0]
    executor._plan[0] = (node, dataclasses.replace(op, kernel=lambda x: x.astype(np.int64)),
                         attrs)
    with pytest.raises(ExecutionError, match="dtype int64"):
        executor(np.zeros(2, np.int32))


def test_printer_is_stable_and_readable():
    text = str(mlp())
    assert text.splitlines()[0] == "graph mlp(x: float32[batch, 4]) -> (y: float32[batch, 2]) {"
    assert "matmul_1: float32[batch, 2] = core.MatMul(x, w)" in text
    assert text == str(mlp())
