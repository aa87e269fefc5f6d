"""One training step as one graph, and the host loop state around it.

:func:`step_graph` builds, for one batch shape, a graph that runs the model's
forward pass (through :func:`polyhal.passes.autocast` for mixed precision),
the loss, its gradient (:func:`polyhal.autodiff.grad`), gradient unscaling,
the finite check, clipping and the optimizer's update. Its inputs are
``x``, ``target``, every parameter (by dotted name), the optimizer state,
``lr`` and, for mixed precision, ``loss_scale``; its outputs ``loss``, ``y``
(the predictions, for metrics), ``finite`` (whether the loss and every gradient
are finite: when not, the step is skipped and the ``next/`` outputs equal the
inputs, in every precision), then ``next/<name>`` for every trainable parameter
and state entry.

:class:`Trainer` holds the parameters, optimizer state and loss scaler on the
host, compiles one step graph per batch shape for the device and runs steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from polyhal import ops
from polyhal.autodiff import grad
from polyhal.autodiff.reverse import replay_forward
from polyhal.errors import IRError
from polyhal.hal.contract import Device
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.passes import autocast
from polyhal.train import checks
from polyhal.train.losses import Loss, check_targets
from polyhal.train.optim import Optimizer
from polyhal.train.precision import LossScaler, compute_dtype

NEXT = "next/"
"""Prefix of the outputs that carry updated parameters and state."""


class Model(Protocol):
    """What training needs of a model (:class:`polyhal.nn.Module` provides it)."""

    def graph(self, *input_types: Any, params: str = "inputs", **options: Any) -> Graph:
        """The forward graph: input ``x``, the parameters as inputs, output ``y``."""

    def parameters(self) -> Any:
        """The parameters (their dtypes set the dtype float inputs are cast to)."""

    def trainable_names(self) -> list[str]:
        """The parameters to train."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter's value."""

    def load_state_dict(self, state: Mapping[str, np.ndarray], strict: bool = True) -> Any:
        """Set parameter values."""


def _all_finite(values: Sequence[Var]) -> Var:
    """True when every element of ``values`` is finite (``v * 0`` is NaN at inf and NaN)."""
    flags = [ops.equal(ops.reduce_sum(v * np.asarray(0, v.dtype.numpy), keepdims=0),
                     np.asarray(0, v.dtype.numpy)) for v in values]
    result = flags[0]
    for flag in flags[1:]:
        result = ops.and_(result, flag)
    return result


def clipped(grads: dict[str, Var], max_norm: float) -> dict[str, Var]:
    """``grads`` scaled so their global L2 norm is at most ``max_norm``."""
    squares = [ops.reduce_sum(g * g, keepdims=0) for g in grads.values()]
    total = squares[0]
    for s in squares[1:]:
        total = total + s
    norm = ops.sqrt(total)
    factor = ops.min(np.asarray(1, np.float32),
                     np.asarray(max_norm, np.float32) / (norm + np.float32(1e-6)))
    return {name: g * ops.cast(factor, to=g.dtype) for name, g in grads.items()}


def forward_graph(model: Model, input_type: TensorType, precision: str) -> Graph:
    """The model's forward graph (parameters as inputs), autocast for mixed precision."""
    forward = model.graph(input_type, params="inputs")
    dtype = compute_dtype(precision)
    return forward if dtype is None else autocast(forward, dtype)


def loss_graph(forward: Graph, target: TensorType, loss: Loss, scaled: bool) -> Graph:
    """``forward`` followed by ``loss`` of its output ``y`` against input ``target``:
    outputs ``loss``, ``y`` and, when ``scaled``, ``scaled_loss`` (times input
    ``loss_scale``)."""
    g = GraphBuilder(f"{forward.name}_loss")
    env = replay_forward(g, forward)
    outputs = [v.name for v in forward.outputs]
    if outputs != ["y"]:
        raise IRError(f"training needs a model with one output 'y', got {outputs}")
    value = loss(env["y"], g.input("target", target))
    if not isinstance(value, Var):
        raise IRError(f"the loss function returned {type(value).__name__} {value!r:.60}; it "
                      "must return a scalar built with polyhal.ops from its arguments")
    if value.type.rank != 0 or value.dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise IRError(f"the loss must be a float32 or float64 scalar, got {value.type}")
    g.output(value, name="loss")
    g.output(env["y"], name="y")
    if scaled:
        scale = g.input("loss_scale", TensorType(value.dtype, ()))
        g.output(value * scale, name="scaled_loss")
    return g.build()


