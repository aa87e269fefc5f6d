"""Data-parallel training steps over a :class:`~polyhal.runtime.Session`.

A batch is cut into fixed micro-batches of ``session.micro_batch`` rows, in
order. Each runs the model's gradient graph (forward, loss, backward) on
whichever session device takes it; the host then reduces the losses and
gradients over the micro-batches in their fixed order, weighting each by its
share of the batch (the loss is a mean over samples), in float64, and applies
the optimizer's update graph on the host's reference device. In fp16/bf16 the
graph differentiates the scaled loss and the host unscales the reduced
gradients and skips a step whose gradients are not all finite (dynamic loss
scaling, :mod:`polyhal.train.precision`). So the weights
after a step do not depend on which device ran which micro-batch, nor on the
faults the session recovered from, provided the devices compute the same
gradients (devices of one adapter do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import polyhal
from polyhal.autodiff import grad
from polyhal.errors import TrainingError
from polyhal.ir.builder import GraphBuilder
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.train import checks
from polyhal.train.losses import Loss, check_targets
from polyhal.train.optim import Optimizer
from polyhal.train.precision import LossScaler, compute_dtype
from polyhal.train.step import NEXT, Model, StepResult, clipped, forward_graph, loss_graph

if TYPE_CHECKING:
    from polyhal.runtime.session import Session, SessionGraph

GRAD = "grad/"
"""Prefix of the update graph's gradient inputs."""


def gradient_graph(model: Model, input_type: TensorType, target_type: TensorType,
                   loss: Loss, precision: str = "fp32") -> Graph:
    """Inputs ``x``, ``target``, the parameters and, in fp16/bf16, ``loss_scale``; outputs
    ``loss``, ``y`` (and ``scaled_loss``), then the gradient of the (scaled) loss for each
    trainable parameter, in ``trainable_names`` order."""
    scaled = compute_dtype(precision) is not None
    with_loss = loss_graph(forward_graph(model, input_type, precision), target_type, loss,
                           scaled)
    return grad(with_loss, wrt=model.trainable_names(),
                of="scaled_loss" if scaled else "loss")


def update_graph(params: dict[str, np.ndarray], state: dict[str, np.ndarray],
                 optimizer: Optimizer, clip_norm: float | None) -> Graph:
    """Inputs: the trainable parameters, ``grad/<name>`` for each, the optimizer state and
    ``lr``; outputs ``next/<name>`` for each parameter, then each state entry."""
    g = GraphBuilder("update")
    values = {n: g.input(n, TensorType.of(a)) for n, a in params.items()}
    grads = {n: g.input(GRAD + n, TensorType.of(a)) for n, a in params.items()}
    current = {n: g.input(n, TensorType.of(a)) for n, a in state.items()}
    lr = g.input("lr", TensorType.of(np.float32(0)))
    if clip_norm is not None:
        grads = clipped(grads, clip_norm)
    new_params, new_state = optimizer.update(values, grads, current, lr)
    for name in params:
        g.output(new_params[name], name=NEXT + name)
    for name in state:
        g.output(new_state.get(name, current[name]), name=NEXT + name)
    return g.build()


class SessionTrainer:
    """The host state of data-parallel training: parameters, optimizer state; one gradient
    graph per micro-batch shape on the session, one update graph on the host."""

    def __init__(self, model: Model, loss: Loss, optimizer: Optimizer, session: Session,
                 precision: str = "fp32", clip_norm: float | None = None) -> None:
        compute_dtype(precision)  # an unknown precision fails here
        if session.micro_batch is None:
            raise TrainingError("training over a Session needs Session(micro_batch=N)")
        checks.model(model, "SessionTrainer")
        checks.optimizer(optimizer, "SessionTrainer")
        clip_norm = checks.clip_norm(clip_norm, "SessionTrainer")
        self.model, self.loss, self.optimizer = model, loss, optimizer
        self.session, self.clip_norm, self.precision = session, clip_norm, precision
        self.trainable = model.trainable_names()
        if not self.trainable:
            raise TrainingError("the model has no trainable parameters")
        values = model.state_dict()
        self.state = optimizer.init_state({n: values[n] for n in self.trainable})
        self.scaler = LossScaler.for_precision(precision)
        self._gradients: dict[tuple[TensorType, TensorType], SessionGraph] = {}
        self._update: polyhal.runtime.CompiledGraph | None = None

    def _gradient(self, x: np.ndarray, y: np.ndarray) -> SessionGraph:
        key = (TensorType.of(x), TensorType.of(y))
        if key not in self._gradients:
            graph = gradient_graph(self.model, key[0], key[1], self.loss, self.precision)
            self._gradients[key] = self.session.compile(graph)
        return self._gradients[key]

    def step(self, x: np.ndarray, y: np.ndarray, lr: float) -> StepResult:
        """One optimization step on one batch; updates the model's parameters (in
        fp16/bf16 only when every gradient is finite, as in :mod:`polyhal.train.precision`).
        ``lr`` must be finite in float32 (see :data:`~polyhal.train.checks.MAX_LR`)."""
        lr = checks.learning_rate(lr, "SessionTrainer.step")
        size = self.session.micro_batch
        assert size is not None
        params = self.model.state_dict()
        scaled = compute_dtype(self.precision) is not None
        extra = {"loss_scale": np.asarray(self.scaler.scale, np.float32)} if scaled else {}
        check_targets(self.loss, self._gradient(x[:size], y[:size]).graph.value_type("y"), y,
                      "training data")
        futures = [self._gradient(x[i:i + size], y[i:i + size]).submit(
                       x=x[i:i + size], target=y[i:i + size], **params, **extra)
                   for i in range(0, len(x), size)]
        parts = [f.result() for f in futures]
        weights = [len(p["y"]) / len(x) for p in parts]
        loss = sum(w * float(p["loss"]) for w, p in zip(weights, parts, strict=True))
        first = 3 if scaled else 2  # loss, y (, scaled_loss), then the gradients
        unscale = 1.0 / self.scaler.scale
        grads = {}
        for position, name in enumerate(self.trainable):
            total = sum(w * p[first + position].astype(np.float64)
                        for w, p in zip(weights, parts, strict=True))
            grads[GRAD + name] = (np.asarray(total) * unscale).astype(params[name].dtype)
        predictions = np.concatenate([p["y"] for p in parts], axis=0)
        finite = bool(np.isfinite(loss)) and all(np.isfinite(g).all() for g in grads.values())
        if scaled:
            self.scaler.update(finite)
        if not finite:
            return StepResult(loss, predictions, False)  # skipped: nothing changes
        trainable = {n: params[n] for n in self.trainable}
        if self._update is None:
            graph = update_graph(trainable, self.state, self.optimizer, self.clip_norm)
            self._update = polyhal.compile(graph, device="reference")
        out = self._update(**trainable, **grads, **self.state, lr=np.asarray(lr, np.float32))
        self.model.load_state_dict({**params, **{n: out[NEXT + n] for n in self.trainable}})
        self.state = {n: out[NEXT + n] for n in self.state}
        return StepResult(loss, predictions, True)
