"""Module: registration, dotted names, sharing, freezing, composition, repr, errors."""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal import nn, ops
from polyhal.errors import IRError, VerificationError
from polyhal.ir import GraphBuilder, Var, f32


class Block(nn.Module):
    """A scale parameter registered before a submodule, to check interleaved order."""

    def __init__(self) -> None:
        self.scale = nn.Parameter((3,), nn.init.ones())
        self.body = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3, bias=False))
        self.shift = nn.Parameter((3,), nn.init.zeros())

    def forward(self, x: Var) -> Var:
        return self.body(x * self.scale) + self.shift


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(2, 3), Block())
        self.head = nn.Linear(3, 1)

    def forward(self, x: Var) -> Var:
        return self.head(self.encoder(x))


def test_dotted_names_follow_registration_order():
    model = Encoder()
    assert list(model.named_parameters()) == [
        "encoder.0.weight", "encoder.0.bias", "encoder.1.scale", "encoder.1.body.0.weight",
        "encoder.1.body.0.bias", "encoder.1.body.2.weight", "encoder.1.shift", "head.weight",
        "head.bias"]
    assert list(model.named_modules()) == [
        "", "encoder", "encoder.0", "encoder.1", "encoder.1.body", "encoder.1.body.0",
        "encoder.1.body.1", "encoder.1.body.2", "head"]
    assert model.parameters() == list(model.named_parameters().values())
    assert model.num_parameters() == 6 + 3 + 3 + 9 + 3 + 9 + 3 + 3 + 1


def test_parameter_attribute_outside_a_build_is_the_parameter():
    layer = nn.Linear(2, 3)
    assert isinstance(layer.weight, nn.Parameter)
    assert layer.weight.shape == (2, 3) and layer.weight.name == "weight"
    assert nn.Linear(2, 3, bias=False).bias is None


def test_shared_module_is_listed_once_and_shares_values():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert list(model.named_parameters()) == ["0.weight", "0.bias"]
    assert model.num_parameters() == 6
    graph = model.graph(f32["batch", 2])
    assert [v.name for v in graph.inputs] == ["x", "0.weight", "0.bias"]
    assert sum(n.op == "MatMul" for n in graph.nodes) == 2
    x = np.array([[1.0, -2.0]], np.float32)
    w, b = shared.weight.data, shared.bias.data
    expected = np.maximum(x @ w + b, 0) @ w + b
    np.testing.assert_allclose(polyhal.run(graph, **model.feeds(x=x))["y"], expected, rtol=1e-6)


def test_tied_parameter_is_listed_under_its_first_name():
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    second.weight = first.weight
    model = nn.Sequential(first, second)
    assert list(model.named_parameters()) == ["0.weight", "0.bias", "1.bias"]


def test_freeze_and_unfreeze_by_module_and_by_name():
    model = Encoder()
    assert model.trainable_names() == list(model.named_parameters())
    assert model.freeze("encoder") is model
    assert model.trainable_names() == ["head.weight", "head.bias"]
    model.unfreeze("encoder.1.scale")
    assert model.trainable_names() == ["encoder.1.scale", "head.weight", "head.bias"]
    assert model.num_parameters(trainable_only=True) == 3 + 3 + 1
    model.freeze()
    assert model.trainable_names() == []
    model.unfreeze()
    assert model.trainable_names() == list(model.named_parameters())
    assert model.trainable_names(prefix="m.")[0] == "m.encoder.0.weight"


def test_freeze_unknown_name_lists_the_known_ones():
    with pytest.raises(IRError, match=r"freeze: no parameter or submodule named 'nope'.*"
                                      r"0\.weight"):
        nn.Sequential(nn.Linear(1, 1)).freeze("nope")


def test_composition_and_errors_name_the_nested_layer():
    model = Encoder()
    graph = model.graph(f32["batch", 2])
    assert graph.outputs[0].type == f32["batch", 1]
    with pytest.raises(VerificationError, match=r"^layer 'encoder\.0' \(Linear\): input "
                                                r"float32\[batch, 5\] has 5 features"):
        model.graph(f32["batch", 5])


def test_errors_from_ops_inside_a_custom_forward_name_the_layer():
    class Bad(nn.Module):
        def forward(self, x: Var) -> Var:
            return ops.matmul(x, np.ones((7, 2), np.float32))

    with pytest.raises(VerificationError, match=r"^layer '1' \(Bad\): node .*core\.MatMul"):
        nn.Sequential(nn.Identity(), Bad()).graph(f32[3, 4])


def test_bind_adds_a_model_to_a_loss_graph_and_yields_parameter_values():
    model = nn.Linear(3, 1)
    g = GraphBuilder("loss")
    x = g.input("x", f32["batch", 3])
    with model.bind(g) as params:
        assert set(params) == {"weight", "bias"} and len(params) == 2
        decay = ops.reduce_sum(params["weight"] * params["weight"], keepdims=0)
        y = model(x)
    g.output(ops.reduce_mean(y * y, keepdims=0) + decay * 0.1, name="loss")
    graph = g.build()
    assert [v.name for v in graph.inputs] == ["x", "weight", "bias"]
    xs = np.ones((4, 3), np.float32)
    w = model.weight.data
    expected = np.mean((xs @ w + model.bias.data) ** 2) + 0.1 * np.sum(w * w)
    np.testing.assert_allclose(polyhal.run(graph, **model.feeds(x=xs))["loss"], expected,
                               rtol=1e-6)


