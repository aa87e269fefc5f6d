"""The one-pass epilogue of a BLAS product (a bias row or a residual, then Relu):
numpy's bits, NaN, -0.0 and infinities included, for every shape it takes; numpy's own
ops for what it does not take; and the cpu adapter's Gemm + Relu and im2col Conv +
residual + Relu steps, which use it."""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.adapters.cpu.kernels import epilogue, packed_gemm
from polyhal.ir import GraphBuilder, f32, f64

SPECIALS = [np.nan, -0.0, 0.0, np.inf, -np.inf, -1.5, 2.5]


def _product(dtype: type, rows: int = 7, columns: int = 5) -> np.ndarray:
    rng = np.random.default_rng(0)
    y = rng.normal(size=(rows, columns)).astype(dtype)
    y.flat[:len(SPECIALS)] = SPECIALS
    return y


def _numpy(y: np.ndarray, c: np.ndarray | None, relu: bool) -> np.ndarray:
    want = y.copy()
    with np.errstate(invalid="ignore"):  # inf + -inf
        if c is not None:
            want += c
        if relu:
            np.maximum(want, want.dtype.type(0), out=want)
    return want


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("bias_shape", [None, (5,), (1, 5), (), (1,), (1, 1), (7, 5)])
def test_the_loop_gives_numpys_bits(dtype, relu, bias_shape):
    y = _product(dtype)
    c = None
    if bias_shape is not None:
        # specials, then values that differ from row to row
        c = np.arange(int(np.prod(bias_shape)), dtype=dtype) - 3.5
        c[:5] = np.array([-0.0, 1.0, np.nan, -2.0, np.inf])[:c.size]
        c = c.reshape(bias_shape)
    want = _numpy(y, c, relu)
    assert epilogue.add_and_relu(y, c, relu)
    _same_bits(y, want)


@pytest.mark.parametrize(("y", "c"), [
    (_product(np.float16), np.ones(5, np.float16)),                 # no float16 arithmetic
    (_product(np.float32)[:, ::2], np.ones(3, np.float32)),         # not C-contiguous
    (_product(np.float32), np.ones((5, 7), np.float32).T),          # a strided residual
    (_product(np.float32), np.ones((7, 1), np.float32)),            # a bias per row
    (_product(np.float32), np.ones(5, np.float64)),                 # another dtype
    (_product(np.float32).reshape(7, 5, 1), np.ones(1, np.float32)),  # not 2-D
])
def test_what_the_loop_does_not_take_is_left_alone(y, c):
    before = y.copy()
    assert not epilogue.add_and_relu(y, c, True)
    _same_bits(y, before)


@pytest.mark.parametrize(("dtype", "t"), [(np.float32, f32), (np.float64, f64)])
def test_a_gemm_with_relu_on_blas_gives_the_references_bits(dtype, t):
    rows = packed_gemm.MAX_ROWS + 8  # past the packed kernel: np.matmul, then the loop
    rng = np.random.default_rng(1)
    g = GraphBuilder("gemm_relu")
    x = g.input("x", t["batch", 6])
    w = g.constant(rng.normal(size=(6, 4)).astype(dtype))
    bias = g.constant(np.array([0.0, -0.0, np.nan, -1e300 if dtype is np.float64 else -1e30],
                               dtype))
    g.output(ops.relu(ops.gemm(x, w, bias)), name="y")
    graph = g.build()
    xs = rng.normal(size=(rows, 6)).astype(dtype)
    xs[:3] = 0.0  # products of exactly 0.0 meet the -0.0 bias
    compiled = polyhal.compile(graph, device="cpu")
    got, want = compiled(xs)["y"], polyhal.run(graph, xs)["y"]
    _same_bits(got, want)
    (_, profile), = compiled.profiles()
    assert any(step.startswith("gemm") and "relu" in step for step in profile.nodes)


def test_an_im2col_conv_with_a_residual_and_relu_matches_the_reference():
    """A window deeper than the direct kernel's (72 channels of 3x3) goes through im2col
    and BLAS; the residual Add and the Relu after it are the loop's."""
    rng = np.random.default_rng(2)
    g = GraphBuilder("conv_residual_relu")
    x = g.input("x", f32["batch", 72, 6, 6])
    w = g.constant(rng.normal(0, 0.1, (72, 72, 3, 3)).astype(np.float32))
    y = ops.conv(x, w, g.constant(rng.normal(size=72).astype(np.float32)), pads=[1, 1, 1, 1])
    g.output(ops.relu(y + x), name="y")
    graph = g.build()
    xs = rng.normal(size=(2, 72, 6, 6)).astype(np.float32)
    xs[0, 0, 0, :3] = [np.nan, -0.0, np.inf]
    compiled = polyhal.compile(graph, device="cpu")
    got, want = compiled(xs)["y"], polyhal.run(graph, xs)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    (_, profile), = compiled.profiles()
    assert any(step.startswith("conv") and "relu" in step for step in profile.nodes)
