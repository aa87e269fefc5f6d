"""Checking what ``fit`` resumes from: a checkpoint's metadata and optimizer state.

A checkpoint file may come from anywhere (a copy, an older run, an edit by
hand), so every field ``fit`` reads back is checked against the shape it
writes before any of it is used: a malformed field is a
:class:`~polyhal.errors.CheckpointError` naming the checkpoint and the field,
never an exception from deep inside a later training step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.errors import CheckpointError, shown
from polyhal.train.history import History

_COUNTERS = ("step", "epoch", "batch")


@dataclass(frozen=True)
class ResumePoint:
    """Where a checkpointed run stopped, checked."""

    history: History
    step: int
    epoch: int
    batch: int
    sums: dict[str, float]
    scaler: dict[str, Any]


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _number(v)
                                           for k, v in value.items())


def _records(value: Any, fields: Mapping[str, Any]) -> bool:
    """A list of objects whose listed fields pass their checks."""
    return isinstance(value, list) and all(
        isinstance(item, dict) and all(name in item and check(item[name])
                                       for name, check in fields.items())
        for item in value)


def _history(value: Any) -> History:
    if not isinstance(value, dict):
        raise ValueError("expected an object")
    epochs = value.get("epochs", [])
    if not isinstance(epochs, list) or not all(_numbers(e) for e in epochs):
        raise ValueError("epochs: expected a list of {metric: number}")
    if not _count(value.get("skipped_steps", 0)):
        raise ValueError("skipped_steps: expected an integer >= 0")
    recoveries = value.get("recoveries", [])
    if not _records(recoveries, {"step": _count, "error": lambda v: isinstance(v, str),
                                 "seconds": _number}):
        raise ValueError("recoveries: expected a list of {step, error, seconds}")
    return History.from_dict(value)


def resume_point(meta: Mapping[str, Any], where: str,
                 scaler_state: Mapping[str, Any]) -> ResumePoint:
    """The checked resume point of a checkpoint's ``meta``; ``scaler_state`` is the
    current loss scaler's, whose keys and value types the saved one must have."""
    def bad(field: str, expected: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {where}: {field}: expected {expected}, got "
                               f"{shown(meta.get(field))}")

    for field in _COUNTERS:
        if not _count(meta.get(field)):
            raise bad(field, "an integer >= 0")
    if not _numbers(meta.get("sums")):
        raise bad("sums", "an object of numbers")
    scaler = meta.get("scaler")
    if not isinstance(scaler, dict) or set(scaler) != set(scaler_state) or not all(
            _same_kind(scaler[k], v) for k, v in scaler_state.items()):
        raise bad("scaler", "the loss scaler's fields " + ", ".join(sorted(scaler_state)))
    try:
        history = _history(meta.get("history"))
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {where}: history: {exc}") from None
    return ResumePoint(history, meta["step"], meta["epoch"], meta["batch"],
                       dict(meta["sums"]), dict(scaler))


def check_arrays(saved: Mapping[str, np.ndarray], current: Mapping[str, np.ndarray],
                 problem: str, where: str) -> None:
    """Raise a CheckpointError saying ``problem`` unless ``saved`` holds the arrays of
    ``current``: the same names, shapes and dtypes."""
    if set(saved) != set(current):
        raise CheckpointError(f"checkpoint {where}: {problem}: it holds {sorted(saved)}, "
                              f"expected {sorted(current)}")
    for name, array in current.items():
        array = np.asarray(array)
        got = np.asarray(saved[name])
        if got.shape != array.shape or got.dtype != array.dtype:
            raise CheckpointError(f"checkpoint {where}: {problem}: {name!r} is "
                                  f"{got.dtype}{list(got.shape)}, expected "
                                  f"{array.dtype}{list(array.shape)}")


def _same_kind(saved: Any, current: Any) -> bool:
    if isinstance(current, bool):
        return isinstance(saved, bool)
    if isinstance(current, int):
        return isinstance(saved, int) and not isinstance(saved, bool)
    return _number(saved)