def step_graph(model: Model, input_type: TensorType, target_type: TensorType, loss: Loss,
               optimizer: Optimizer, precision: str = "fp32",
               clip_norm: float | None = None) -> Graph:
    """The graph of one training step (see the module docstring)."""
    trainable = model.trainable_names()
    if not trainable:
        raise IRError("the model has no trainable parameters")
    clip_norm = checks.clip_norm(clip_norm, "step_graph")
    forward = forward_graph(model, input_type, precision)
    scaled = compute_dtype(precision) is not None
    with_loss = loss_graph(forward, target_type, loss, scaled)
    gradient = grad(with_loss, wrt=trainable, of="scaled_loss" if scaled else "loss")

    g = GraphBuilder(f"{forward.name}_step")
    env = replay_forward(g, gradient)
    grad_names = [v.name for v in gradient.outputs][len(with_loss.outputs):]
    grads = dict(zip(trainable, (env[n] for n in grad_names), strict=True))
    params = {name: env[name] for name in trainable}
    values = model.state_dict()
    state = {name: g.input(name, TensorType.of(array))
             for name, array in optimizer.init_state({n: values[n] for n in trainable}).items()}
    lr = g.input("lr", TensorType(DType.FLOAT32, ()))
    if scaled:
        inverse = np.float32(1) / env["loss_scale"]
        grads = {n: v * ops.cast(inverse, to=v.dtype) for n, v in grads.items()}
    finite = _all_finite([env["loss"], *grads.values()])
    if clip_norm is not None:
        grads = clipped(grads, clip_norm)
    optimizer.check_fits(params)
    new_params, new_state = optimizer.update(params, grads, state, lr)
    g.output(env["loss"], name="loss")
    g.output(env["y"], name="y")
    g.output(finite, name="finite")
    # a non-finite step is skipped: one NaN sample must not turn every weight into NaN
    new_params = {n: ops.where(finite, v, params[n]) for n, v in new_params.items()}
    new_state = {n: ops.where(finite, v, state[n]) for n, v in new_state.items()}
    for name in trainable:
        g.output(new_params[name], name=NEXT + name)
    for name in state:
        g.output(new_state.get(name, state[name]), name=NEXT + name)
    return g.build()


@dataclass
class StepResult:
    """What one step reports to the host."""

    loss: float
    predictions: np.ndarray
    finite: bool


class Trainer:
    """Parameters, optimizer state and loss scaler on the host; one compiled step
    graph per batch shape on the device (nodes it lacks run on ``fallback``, unless
    that is the device itself)."""

    def __init__(self, model: Model, loss: Loss, optimizer: Optimizer, device: str | Device = "cpu",
                 precision: str = "fp32", clip_norm: float | None = None,
                 fallback: str | Device | None = "reference") -> None:
        checks.model(model, "Trainer")
        checks.optimizer(optimizer, "Trainer")
        checks.device(device, "device", "Trainer")
        checks.device(fallback, "fallback", "Trainer", optional=True)
        self.model, self.loss, self.optimizer = model, loss, optimizer
        self.device, self.fallback = device, fallback_for(device, fallback)
        self.precision, self.clip_norm = precision, checks.clip_norm(clip_norm, "Trainer")
        compute_dtype(precision)
        self.trainable = model.trainable_names()
        values = model.state_dict()
        self.state = optimizer.init_state({n: values[n] for n in self.trainable})
        self.scaler = LossScaler.for_precision(precision)
        self._compiled: dict[tuple[TensorType, TensorType], Any] = {}

    def _compiled_step(self, x: np.ndarray, y: np.ndarray) -> Any:
        import polyhal

        key = (TensorType.of(x), TensorType.of(y))
        if key not in self._compiled:
            graph = step_graph(self.model, key[0], key[1], self.loss, self.optimizer,
                               self.precision, self.clip_norm)
            self._compiled[key] = polyhal.compile(graph, device=self.device,
                                                  fallback=self.fallback)
        return self._compiled[key]

    def step(self, x: np.ndarray, y: np.ndarray, lr: float) -> StepResult:
        """One optimization step on one batch; updates the model's parameters unless the
        loss or a gradient is not finite (then the step is skipped). ``lr`` must be finite
        in float32 (see :data:`~polyhal.train.checks.MAX_LR`)."""
        lr = checks.learning_rate(lr, "Trainer.step")
        compiled = self._compiled_step(x, y)
        check_targets(self.loss, compiled.source.value_type("y"), y, "training data")
        params = self.model.state_dict()
        feeds: dict[str, np.ndarray] = {"x": x, "target": y, **params, **self.state,
                                        "lr": np.asarray(lr, np.float32)}
        if "loss_scale" in {v.name for v in compiled.source.inputs}:
            feeds["loss_scale"] = np.asarray(self.scaler.scale, np.float32)
        out = compiled(**feeds)
        finite = bool(out["finite"])
        self.scaler.update(finite)
        updated = {**params, **{n: out[NEXT + n] for n in self.trainable}}
        self.model.load_state_dict(updated)
        self.state = {n: out[NEXT + n] for n in self.state}
        return StepResult(float(out["loss"]), out["y"], finite)


def fallback_for(device: str | Device, fallback: str | Device | None) -> str | Device | None:
    """``fallback``, or ``None`` when it is ``device`` itself (compile refuses a device
    listed twice, and a device cannot fall back to itself)."""
    from polyhal.runtime.compiled import shared_device

    if fallback is None:
        return None
    addresses = [d.address if isinstance(d, Device) else shared_device(d).address
                 for d in (device, fallback)]
    return None if addresses[0] == addresses[1] else fallback
