"""Optimizers whose update steps are IR: each builds the new parameters and
state from the old ones and the gradients, inside the training step's graph,
so the update runs on the training device.

State is a flat mapping of arrays: per-parameter slots named
``<slot>/<parameter>`` (``velocity/0.weight``) and, for Adam and AdamW, the
step count ``step`` (float32, so bias corrections stay in the graph). The
learning rate is a graph input (``lr``), so schedules need no rebuild.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import numpy as np

from polyhal import ops
from polyhal.errors import IRError, shown
from polyhal.ir.builder import Var
from polyhal.train.checks import MAX_LR


def _check(name: str, value: float, low: float, high: float | None = None,
           closed_high: bool = False) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise IRError(f"optimizer argument {name}={shown(value)} must be a number") from None
    except OverflowError:
        raise IRError(f"optimizer argument {name}={shown(value)} is too large: it must be "
                      "a finite number") from None
    ok = value >= low and (high is None or (value <= high if closed_high else value < high))
    if not ok or not np.isfinite(value):
        bound = "" if high is None else f" and {'<=' if closed_high else '<'} {high}"
        raise IRError(f"optimizer argument {name}={value} must be >= {low}{bound}")
    return value


class Optimizer(ABC):
    """An update rule; subclasses define the slots and :meth:`update`."""

    slots: tuple[str, ...] = ()
    """Per-parameter state arrays, shaped like the parameter."""
    counts_steps = False
    """Whether the state holds a step count ``step``."""

    def __init__(self, lr: float) -> None:
        self.lr = _check("lr", lr, 0.0)
        if self.lr > MAX_LR:
            raise IRError(f"optimizer argument lr={self.lr} must be <= {MAX_LR:.8g}: the "
                          "learning rate is a float32 graph input, where a larger one is "
                          "infinite")

    def init_state(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Zeros for every slot of every parameter (and the step count)."""
        state = {f"{slot}/{name}": np.zeros_like(value)
                 for name, value in params.items() for slot in self.slots}
        if self.counts_steps:
            state["step"] = np.zeros((), np.float32)
        return state

    def check_fits(self, params: Mapping[str, Var]) -> None:
        """Refuse a hyperparameter that is infinite in a parameter's dtype (a
        ``weight_decay`` of 1e39 for float32 weights, 1e5 for float16 ones): the update
        computes in the parameter's dtype, where it would turn every weight into inf or
        NaN without a word."""
        config = self.config()
        numbers = [(key, value) for key, value in config.items() if isinstance(value, float)]
        numbers += [(f"{key}[{i}]", item) for key, value in config.items()
                    if isinstance(value, tuple) for i, item in enumerate(value)]
        for name, p in params.items():
            with np.errstate(over="ignore"):
                too_large = [(key, value) for key, value in numbers
                             if not np.isfinite(np.asarray(value, p.dtype.numpy))]
            if too_large:
                key, value = too_large[0]
                raise IRError(f"optimizer argument {key}={value} is too large for parameter "
                              f"{name!r}: it is {p.dtype}, where {value} is infinite")

    @abstractmethod
    def update(self, params: Mapping[str, Var], grads: Mapping[str, Var],
               state: Mapping[str, Var], lr: Var) -> tuple[dict[str, Var], dict[str, Var]]:
        """The new parameters and the new state, as builder values."""

    def config(self) -> dict[str, object]:
        """The hyperparameters (for checkpoints and reprs)."""
        return {"type": type(self).__name__, **{k: v for k, v in vars(self).items()
                                                if not k.startswith("_") and k != "slots"}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.config().items() if k != "type")
        return f"{type(self).__name__}({args})"


def _const(like: Var, value: float) -> np.ndarray:
    return np.asarray(value, like.dtype.numpy)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (``v = momentum * v + g``,
    no dampening), Nesterov momentum and L2 weight decay (``g += weight_decay * p``),
    as ``torch.optim.SGD``."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False) -> None:
        super().__init__(lr)
        self.momentum = _check("momentum", momentum, 0.0, 1.0)
        self.weight_decay = _check("weight_decay", weight_decay, 0.0)
        self.nesterov = bool(nesterov)
        if self.nesterov and self.momentum == 0:
            raise IRError("optimizer argument nesterov=True needs momentum > 0")
        self.slots = ("velocity",) if self.momentum else ()

    def update(self, params: Mapping[str, Var], grads: Mapping[str, Var],
               state: Mapping[str, Var], lr: Var) -> tuple[dict[str, Var], dict[str, Var]]:
        new_params, new_state = {}, {}
        for name, p in params.items():
            g = grads[name]
            if self.weight_decay:
                g = g + _const(p, self.weight_decay) * p
            if self.momentum:
                v = _const(p, self.momentum) * state[f"velocity/{name}"] + g
                new_state[f"velocity/{name}"] = v
                g = g + _const(p, self.momentum) * v if self.nesterov else v
            new_params[name] = p - ops.cast(lr, to=p.dtype) * g
        return new_params, new_state


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; ``weight_decay`` adds an L2 term to
    the gradient, as ``torch.optim.Adam``."""

    slots = ("m", "v")
    counts_steps = True
    decoupled = False

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(lr)
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise IRError(f"optimizer argument betas={betas!r} must be two numbers, e.g. "
                          "(0.9, 0.999)") from None
        self.betas = (_check("betas[0]", beta1, 0.0, 1.0), _check("betas[1]", beta2, 0.0, 1.0))
        self.eps = _check("eps", eps, 0.0)
        self.weight_decay = _check("weight_decay", weight_decay, 0.0)

    def update(self, params: Mapping[str, Var], grads: Mapping[str, Var],
               state: Mapping[str, Var], lr: Var) -> tuple[dict[str, Var], dict[str, Var]]:
        beta1, beta2 = self.betas
        step = state["step"] + np.float32(1)
        new_state: dict[str, Var] = {"step": step}
        new_params = {}
        for name, p in params.items():
            g = grads[name]
            rate = ops.cast(lr, to=p.dtype)
            if self.weight_decay and not self.decoupled:
                g = g + _const(p, self.weight_decay) * p
            if self.weight_decay and self.decoupled:
                p = p - rate * _const(p, self.weight_decay) * p
            m = _const(p, beta1) * state[f"m/{name}"] + _const(p, 1 - beta1) * g
            v = _const(p, beta2) * state[f"v/{name}"] + _const(p, 1 - beta2) * (g * g)
            new_state[f"m/{name}"], new_state[f"v/{name}"] = m, v
            t = ops.cast(step, to=p.dtype)
            correction1 = _const(p, 1) - ops.pow(_const(p, beta1), t)
            correction2 = _const(p, 1) - ops.pow(_const(p, beta2), t)
            denominator = ops.sqrt(v / correction2) + _const(p, self.eps)
            new_params[name] = p - rate * (m / correction1) / denominator
        return new_params, new_state


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p -= lr * wd * p``
    before the Adam step, as ``torch.optim.AdamW``."""

    decoupled = True

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(lr, betas, eps, weight_decay)
