"""Checks of the training API's arguments, shared by ``fit``, ``evaluate`` and the
trainers: each failure is a :class:`~polyhal.errors.TrainingError` naming the
argument, its value and what is expected, before any work starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from polyhal.errors import TrainingError, shown

MAX_LR = float(np.finfo(np.float32).max)
"""The largest learning rate: the rate is a float32 graph input (``lr``), and a larger one
is infinite there, which would turn every updated weight into inf or NaN."""

MODEL_METHODS = ("graph", "parameters", "trainable_names", "state_dict", "load_state_dict")
"""What training calls on a model (:class:`polyhal.nn.Module` has them all)."""


def count(value: Any, name: str, where: str, minimum: int = 0) -> int:
    """``value`` as an ``int`` (numpy integers too), when it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        expected = "a non-negative integer" if minimum == 0 else (
            "a positive integer" if minimum == 1 else f"an integer >= {minimum}")
        raise TrainingError(f"{where}: {name}={value!r} must be {expected}")
    return int(value)


def is_lr(value: Any) -> bool:
    """Whether ``value`` is a learning rate: a number >= 0 that is finite in float32
    (at most :data:`MAX_LR`)."""
    # compared, never converted: float(10 ** 400) would raise OverflowError
    return not isinstance(value, bool) and isinstance(value, Real) and 0 <= value <= MAX_LR


def learning_rate(value: Any, where: str) -> float:
    """``value`` as a ``float``, when :func:`is_lr` holds."""
    if not is_lr(value):
        raise TrainingError(f"{where}: lr={shown(value)} must be a finite number >= 0 and "
                            f"<= {MAX_LR:.8g} (the learning rate is a float32 graph input)")
    return float(value)


def scheduled_lr(value: Any, step: int, epoch: int) -> float:
    """What ``lr_schedule(step, epoch)`` returned, checked as optimizers check ``lr``:
    a finite number >= 0, finite in float32 too (at most :data:`MAX_LR`)."""
    if not is_lr(value):
        raise TrainingError(f"fit: lr_schedule({step}, {epoch}) returned {shown(value)} for "
                            f"step {step + 1} (epoch {epoch + 1}); it must return a finite "
                            f"number >= 0 and <= {MAX_LR:.8g} (the learning rate is a float32 "
                            "graph input)")
    return float(value)


def clip_norm(value: Any, where: str) -> float | None:
    """``clip_norm`` checked: ``None`` or ``inf`` (no clipping) or a finite number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise TrainingError(f"{where}: clip_norm={shown(value)} must be a number > 0 (or "
                            "None for no clipping)")
    try:
        value = float(value)
    except OverflowError:  # an int past float's range clips nothing, as inf
        return None
    return None if math.isinf(value) else value


def model(value: Any, where: str) -> None:
    """Refuse a ``model`` that lacks a method training calls."""
    missing = [m for m in MODEL_METHODS if not callable(getattr(value, m, None))]
    if missing:
        raise TrainingError(f"{where}: model={shown(value)} is not a model: it has no "
                            f"{', '.join(missing)} (pass a polyhal.nn.Module)")


def optimizer(value: Any, where: str) -> None:
    """Refuse an ``optimizer`` that is not an :class:`~polyhal.train.Optimizer` instance."""
    from polyhal.train.optim import Optimizer

    if isinstance(value, type) and issubclass(value, Optimizer):
        raise TrainingError(f"{where}: optimizer={value.__name__} is the class; pass an "
                            f"instance, e.g. optimizer={value.__name__}(...)")
    if not isinstance(value, Optimizer):
        raise TrainingError(f"{where}: optimizer={shown(value)} must be an optimizer such as "
                            "train.Adam(1e-3) or train.SGD(0.1)")
    if not is_lr(getattr(value, "lr", None)):  # lr is an attribute: it may have been set
        raise TrainingError(f"{where}: optimizer {type(value).__name__} has "
                            f"lr={shown(getattr(value, 'lr', None))}; it must be a finite "
                            f"number >= 0 and <= {MAX_LR:.8g} (the learning rate is a float32 "
                            "graph input)")


def device(value: Any, name: str, where: str, session: bool = False,
           optional: bool = False) -> None:
    """Refuse a ``device`` (or ``fallback``) that is not a device address (``str``), an
    opened :class:`~polyhal.hal.Device`, a :class:`~polyhal.runtime.Session` (when
    ``session``) or ``None`` (when ``optional``)."""
    from polyhal.hal.contract import Device
    from polyhal.runtime.session import Session

    kinds: tuple[type, ...] = (str, Device, Session) if session else (str, Device)
    if (value is None and optional) or isinstance(value, kinds):
        return
    kinds_shown = ["a device address such as 'cpu' or 'gpu:1'", "a Device",
                   *(["a Session"] if session else []), *(["None"] if optional else [])]
    expected = ", ".join(kinds_shown[:-1]) + " or " + kinds_shown[-1]
    raise TrainingError(f"{where}: {name}={shown(value)} must be {expected}")


def functions(value: Any, name: str, where: str) -> list[Callable[..., Any]]:
    """A list of functions (``None`` is none): a single function or a string is refused,
    so that ``callbacks=fn`` is not silently read as something else."""
    if value is None:
        return []
    if callable(value) or isinstance(value, str) or not isinstance(value, Sequence) \
            or not all(callable(f) for f in value):
        raise TrainingError(f"{where}: {name}={shown(value)} must be a list of functions, "
                            f"e.g. {name}=[fn]")
    return list(value)
