"""Model graphs: naming, parameter modes, devices, predict, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal import autodiff, nn, ops
from polyhal.autodiff.check import check_gradients
from polyhal.errors import InputBindingError, IRError
from polyhal.ir import GraphBuilder, Var, f32, f64

RNG = np.random.default_rng(0)


def _mlp(dtype: str = "float32") -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 5, dtype=dtype), nn.Tanh(), nn.Linear(5, 2, dtype=dtype))


def _cnn(dtype: str = "float32") -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, dtype=dtype), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3 * 4 * 4, 4, dtype=dtype), nn.LogSoftmax())


class TwoWay(nn.Module):
    """Two inputs, two outputs."""

    def __init__(self) -> None:
        self.left = nn.Linear(2, 2)
        self.right = nn.Linear(3, 2)

    def forward(self, a: Var, b: Var) -> tuple[Var, Var]:
        total = self.left(a) + self.right(b)
        return total, ops.relu(total)


def test_input_and_output_names():
    model = _mlp()
    graph = model.graph(f32["batch", 3])
    assert [v.name for v in graph.inputs] == ["x", "0.weight", "0.bias", "2.weight", "2.bias"]
    assert [v.name for v in graph.outputs] == ["y"]
    assert graph.inputs[1].type == f32[3, 5]
    two = TwoWay().graph((1, 2), (1, 3), name="two")
    assert graph.name == "model" and two.name == "two"
    assert [v.name for v in two.inputs][:2] == ["x0", "x1"]
    assert [v.name for v in two.outputs] == ["y0", "y1"]
    named = TwoWay().graph(f32["n", 2], f32["n", 3], input_names=["a", "b"],
                           output_names=["sum", "relu"])
    assert [v.name for v in named.inputs][:2] == ["a", "b"]
    assert [v.name for v in named.outputs] == ["sum", "relu"]


def test_constants_graph_has_only_model_inputs_and_the_same_outputs():
    model = _cnn().initialize(4)
    x = RNG.standard_normal((3, 2, 4, 4)).astype(np.float32)
    inputs_graph = model.graph(f32["batch", 2, 4, 4])
    constants_graph = model.graph(f32["batch", 2, 4, 4], params="constants")
    assert [v.name for v in constants_graph.inputs] == ["x"]
    assert set(constants_graph.constants) >= set(model.named_parameters())
    np.testing.assert_array_equal(polyhal.run(inputs_graph, **model.feeds(x=x))["y"],
                                  polyhal.run(constants_graph, x=x)["y"])


def test_constants_are_a_snapshot_of_the_values():
    model = nn.Linear(2, 2, bias=False)
    graph = model.graph((1, 2), params="constants")
    before = polyhal.run(graph, x=np.ones((1, 2), np.float32))["y"]
    model.weight.data[...] = 0
    np.testing.assert_array_equal(polyhal.run(graph, x=np.ones((1, 2), np.float32))["y"], before)


def test_cpu_device_matches_the_reference():
    model = _cnn().initialize(1)
    x = RNG.standard_normal((2, 2, 4, 4)).astype(np.float32)
    for params in ("inputs", "constants"):
        graph = model.graph(f32["batch", 2, 4, 4], params=params)
        feeds = model.feeds(x=x) if params == "inputs" else {"x": x}
        compiled = polyhal.compile(graph, device="cpu")
        assert compiled.placement.fallback_count == 0
        np.testing.assert_allclose(compiled(**feeds)["y"], polyhal.run(graph, **feeds)["y"],
                                   rtol=1e-5, atol=1e-6)


def test_predict_on_devices_and_its_cache():
    model = _mlp().initialize(2)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    expected = polyhal.run(model.graph(f32["batch", 3]), **model.feeds(x=x))["y"]
    np.testing.assert_array_equal(model.predict(x), expected)
    np.testing.assert_allclose(model.predict(x, device="cpu"), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(x, device="cpu", params="constants"), expected,
                               rtol=1e-5, atol=1e-6)
    cached = len(model._predict_cache)
    model.predict(x, device="cpu")
    assert len(model._predict_cache) == cached  # same device, mode and types: reused
    model[0].weight.data[...] *= 2  # in place: both modes see it
    fresh = polyhal.run(model.graph(f32["batch", 3]), **model.feeds(x=x))["y"]
    np.testing.assert_allclose(model.predict(x, device="cpu"), fresh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(x, device="cpu", params="constants"), fresh,
                               rtol=1e-5, atol=1e-6)
    model.append(nn.ReLU())  # a structural change rebuilds
    assert (model.predict(x) >= 0).all()


def test_predict_returns_a_tuple_for_several_outputs():
    model = TwoWay()
    total, relu = model.predict(np.ones((2, 2), np.float32), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(relu, np.maximum(total, 0))


def test_predict_errors():
    model = _mlp()
    with pytest.raises(IRError, match=r"^layer '0' \(Linear\): input float64\[4, 3\] is float64"):
        model.predict(np.ones((4, 3)))
    with pytest.raises(IRError, match="unknown-mode"):
        model.predict(np.ones((4, 3), np.float32), params="unknown-mode")
    g = GraphBuilder()
    with pytest.raises(InputBindingError, match="input 0 is a graph value"):
        model.predict(g.input("x", f32[1, 3]))


def test_graph_argument_errors():
    model = _mlp()
    with pytest.raises(IRError, match=r"Sequential\.graph: params='weights' is not one of"):
        model.graph(f32[1, 3], params="weights")
    with pytest.raises(IRError, match=r"input type 0 must be a TensorType .* got str"):
        model.graph("x")
    with pytest.raises(IRError, match="input_names must be 1 non-empty name"):
        model.graph(f32[1, 3], input_names=["a", "b"])
    with pytest.raises(IRError, match=r"output_names .* has duplicates"):
        TwoWay().graph((1, 2), (1, 3), output_names=["o", "o"])
    with pytest.raises(IRError, match=r"input name\(s\) '0\.bias' are also parameter names"):
        model.graph(f32[1, 3], input_names=["0.bias"])
    with pytest.raises(IRError, match="bind: params='x'"), model.bind(GraphBuilder(), "x"):
        pass
    with pytest.raises(IRError, match="bind: expected a GraphBuilder"), model.bind(None):
        pass
    with pytest.raises(InputBindingError, match=r"input '0\.bias' is also a parameter name"):
        model.feeds(**{"0.bias": np.zeros(5)})


def test_forward_must_return_graph_values():
    class Numbers(nn.Module):
        def forward(self, x: Var) -> object:
            return 3

    with pytest.raises(IRError, match="forward returned int as output 0"):
        Numbers().graph(f32[1])


def test_feeds_are_read_only_views():
    model = nn.Linear(2, 2)
    feeds = model.feeds()
    with pytest.raises(ValueError, match="read-only"):
        feeds["weight"][...] = 0


def test_gradients_of_a_loss_match_finite_differences():
    model = _mlp("float64").initialize(5)
    g = GraphBuilder("loss")
    x = g.input("x", f64[6, 3])
    target = g.input("target", f64[6, 2])
    with model.bind(g):
        error = model(x) - target
    g.output(ops.reduce_mean(error * error, keepdims=0), name="loss")
    loss = g.build()
    feeds = model.feeds(x=RNG.standard_normal((6, 3)), target=RNG.standard_normal((6, 2)))
    report = check_gradients(loss, feeds, wrt=model.trainable_names())
    assert report.ok, report
    gradient = autodiff.grad(loss, wrt=model.trainable_names())
    got = polyhal.run(gradient, **feeds)
    # The last layer's weight gradient in closed form: h^T (2 (y - t) / N).
    hidden = np.tanh(feeds["x"] @ feeds["0.weight"] + feeds["0.bias"])
    residual = hidden @ feeds["2.weight"] + feeds["2.bias"] - feeds["target"]
    np.testing.assert_allclose(got["grad_2.weight"], hidden.T @ (2 * residual / residual.size),
                               rtol=1e-12)


def test_cnn_gradients_match_finite_differences():
    model = _cnn("float64").initialize(6)
    graph = model.graph(f64[2, 2, 4, 4])  # Conv's gradient rule needs static shapes
    feeds = model.feeds(x=RNG.standard_normal((2, 2, 4, 4)))
    report = check_gradients(graph, feeds, wrt=model.trainable_names())
    assert report.ok, report


def test_frozen_parameters_are_inputs_but_not_differentiated():
    model = _mlp("float64").initialize(0).freeze("0")
    graph = model.graph(f64[4, 3])
    assert "0.weight" in [v.name for v in graph.inputs]
    gradient = autodiff.grad(graph, wrt=model.trainable_names())
    assert [v.name for v in gradient.outputs] == ["y", "grad_2.weight", "grad_2.bias"]
    out = polyhal.compile(gradient, device="cpu")(**model.feeds(x=np.ones((4, 3))))
    np.testing.assert_allclose(out["grad_2.bias"], np.full(2, 4.0))