def test_two_models_in_one_builder_with_prefixes():
    generator, critic = nn.Linear(2, 2), nn.Linear(2, 1)
    g = GraphBuilder("gan")
    z = g.input("z", f32["batch", 2])
    with generator.bind(g, prefix="gen."), critic.bind(g, prefix="critic."):
        g.output(critic(generator(z)), name="score")
    graph = g.build()
    assert [v.name for v in graph.inputs] == [
        "z", "gen.weight", "gen.bias", "critic.weight", "critic.bias"]
    feeds = {**generator.feeds(prefix="gen.", z=np.ones((1, 2), np.float32)),
             **critic.feeds(prefix="critic.")}
    assert polyhal.run(graph, **feeds)["score"].shape == (1, 1)


def test_a_module_of_another_model_cannot_leak_its_parameters():
    outsider = nn.Linear(2, 2)

    class Leaky(nn.Module):
        def forward(self, x: Var) -> Var:
            return outsider(x)

    with pytest.raises(IRError, match=r"parameter 'weight' of Linear .* does not belong to the "
                                      "model being built"):
        Leaky().graph(f32[1, 2])


def test_a_parameter_object_is_never_baked_as_a_constant():
    weight = nn.Parameter((2, 2), nn.init.ones())

    class Baker(nn.Module):
        def forward(self, x: Var) -> Var:
            return x @ weight

    with pytest.raises(IRError, match=r"was used as an array"):
        Baker().graph(f32[1, 2])
    with pytest.raises(IRError, match="was used as an array"):
        np.asarray(weight)


def test_calling_a_module_outside_a_build_is_an_error():
    with pytest.raises(IRError, match=r"called outside a build.*predict"):
        nn.ReLU()(np.ones(3, np.float32))
    g = GraphBuilder()
    x = g.input("x", f32[3])
    with pytest.raises(IRError, match="called outside a build"):
        nn.ReLU()(x)
    with nn.ReLU().bind(GraphBuilder()), pytest.raises(IRError, match="no model is bound to"):
        nn.ReLU()(x)


def test_an_inline_unregistered_module_is_named_as_such():
    class Inline(nn.Module):
        def forward(self, x: Var) -> Var:
            return nn.Softmax(axis=3)(x)

    with pytest.raises(VerificationError, match=r"^unregistered Softmax: axis=3 is out of range"):
        Inline().graph(f32[2, 2])


def test_registration_errors():
    layer = nn.Linear(2, 2)
    with pytest.raises(IRError, match=r"'weight' is a registered parameter.*\.weight\.data"):
        layer.weight = np.zeros((2, 2), np.float32)
    with pytest.raises(IRError, match=r"must not contain '\.'"):
        setattr(layer, "a.b", nn.ReLU())
    with pytest.raises(IRError, match="cannot contain itself"):
        layer.me = layer
    layer.bias = None
    assert list(layer.named_parameters()) == ["weight"]
    del layer.weight
    assert layer.num_parameters() == 0


def test_forward_is_required_and_arity_is_checked():
    class Empty(nn.Module):
        pass

    with pytest.raises(IRError, match="Empty does not define forward"):
        Empty().graph(f32[1])
    with pytest.raises(IRError, match=r"Linear\.forward\(x: 'Var'\) -> 'Var' does not take 2"):
        nn.Linear(1, 1).graph(f32[1], f32[1])


def test_repr_is_a_nested_listing():
    assert repr(Encoder()) == """Encoder(
  (encoder): Sequential(
    (0): Linear(in_features=2, out_features=3, bias=True, dtype=float32)
    (1): Block(
      (scale): Parameter(float32[3], init=ones(), trainable)
      (body): Sequential(
        (0): Linear(in_features=3, out_features=3, bias=True, dtype=float32)
        (1): Tanh()
        (2): Linear(in_features=3, out_features=3, bias=False, dtype=float32)
      )
      (shift): Parameter(float32[3], init=zeros(), trainable)
    )
  )
  (head): Linear(in_features=3, out_features=1, bias=True, dtype=float32)
)"""


def test_sequential_indexing_iteration_and_append():
    a, b, c = nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 1)
    model = nn.Sequential(a, b)
    assert model.append(c) is model and len(model) == 3
    assert model[0] is a and model[-1] is c and list(model) == [a, b, c]
    head = model[1:]
    assert isinstance(head, nn.Sequential) and list(head) == [b, c]
    assert head[1].weight is c.weight  # slices share modules
    with pytest.raises(IRError, match="index 3 is out of range for 3"):
        model[3]
    with pytest.raises(IRError, match="index must be an int"):
        model["0"]
    with pytest.raises(IRError, match="item 0 must be a Module, got ufunc"):
        nn.Sequential(np.tanh)
    assert nn.Sequential().graph(f32[2]).outputs[0].type == f32[2]
