"""grad, vjp and jvp as graph transforms: higher orders against finite
differences, and the errors a user meets."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import autodiff, ops
from polyhal.errors import IRError, UnsupportedError
from polyhal.ir import DType, GraphBuilder, TensorType
from polyhal.reference import run

F64 = DType.FLOAT64


def _elementwise(op: str, n: int = 7):
    g = GraphBuilder(op)
    x = g.input("x", TensorType(F64, (n,)))
    g.output(g.op(op, x), name="y")
    return g.build()


def _second_difference(f, x, h):
    """Fourth-order central second difference of an elementwise ``f``."""
    return (-f(x + 2 * h) + 16 * f(x + h) - 30 * f(x) + 16 * f(x - h) - f(x - 2 * h)) / (
        12 * h * h)


@pytest.mark.parametrize("op", ["Tanh", "Sin", "Exp", "Sigmoid"])
def test_second_derivative_of_elementwise_ops_matches_finite_differences(op):
    graph = _elementwise(op)
    second = autodiff.grad(autodiff.grad(graph, wrt="x", of="y"), wrt="x", of="grad_x")
    x = np.random.default_rng(1).uniform(-2, 2, 7)
    got = run(second, x=x)["grad_x_"]

    def f(values):
        return run(graph, x=values)["y"]

    expected = _second_difference(f, x, 1e-3)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)


def test_third_derivative_of_sin_is_minus_cos():
    graph = _elementwise("Sin")
    third = graph
    of = "y"
    for _ in range(3):
        third = autodiff.grad(third, wrt="x", of=of)
        of = [v.name for v in third.outputs][-1]
    x = np.linspace(-2, 2, 7)
    np.testing.assert_allclose(run(third, x=x)[of], -np.cos(x), rtol=1e-12, atol=1e-12)


def _mixed_second_difference(loss, x, i, j, h):
    def at(di, dj):
        shifted = x.copy()
        shifted[i] += di * h
        shifted[j] += dj * h
        return loss(shifted)

    return (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * h * h)


def _hessian_by_differences(loss, x, h=1e-3):
    """Every second derivative by central differences, Richardson-extrapolated."""
    n = x.size
    hessian = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            coarse = _mixed_second_difference(loss, x, i, j, h)
            fine = _mixed_second_difference(loss, x, i, j, h / 2)
            hessian[i, j] = (4 * fine - coarse) / 3
    return hessian


def test_softmax_hessian_matches_finite_differences():
    n = 5
    g = GraphBuilder("softmax_loss")
    x = g.input("x", TensorType(F64, (n,)))
    weights = np.random.default_rng(2).standard_normal(n)
    g.output(ops.reduce_sum(ops.softmax(x) * weights, keepdims=0), name="loss")
    graph = g.build()
    gradient = autodiff.grad(graph, wrt="x")
    hessian_graph = autodiff.vjp(gradient, wrt="x", of="grad_x")  # H v, H symmetric
    point = np.random.default_rng(3).standard_normal(n)
    columns = [run(hessian_graph, x=point, cotangent_grad_x=e)["grad_x_"] for e in np.eye(n)]
    got = np.stack(columns, axis=1)

    def loss(values):
        return float(run(graph, x=values)["loss"])

    np.testing.assert_allclose(got, _hessian_by_differences(loss, point), rtol=1e-6,
                               atol=1e-9)


def _mlp_loss():
    """A 3-4-2 tanh MLP with a mean squared error on a fixed batch of 5."""
    rng = np.random.default_rng(4)
    data, target = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    g = GraphBuilder("mlp_loss")
    w1 = g.input("w1", TensorType(F64, (3, 4)))
    b1 = g.input("b1", TensorType(F64, (4,)))
    w2 = g.input("w2", TensorType(F64, (4, 2)))
    b2 = g.input("b2", TensorType(F64, (2,)))
    hidden = ops.tanh(g.constant(data) @ w1 + b1)
    error = hidden @ w2 + b2 - g.constant(target)
    g.output(ops.reduce_mean(error * error, keepdims=0), name="loss")
    params = {"w1": rng.standard_normal((3, 4)), "b1": rng.standard_normal(4),
              "w2": rng.standard_normal((4, 2)), "b2": rng.standard_normal(2)}
    return g.build(), params


def test_hessian_vector_product_of_an_mlp_loss_matches_finite_differences():
    graph, params = _mlp_loss()
    names = list(params)
    gradient = autodiff.grad(graph, wrt=names)
    hvp = autodiff.vjp(gradient, wrt=names, of=[f"grad_{n}" for n in names])
    rng = np.random.default_rng(5)
    direction = {n: rng.standard_normal(p.shape) for n, p in params.items()}
    got = run(hvp, **params, **{f"cotangent_grad_{n}": direction[n] for n in names})
    got_flat = np.concatenate([got[f"grad_{n}_"].reshape(-1) for n in names])

    sizes = [params[n].size for n in names]
    theta = np.concatenate([params[n].reshape(-1) for n in names])
    v = np.concatenate([direction[n].reshape(-1) for n in names])

    def loss(flat):
        parts = np.split(flat, np.cumsum(sizes)[:-1])
        return float(run(graph, **{n: p.reshape(params[n].shape)
                                   for n, p in zip(names, parts, strict=True)})["loss"])

    def directional(i, h):  # d2 L / (dv d theta_i) by central differences
        e = np.zeros_like(theta)
        e[i] = 1.0
        return (loss(theta + h * v + h * e) - loss(theta + h * v - h * e)
                - loss(theta - h * v + h * e) + loss(theta - h * v - h * e)) / (4 * h * h)

    expected = np.array([(4 * directional(i, 5e-4) - directional(i, 1e-3)) / 3
                         for i in range(theta.size)])
    np.testing.assert_allclose(got_flat, expected, rtol=1e-6, atol=1e-9)


def test_jvp_is_the_directional_derivative():
    graph, params = _mlp_loss()
    tangents = autodiff.jvp(graph, wrt=["w1", "b2"])
    assert [v.name for v in tangents.inputs][-2:] == ["tangent_w1", "tangent_b2"]
    rng = np.random.default_rng(6)
    t1, t2 = rng.standard_normal((3, 4)), rng.standard_normal(2)
    got = run(tangents, **params, tangent_w1=t1, tangent_b2=t2)["tangent_loss"]
    h = 1e-4

    def loss(step):
        return float(run(graph, **{**params, "w1": params["w1"] + step * t1,
                                   "b2": params["b2"] + step * t2})["loss"])

    expected = (loss(-2 * h) - 8 * loss(-h) + 8 * loss(h) - loss(2 * h)) / (12 * h)
    np.testing.assert_allclose(got, expected, rtol=1e-7)


def test_grad_keeps_the_outputs_and_gives_zeros_for_unused_inputs():
    g = GraphBuilder("partial")
    x = g.input("x", TensorType(F64, (2, 3)))
    unused = g.input("unused", TensorType(F64, (4,)))
    g.output(ops.reduce_sum(x * x, keepdims=0), name="loss")
    g.output(unused, name="echo")
    graph = g.build()
    gradient = autodiff.grad(graph, wrt=["x", "unused"], of="loss")
    assert [v.name for v in gradient.outputs] == ["loss", "echo", "grad_x", "grad_unused"]
    x_value = np.arange(6.0).reshape(2, 3)
    out = run(gradient, x=x_value, unused=np.ones(4))
    np.testing.assert_array_equal(out["grad_x"], 2 * x_value)
    np.testing.assert_array_equal(out["grad_unused"], np.zeros(4))
    np.testing.assert_array_equal(out["echo"], np.ones(4))


def test_broadcast_inputs_get_cotangents_of_their_own_shape():
    g = GraphBuilder("bias")
    x = g.input("x", TensorType(F64, (4, 3)))
    b = g.input("b", TensorType(F64, (1, 3)))
    s = g.input("s", TensorType(F64, ()))
    g.output(ops.reduce_sum((x + b) * s, keepdims=0), name="loss")
    out = run(autodiff.grad(g.build(), wrt=["b", "s"]), x=np.ones((4, 3)),
              b=np.zeros((1, 3)), s=np.array(2.0))
    np.testing.assert_array_equal(out["grad_b"], np.full((1, 3), 8.0))
    assert out["grad_s"].shape == () and out["grad_s"] == 12.0


def test_gradient_through_a_float32_graph_stays_float32():
    g = GraphBuilder("f32")
    x = g.input("x", TensorType(DType.FLOAT32, ("batch", 3)))
    g.output(ops.reduce_sum(ops.exp(x), keepdims=0), name="loss")
    gradient = autodiff.grad(g.build())
    value = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
    got = run(gradient, x=value)["grad_x"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.exp(value), rtol=1e-6)


# ----------------------------------------------------------------------------- errors


def test_integer_inputs_have_no_gradient():
    g = GraphBuilder("indices")
    data = g.input("data", TensorType(F64, (4, 2)))
    index = g.input("index", TensorType(DType.INT64, (3,)))
    g.output(ops.reduce_sum(ops.gather(data, index), keepdims=0), name="loss")
    graph = g.build()
    with pytest.raises(IRError, match="input 'index' of graph 'indices' is int64"):
        autodiff.grad(graph, wrt="index")
    gradient = autodiff.grad(graph)  # the default: the float inputs
    assert [v.name for v in gradient.outputs] == ["loss", "grad_data"]
    out = run(gradient, data=np.zeros((4, 2)), index=np.array([0, 2, 0]))
    np.testing.assert_array_equal(out["grad_data"][:, 0], [2, 0, 1, 0])


def test_unknown_names_and_ambiguous_outputs_are_errors():
    g = GraphBuilder("two")
    x = g.input("x", TensorType(F64, (2,)))
    g.output(ops.exp(x), name="a")
    g.output(ops.sin(x), name="b")
    graph = g.build()
    with pytest.raises(IRError, match=r"has 2 outputs .*of="):
        autodiff.grad(graph)
    with pytest.raises(IRError, match="no input 'z'"):
        autodiff.grad(graph, wrt="z", of="a")
    with pytest.raises(IRError, match="no output 'c'"):
        autodiff.vjp(graph, of="c")


def test_ops_without_a_gradient_are_named():
    g = GraphBuilder("spiking")
    x = g.input("x", TensorType(DType.FLOAT32, (4, 2, 3)))  # [T, B, neurons]
    params = [np.full(3, value, np.float32) for value in (2.0, 1.0, 0.0, 1.0)]
    spikes = g.op("LIF", x, *params, domain="snn", dt=1.0, method="exact",
                  reset="subtract")
    g.output(ops.reduce_sum(spikes, keepdims=0), name="loss")
    with pytest.raises(UnsupportedError, match=r"snn\.LIF .*cannot be differentiated"):
        autodiff.grad(g.build())


def test_piecewise_constant_ops_pass_no_gradient():
    g = GraphBuilder("floor")
    x = g.input("x", TensorType(F64, (3,)))
    g.output(ops.reduce_sum(ops.floor(x) + x, keepdims=0), name="loss")
    out = run(autodiff.grad(g.build()), x=np.array([0.5, 1.5, -2.5]))
    np.testing.assert_array_equal(out["grad_x"], np.ones(3))


def test_check_gradients_reports_a_wrong_rule(monkeypatch):
    from polyhal.autodiff.check import check_gradients
    from polyhal.autodiff.rules import RULES, op

    graph = _elementwise("Sin")
    monkeypatch.setitem(RULES, "core.Sin", lambda ctx: [ctx.cotangent * op("Sin", ctx.x)])
    report = check_gradients(graph, {"x": np.linspace(-1, 1, 7)})
    assert not report.ok and len(report.mismatches) == 7
    assert "d/dx[" in str(report.mismatches[0])


def test_check_gradients_does_not_compare_steps_a_coarse_dtype_cannot_hold():
    from polyhal.autodiff.check import check_gradients

    g = GraphBuilder("scaled")
    x, b = g.input("x", DType.FLOAT64[4]), g.input("b", DType.BFLOAT16[4])
    g.output(x * ops.cast(b, to=DType.FLOAT64), name="y")
    inputs = {"x": np.linspace(-1, 1, 4), "b": np.full(4, 1.5, DType.BFLOAT16.numpy)}
    # bfloat16 spaces 1.5 and its neighbours 2**-7 apart: steps of 1.5e-3 and 3e-3 round away,
    # and the difference quotient would read 0 where the gradient is x.
    report = check_gradients(g.build(), inputs)
    assert report.ok, report
    assert report.checked == 4 and report.rough == 4


@pytest.mark.parametrize(("op", "args"), [("Unsqueeze", [np.array([1], np.int64)]),
                                          ("Tile", [np.array([2, 1, 1], np.int64)]),
                                          ("Flatten", [])])
def test_gradients_of_empty_tensors(op, args):
    g = GraphBuilder("empty")
    x = g.input("x", TensorType(F64, (2, 0, 3)))
    g.output(ops.reduce_sum(g.op(op, x, *args), keepdims=0), name="loss")
    out = run(autodiff.grad(g.build()), x=np.zeros((2, 0, 3)))
    assert out["grad_x"].shape == (2, 0, 3)
