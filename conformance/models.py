"""The model graphs of level L2: an MLP, a small CNN and an attention block, and the
hybrid quantum-classical models.

Each builder takes a float dtype and a seed and returns a graph with a
symbolic ``batch`` dimension plus a seeded input batch. A hybrid model is a
classical ``Linear + Tanh`` whose outputs are the input angles of a
``quantum.Expectation`` (a conformance circuit of
:mod:`polyhal.conformance.quantum_circuits`, its weights constants), followed by
a ``Linear``: a tiny version of the two-moons model of ``nn.QuantumLayer``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyhal import ops
from polyhal.ir import DType, Graph, GraphBuilder, TensorType


def _weights(g: GraphBuilder, rng: np.random.Generator, shape: tuple[int, ...], dtype: DType,
             name: str) -> object:
    fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else shape[0]
    scale = 1.0 / np.sqrt(max(fan_in, 1))
    return g.constant(rng.uniform(-scale, scale, shape).astype(dtype.numpy), name=name)


def mlp(dtype: DType, rng: np.random.Generator) -> tuple[Graph, list[np.ndarray]]:
    """64 -> 32 -> relu -> 10: MatMul, Add, Relu."""
    g = GraphBuilder("mlp")
    x = g.input("x", TensorType(dtype, ("batch", 64)))
    h = ops.relu(x @ _weights(g, rng, (64, 32), dtype, "w1") + _weights(g, rng, (32,), dtype,
                                                                          "b1"))
    y = h @ _weights(g, rng, (32, 10), dtype, "w2") + _weights(g, rng, (10,), dtype, "b2")
    g.output(y, name="logits")
    return g.build(), [rng.uniform(-1, 1, (4, 64)).astype(dtype.numpy)]


def cnn(dtype: DType, rng: np.random.Generator) -> tuple[Graph, list[np.ndarray]]:
    """Conv -> Relu -> MaxPool -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    g = GraphBuilder("cnn")
    x = g.input("x", TensorType(dtype, ("batch", 3, 8, 8)))
    h = ops.relu(ops.conv(x, _weights(g, rng, (8, 3, 3, 3), dtype, "k1"),
                          _weights(g, rng, (8,), dtype, "c1"), pads=[1, 1, 1, 1]))
    h = ops.max_pool(h, kernel_shape=[2, 2], strides=[2, 2])
    h = ops.relu(ops.conv(h, _weights(g, rng, (8, 8, 3, 3), dtype, "k2"), pads=[1, 1, 1, 1]))
    h = ops.flatten(ops.global_average_pool(h), axis=1)
    y = ops.gemm(h, _weights(g, rng, (8, 10), dtype, "w"), _weights(g, rng, (10,), dtype, "b"))
    g.output(y, name="logits")
    return g.build(), [rng.uniform(-1, 1, (2, 3, 8, 8)).astype(dtype.numpy)]


def attention(dtype: DType, rng: np.random.Generator) -> tuple[Graph, list[np.ndarray]]:
    """A pre-norm self-attention block: LayerNorm, QKV, 2 heads, Softmax, residual."""
    seq, d, heads = 6, 16, 2
    g = GraphBuilder("attention")
    x = g.input("x", TensorType(dtype, ("batch", seq, d)))
    n = ops.layer_normalization(x, g.constant(np.ones(d, dtype.numpy), name="gamma"),
                                g.constant(np.zeros(d, dtype.numpy), name="beta"), axis=-1)

    def project(name: str) -> object:
        p = n @ _weights(g, rng, (d, d), dtype, f"w{name}")
        p = ops.reshape(p, np.array([0, seq, heads, d // heads], np.int64))
        return ops.transpose(p, perm=[0, 2, 1, 3])

    q, k, v = project("q"), project("k"), project("v")
    scores = (q @ ops.transpose(k, perm=[0, 1, 3, 2])) * float(1 / np.sqrt(d // heads))
    context = ops.transpose(ops.softmax(scores, axis=-1) @ v, perm=[0, 2, 1, 3])
    context = ops.reshape(context, np.array([0, seq, d], np.int64))
    g.output(x + context @ _weights(g, rng, (d, d), dtype, "wo"), name="y")
    return g.build(), [rng.uniform(-1, 1, (2, seq, d)).astype(dtype.numpy)]


def _hybrid(name: str, circuit: str, features: int, rows: int, dtype: DType,
            rng: np.random.Generator) -> tuple[Graph, list[np.ndarray]]:
    """``features -> Linear -> tanh -> circuit -> Linear -> 2`` on ``rows`` seeded rows."""
    from polyhal.conformance.quantum_circuits import CIRCUITS
    from polyhal.ops import quantum

    case = CIRCUITS[circuit]()
    g = GraphBuilder(name)
    x = g.input("x", TensorType(dtype, ("batch", features)))
    angles = ops.tanh(x @ _weights(g, rng, (features, case.num_inputs), dtype, "w1")
                      + _weights(g, rng, (case.num_inputs,), dtype, "b1"))
    theta = g.constant(rng.uniform(-np.pi, np.pi, case.num_weights).astype(dtype.numpy),
                       name="theta")
    z = quantum.expectation(angles, theta, case.circuit, case.observables, case.input_params,
                            case.weight_params)
    n_obs = len(case.observables)
    y = z @ _weights(g, rng, (n_obs, 2), dtype, "w2") + _weights(g, rng, (2,), dtype, "b2")
    g.output(y, name="logits")
    return g.build(), [rng.uniform(-1, 1, (rows, features)).astype(dtype.numpy)]


def hybrid_moons(dtype: DType, rng: np.random.Generator) -> tuple[Graph, list[np.ndarray]]:
    """2 -> Linear -> tanh -> the two-qubit ansatz (<Z0>, <Z1>, <XX>) -> Linear -> 2."""
    return _hybrid("hybrid_moons", "ansatz_2q", 2, 4, dtype, rng)


def hybrid_controlled(dtype: DType, rng: np.random.Generator
                      ) -> tuple[Graph, list[np.ndarray]]:
    """3 -> Linear -> tanh -> the three-qubit circuit with controlled rotations and reused
    parameters -> Linear -> 2."""
    return _hybrid("hybrid_controlled", "controlled_3q", 3, 3, dtype, rng)


Builder = Callable[[DType, np.random.Generator], tuple[Graph, list[np.ndarray]]]

MODELS: dict[str, Builder] = {
    "mlp": mlp,
    "cnn": cnn,
    "attention": attention,
}
"""The L2 model graphs by name."""

HYBRID_MODELS: dict[str, Builder] = {
    "hybrid-moons": hybrid_moons,
    "hybrid-controlled": hybrid_controlled,
}
"""The hybrid quantum-classical L2 models by name: generated for devices that claim
``quantum.Expectation``, the classical nodes placed on a fallback device where the
device under test does not cover them (see :mod:`polyhal.conformance.levels.l2`)."""
