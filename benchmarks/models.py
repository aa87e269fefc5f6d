"""The benchmark models, built with the polyhal builder (seeded weights)."""

from __future__ import annotations

import itertools

import numpy as np

from polyhal import ops
from polyhal.ir import Graph, GraphBuilder, f32


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
    return rng.normal(0, 1 / np.sqrt(fan_in), shape).astype(np.float32)


def mlp(sizes: tuple[int, ...] = (784, 512, 512, 10)) -> Graph:
    """A ReLU MLP: MatMul + Add + Relu layers."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("mlp")
    h = g.input("x", f32["batch", sizes[0]])
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        h = h @ _w(rng, n_in, n_out) + np.zeros(n_out, np.float32)
        if index < len(sizes) - 2:
            h = ops.relu(h)
    g.output(h, name="logits")
    return g.build()


def _conv_bn(g: GraphBuilder, rng: np.random.Generator, x, c_in: int, c_out: int,
             stride: int = 1, relu: bool = True):
    y = ops.conv(x, g.constant(_w(rng, c_out, c_in, 3, 3)), pads=[1, 1, 1, 1],
                 strides=[stride, stride])
    params = [rng.uniform(0.5, 1.5, c_out), rng.normal(0, 0.1, c_out),
              rng.normal(0, 0.1, c_out), rng.uniform(0.5, 1.5, c_out)]
    y = ops.batch_normalization(y, *(g.constant(p.astype(np.float32)) for p in params))
    return ops.relu(y) if relu else y


def _basic_block(g: GraphBuilder, rng: np.random.Generator, x, c_in: int, c_out: int,
                 stride: int):
    y = _conv_bn(g, rng, x, c_in, c_out, stride)
    y = _conv_bn(g, rng, y, c_out, c_out, relu=False)
    if stride != 1 or c_in != c_out:
        x = ops.conv(x, g.constant(_w(rng, c_out, c_in, 1, 1)), strides=[stride, stride])
    return ops.relu(y + x)


def cnn(width: int = 16) -> Graph:
    """ResNet-style basic blocks on 3x32x32: stem, 3 stages, global pool, linear."""
    rng = np.random.default_rng(1)
    g = GraphBuilder("resnet")
    x = g.input("x", f32["batch", 3, 32, 32])
    h = _conv_bn(g, rng, x, 3, width)
    channels = width
    for stage, stride in ((width, 1), (2 * width, 2), (4 * width, 2)):
        h = _basic_block(g, rng, h, channels, stage, stride)
        channels = stage
    h = ops.flatten(ops.global_average_pool(h), axis=1)
    g.output(h @ _w(rng, channels, 10) + np.zeros(10, np.float32), name="logits")
    return g.build()


def transformer(seq: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024) -> Graph:
    """A pre-norm transformer encoder block: attention and a GELU feed-forward."""
    rng = np.random.default_rng(2)
    g = GraphBuilder("encoder")
    x = g.input("x", f32["batch", seq, d])

    def norm(v):
        return ops.layer_normalization(v, g.constant(np.ones(d, np.float32)),
                                       g.constant(np.zeros(d, np.float32)), axis=-1)

    def heads_of(v):
        v = ops.reshape(v, np.array([0, seq, heads, d // heads], np.int64))
        return ops.transpose(v, perm=[0, 2, 1, 3])

    n = norm(x)
    q, k, v = (heads_of(n @ _w(rng, d, d) + np.zeros(d, np.float32)) for _ in range(3))
    scores = (q @ ops.transpose(k, perm=[0, 1, 3, 2])) * float(1 / np.sqrt(d // heads))
    context = ops.transpose(ops.softmax(scores, axis=-1) @ v, perm=[0, 2, 1, 3])
    context = ops.reshape(context, np.array([0, seq, d], np.int64))
    h = x + context @ _w(rng, d, d) + np.zeros(d, np.float32)
    f = ops.gelu(norm(h) @ _w(rng, d, ffn) + np.zeros(ffn, np.float32))
    g.output(h + f @ _w(rng, ffn, d) + np.zeros(d, np.float32), name="y")
    return g.build()
