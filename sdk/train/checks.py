"""Checks of the training API's arguments, shared by ``fit``, ``evaluate`` and the
trainers: each failure is a :class:`~polyhal.errors.TrainingError` naming the
argument, its value and what is expected, before any work starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any

from polyhal.errors import TrainingError

MODEL_METHODS = ("graph", "parameters", "trainable_names", "state_dict", "load_state_dict")
"""What training calls on a model (:class:`polyhal.nn.Module` has them all)."""


def count(value: Any, name: str, where: str, minimum: int = 0) -> int:
    """``value`` as an ``int`` (numpy integers too), when it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        expected = "a non-negative integer" if minimum == 0 else (
            "a positive integer" if minimum == 1 else f"an integer >= {minimum}")
        raise TrainingError(f"{where}: {name}={value!r} must be {expected}")
    return int(value)


def scheduled_lr(value: Any, step: int, epoch: int) -> float:
    """What ``lr_schedule(step, epoch)`` returned, checked as optimizers check ``lr``:
    a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, Real) or not (
            math.isfinite(value) and value >= 0):
        raise TrainingError(f"fit: lr_schedule({step}, {epoch}) returned {_shown(value)} for "
                            f"step {step + 1} (epoch {epoch + 1}); it must return a finite "
                            "number >= 0")
    return float(value)


def clip_norm(value: Any, where: str) -> float | None:
    """``clip_norm`` checked: ``None`` or ``inf`` (no clipping) or a finite number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise TrainingError(f"{where}: clip_norm={value!r} must be a number > 0 (or None "
                            "for no clipping)")
    return None if math.isinf(value) else float(value)


def model(value: Any, where: str) -> None:
    """Refuse a ``model`` that lacks a method training calls."""
    missing = [m for m in MODEL_METHODS if not callable(getattr(value, m, None))]
    if missing:
        raise TrainingError(f"{where}: model={_shown(value)} is not a model: it has no "
                            f"{', '.join(missing)} (pass a polyhal.nn.Module)")


def optimizer(value: Any, where: str) -> None:
    """Refuse an ``optimizer`` that is not an :class:`~polyhal.train.Optimizer` instance."""
    from polyhal.train.optim import Optimizer

    if isinstance(value, type) and issubclass(value, Optimizer):
        raise TrainingError(f"{where}: optimizer={value.__name__} is the class; pass an "
                            f"instance, e.g. optimizer={value.__name__}(...)")
    if not isinstance(value, Optimizer):
        raise TrainingError(f"{where}: optimizer={_shown(value)} must be an optimizer such as "
                            "train.Adam(1e-3) or train.SGD(0.1)")


def functions(value: Any, name: str, where: str) -> list[Callable[..., Any]]:
    """A list of functions (``None`` is none): a single function or a string is refused,
    so that ``callbacks=fn`` is not silently read as something else."""
    if value is None:
        return []
    if callable(value) or isinstance(value, str) or not isinstance(value, Sequence) \
            or not all(callable(f) for f in value):
        raise TrainingError(f"{where}: {name}={_shown(value)} must be a list of functions, "
                            f"e.g. {name}=[fn]")
    return list(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
