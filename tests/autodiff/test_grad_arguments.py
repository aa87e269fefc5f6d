"""The arguments of grad, vjp and jvp: a graph, and ``wrt`` / ``of`` as one name or
a list of distinct names (docs/autodiff.md); anything else is an IRError naming
the function, the argument and the value."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import autodiff, ops
from polyhal.autodiff.check import check_gradients
from polyhal.errors import IRError
from polyhal.ir import GraphBuilder, f32
from polyhal.reference import run


def loss_graph():
    g = GraphBuilder("loss")
    x = g.input("x", f32["n", 3])
    w = g.input("w", f32[3])
    g.output(ops.reduce_sum(ops.tanh(x * w), keepdims=0), name="y")
    return g.build()


@pytest.mark.parametrize("graph", ["g", None, 5])
def test_the_graph_must_be_a_graph(graph):
    for transform in (autodiff.grad, autodiff.vjp, autodiff.jvp):
        with pytest.raises(IRError, match=rf"{transform.__name__}: expected a Graph, got "
                                          rf"{type(graph).__name__}"):
            transform(graph)


def test_check_gradients_takes_a_graph_and_a_mapping_of_inputs():
    with pytest.raises(IRError, match="check_gradients: expected a Graph, got NoneType"):
        check_gradients(None, {})
    with pytest.raises(IRError, match="check_gradients: inputs must map input names to "
                                      "arrays, got a list"):
        check_gradients(loss_graph(), [np.ones((2, 3), np.float32)])


@pytest.mark.parametrize(("wrt", "shown"), [
    (5, "5"), ([None], r"\[None\]"), ([["x"]], r"\[\['x'\]\]"), ({"x": 1}, r"\{'x': 1\}"),
])
def test_wrt_must_be_a_name_or_a_list_of_names(wrt, shown):
    for transform in (autodiff.grad, autodiff.vjp, autodiff.jvp):
        with pytest.raises(IRError, match=rf"{transform.__name__}: wrt={shown} must be an "
                                          "input name or a list of input names"):
            transform(loss_graph(), wrt=wrt)


def test_a_name_listed_twice_is_named():
    with pytest.raises(IRError, match="grad: wrt lists 'x' more than once"):
        autodiff.grad(loss_graph(), wrt=["x", "w", "x"])
    with pytest.raises(IRError, match="vjp: of lists 'y' more than once"):
        autodiff.vjp(loss_graph(), of=("y", "y"))


def test_an_empty_wrt_is_refused():
    with pytest.raises(IRError, match=r"grad: wrt=\[\] names no input"):
        autodiff.grad(loss_graph(), wrt=[])


def test_of_is_one_output_for_grad_and_a_list_for_vjp_and_jvp():
    with pytest.raises(IRError, match=r"grad: of=\['y'\] must be the name of one output"):
        autodiff.grad(loss_graph(), of=["y"])
    for transform in (autodiff.vjp, autodiff.jvp):
        with pytest.raises(IRError, match=rf"{transform.__name__}: of=\[\['y'\]\] must be an "
                                          "output name or a list of output names"):
            transform(loss_graph(), of=[["y"]])
    # The accepted forms still work: a name, a list or a tuple of names.
    x, w = np.ones((2, 3), np.float32), np.full(3, 0.5, np.float32)
    by_name = run(autodiff.grad(loss_graph(), wrt="w", of="y"), x=x, w=w)["grad_w"]
    by_tuple = run(autodiff.vjp(loss_graph(), wrt=("w",), of=["y"]), x=x, w=w,
                   cotangent_y=np.float32(1.0))["grad_w"]
    np.testing.assert_allclose(by_name, by_tuple)
