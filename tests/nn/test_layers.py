"""Layers and activations against numpy, and their argument and input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import polyhal
from polyhal import nn
from polyhal.errors import IRError, VerificationError
from polyhal.ir import DType, f32, f64

RNG = np.random.default_rng(0)


def _run(model: nn.Module, x: np.ndarray) -> np.ndarray:
    graph = model.graph(polyhal.TensorType.of(x))
    return polyhal.run(graph, **model.feeds(x=x))["y"]


def _conv_numpy(x, w, b, stride, pads, dilation, groups):
    """Direct loops: the definition of a grouped, strided, dilated cross-correlation."""
    top, left, bottom, right = pads
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _, h, wd = x.shape
    out_c, in_per_group, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, out_c, oh, ow))
    per_group = out_c // groups
    for o in range(out_c):
        g = o // per_group
        for i in range(oh):
            for j in range(ow):
                rows = i * stride[0] + dilation[0] * np.arange(kh)
                cols = j * stride[1] + dilation[1] * np.arange(kw)
                patch = x[:, g * in_per_group:(g + 1) * in_per_group][:, :, rows][:, :, :, cols]
                y[:, o, i, j] = np.sum(patch * w[o], axis=(1, 2, 3))
    return y + (0 if b is None else b[None, :, None, None])


def test_linear_is_x_at_w_plus_b_with_weight_in_out():
    layer = nn.Linear(4, 3, bias_init=nn.init.normal(1.0)).initialize(2)
    assert layer.weight.shape == (4, 3)
    x = RNG.standard_normal((2, 5, 4)).astype(np.float32)  # leading axes are batch axes
    expected = x @ layer.weight.data + layer.bias.data
    np.testing.assert_allclose(_run(layer, x), expected, rtol=1e-5, atol=1e-6)
    no_bias = nn.Linear(4, 3, bias=False).initialize(0)
    np.testing.assert_allclose(_run(no_bias, x), x @ no_bias.weight.data, rtol=1e-5, atol=1e-6)
    assert [n.op for n in no_bias.graph(f32[1, 4]).nodes] == ["MatMul"]


@pytest.mark.parametrize(("kwargs", "shape"), [
    ({"kernel_size": 3}, (2, 2, 6, 5)),
    ({"kernel_size": (3, 2), "stride": 2, "padding": 1}, (1, 2, 7, 6)),
    ({"kernel_size": 2, "dilation": (2, 1), "padding": (1, 0, 0, 2)}, (2, 2, 6, 6)),
    ({"kernel_size": 3, "groups": 2, "padding": (1, 2), "bias": False}, (1, 2, 5, 5)),
])
def test_conv2d_matches_direct_loops(kwargs, shape):
    out = 4
    bias_init = nn.init.normal() if kwargs.get("bias", True) else None
    layer = nn.Conv2d(2, out, bias_init=bias_init, dtype="float64", **kwargs).initialize(3)
    x = RNG.standard_normal(shape)
    got = _run(layer, x)
    b = layer.bias.data if layer.use_bias else None
    expected = _conv_numpy(x, layer.weight.data, b, layer.stride, layer.padding, layer.dilation,
                           layer.groups)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_conv2d_keeps_a_symbolic_batch():
    graph = nn.Conv2d(3, 8, 3, stride=2, padding=1).graph(f32["batch", 3, 16, 16])
    assert graph.outputs[0].type == f32["batch", 8, 8, 8]


@pytest.mark.parametrize(("start", "shape", "expected"), [
    (1, (2, 3, 4, 5), (2, 60)),
    (2, (2, 3, 4, 5), (2, 3, 20)),
    (0, (2, 3), (6,)),
    (-1, (2, 3, 4), (2, 3, 4)),
    (-2, (2, 3, 4), (2, 12)),
])
def test_flatten_merges_trailing_axes(start, shape, expected):
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(_run(nn.Flatten(start), x), x.reshape(expected))


def test_flatten_keeps_symbolic_leading_axes():
    graph = nn.Flatten(2).graph(f32["time", "batch", 3, 4])
    assert graph.outputs[0].type == f32["time", "batch", 12]


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize(("layer", "reference"), [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.GELU(), lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))),
    (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                       * (x + 0.044715 * x**3)))),
    (nn.LeakyReLU(0.2), lambda x: np.where(x >= 0, x, 0.2 * x)),
    (nn.Softmax(0), lambda x: _softmax(x, 0)),
    (nn.LogSoftmax(), lambda x: np.log(_softmax(x, -1))),
    (nn.Identity(), lambda x: x),
], ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else "")
def test_activations(layer, reference):
    x = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(_run(layer, x), reference(x), rtol=1e-12, atol=1e-12)
    assert layer.num_parameters() == 0


def test_activation_reprs():
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(alpha=0.2)"
    assert repr(nn.Softmax(1)) == "Softmax(axis=1)"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.Flatten()) == "Flatten(start_axis=1)"
    assert repr(nn.Conv2d(2, 4, 3, dilation=2, groups=2, bias=False)) == (
        "Conv2d(2, 4, kernel_size=(3, 3), stride=(1, 1), padding=(0, 0, 0, 0), "
        "dilation=(2, 2), groups=2, bias=False, dtype=float32)")


@pytest.mark.parametrize(("make", "message"), [
    (lambda: nn.Linear(-1, 2), "Linear: in_features must be an int >= 1, got -1"),
    (lambda: nn.Linear(2, 0), "Linear: out_features must be an int >= 1, got 0"),
    (lambda: nn.Linear(2.0, 3), "in_features must be an int"),
    (lambda: nn.Linear(2, 3, dtype="int8"), "Linear: dtype must be a floating-point type"),
    (lambda: nn.Linear(2, 3, dtype="float8"), "Linear: dtype: unknown dtype 'float8'"),
    (lambda: nn.Linear(2, 3, bias=False, bias_init=nn.init.ones()), "bias=False"),
    (lambda: nn.Conv2d(3, 4, 0), "Conv2d: kernel_size must be an int >= 1, got 0"),
    (lambda: nn.Conv2d(3, 4, (3, 3, 3)), "kernel_size must be an int or a pair"),
    (lambda: nn.Conv2d(3, 4, 3, stride=0), "stride must be an int >= 1"),
    (lambda: nn.Conv2d(3, 4, 3, padding=-1), "padding must be an int >= 0"),
    (lambda: nn.Conv2d(3, 4, 3, padding=(1, 2, 3)), r"padding must be an int, \(h, w\)"),
    (lambda: nn.Conv2d(3, 4, 3, dilation=(1, 0)), "dilation must be an int >= 1"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), "in_channels=3 is not divisible by groups=2"),
    (lambda: nn.Conv2d(4, 6, 3, groups=4), "out_channels=6 is not divisible by groups=4"),
    (lambda: nn.Flatten("1"), "Flatten: start_axis must be an int"),
    (lambda: nn.LeakyReLU(float("inf")), "LeakyReLU: alpha must be a finite number"),
    (lambda: nn.Softmax(1.5), "Softmax: axis must be an int"),
    (lambda: nn.LogSoftmax(None), "LogSoftmax: axis must be an int"),
    (lambda: nn.GELU("fast"), "GELU: approximate must be 'none' or 'tanh'"),
])
def test_constructor_errors(make, message):
    with pytest.raises(IRError, match=message):
        make()


@pytest.mark.parametrize(("model", "input_type", "message"), [
    (nn.Sequential(nn.Linear(4, 2)), f32["batch", 3],
     r"^layer '0' \(Linear\): input float32\[batch, 3\] has 3 features in its last axis, "
     "expected in_features=4"),
    (nn.Linear(4, 2), f32[()], r"^Linear: input float32\[\] is a scalar"),
    (nn.Linear(4, 2), f64[1, 4], "is float64 but the layer's parameters are float32; cast "
     "the input or build the layer with dtype='float64'$"),
    (nn.Linear(4, 2), DType.INT64[1, 4], "is int64 but the layer's parameters are float32; "
     "cast the input to float32$"),
    (nn.Sequential(nn.ReLU(), nn.Conv2d(3, 4, 3)), f32[1, 3, 8],
     r"^layer '1' \(Conv2d\): input float32\[1, 3, 8\] has rank 3; expected \[N, C, H, W\]"),
    (nn.Conv2d(3, 4, 3), f32[1, 2, 8, 8], "has 2 channels .axis 1., expected in_channels=3"),
    (nn.Conv2d(3, 4, 5), f32[1, 3, 8, 3], "kernel spans 5 along W .* has only 3"),
    (nn.Conv2d(3, 4, 3, dilation=3), f32[1, 3, 6, 9], "kernel spans 7 along H .* has only 6"),
    (nn.Sequential(nn.Flatten(3)), f32[2, 3],
     r"^layer '0' \(Flatten\): start_axis=3 is out of range for input float32\[2, 3\]"),
    (nn.LogSoftmax(-3), f32[2, 3], "axis=-3 is out of range"),
    (nn.ReLU(), f32["n"], None),
])
def test_input_errors_name_the_layer(model, input_type, message):
    if message is None:  # a symbolic shape is fine
        model.graph(input_type)
        return
    with pytest.raises(VerificationError, match=message):
        model.graph(input_type)


def test_padding_makes_a_large_kernel_fit():
    graph = nn.Conv2d(1, 1, 5, padding=1).graph(f32[1, 1, 3, 3])
    assert graph.outputs[0].type == f32[1, 1, 1, 1]
