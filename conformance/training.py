"""The training step of level L3: SGD with momentum on a small MLP, as one IR graph.

The step graph computes the loss of one batch, its gradient
(:func:`polyhal.autodiff.grad`) and the update of every parameter ``p``
with velocity ``v``::

    v' = momentum * v + dL/dp
    p' = p - lr * v'

Its inputs are the parameters, the velocities, a batch ``x`` and its
``labels``; its outputs the loss, the new parameters and the new velocities,
in that order, so that the state outputs of one step are the state inputs of
the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyhal import autodiff, ops
from polyhal.ir import DType, Graph, GraphBuilder, TensorType
from polyhal.passes import replay

LAYERS = (4, 16, 3)
"""Inputs, hidden units (tanh) and classes of the MLP."""
BATCH = 8
LEARNING_RATE = 0.1
MOMENTUM = 0.9
PARAMETERS = ("w1", "b1", "w2", "b2")


def _shapes() -> dict[str, tuple[int, ...]]:
    n_in, hidden, classes = LAYERS
    return {"w1": (n_in, hidden), "b1": (hidden,), "w2": (hidden, classes), "b2": (classes,)}


def loss_graph(dtype: DType = DType.FLOAT32) -> Graph:
    """Mean softmax cross-entropy of the MLP on one batch: LogSoftmax, then
    GatherElements of each row's label."""
    g = GraphBuilder("mlp_loss")
    params = {name: g.input(name, TensorType(dtype, shape)) for name, shape in _shapes().items()}
    x = g.input("x", TensorType(dtype, ("batch", LAYERS[0])))
    labels = g.input("labels", TensorType(DType.INT64, ("batch", 1)))
    hidden = ops.tanh(x @ params["w1"] + params["b1"])
    log_probs = ops.log_softmax(hidden @ params["w2"] + params["b2"], axis=1)
    picked = ops.gather_elements(log_probs, labels, axis=1)
    g.output(-ops.reduce_mean(picked, keepdims=0), name="loss")
    return g.build()


def step_graph(dtype: DType = DType.FLOAT32, lr: float = LEARNING_RATE,
               momentum: float = MOMENTUM) -> Graph:
    """One SGD-with-momentum step: inputs ``w1 b1 w2 b2 v_w1 v_b1 v_w2 v_b2 x labels``,
    outputs ``loss``, then ``new_<p>`` and ``new_v_<p>`` per parameter."""
    gradient = autodiff.grad(loss_graph(dtype), wrt=list(PARAMETERS))
    g = GraphBuilder("sgd_momentum_step", reserved=[*gradient.value_types,
                                                    *(n.name for n in gradient.nodes)])
    env = {v.name: g.input(v.name, v.type) for v in gradient.inputs if v.name in PARAMETERS}
    velocity = {p: g.input(f"v_{p}", env[p].type) for p in PARAMETERS}
    env.update({v.name: g.input(v.name, v.type) for v in gradient.inputs
                if v.name not in PARAMETERS})
    for name, array in gradient.constants.items():
        env[name] = g.constant(array, name=name)
    for node in gradient.nodes:
        outs = replay(g, node, [env[i] if i else None for i in node.inputs])
        env.update({value.name: var for value, var in zip(node.outputs, outs, strict=True)})
    g.output(env["loss"], name="loss")
    scale = {"lr": np.asarray(lr, dtype.numpy), "momentum": np.asarray(momentum, dtype.numpy)}
    updates = []
    for p in PARAMETERS:
        new_v = velocity[p] * scale["momentum"] + env[f"grad_{p}"]
        updates.append((p, env[p] - new_v * scale["lr"], new_v))
    for p, new_p, _ in updates:
        g.output(new_p, name=f"new_{p}")
    for p, _, new_v in updates:
        g.output(new_v, name=f"new_v_{p}")
    return g.build()


@dataclass(frozen=True)
class TrainingRun:
    """Seeded initial state and one batch per step."""

    state: list[np.ndarray]
    """Parameters, then velocities (zeros), in the step graph's input order."""
    batches: list[tuple[np.ndarray, np.ndarray]]
    """``(x, labels)`` per step."""


def training_run(dtype: DType, seed: int, steps: int) -> TrainingRun:
    """Glorot-uniform weights, zero biases and velocities; Gaussian batches labelled
    by a fixed (seeded) linear rule, so that there is something to learn."""
    rng = np.random.default_rng(seed)
    params = []
    for name, shape in _shapes().items():
        if name.startswith("w"):
            limit = np.sqrt(6.0 / sum(shape))
            params.append(rng.uniform(-limit, limit, shape).astype(dtype.numpy))
        else:
            params.append(np.zeros(shape, dtype.numpy))
    rule = rng.standard_normal((LAYERS[0], LAYERS[-1]))
    batches = []
    for _ in range(steps):
        x = rng.standard_normal((BATCH, LAYERS[0]))
        labels = np.argmax(x @ rule, axis=1).astype(np.int64).reshape(BATCH, 1)
        batches.append((x.astype(dtype.numpy), labels))
    return TrainingRun(params + [np.zeros_like(p) for p in params], batches)
