"""Losses as graph-building functions: each takes builder values (predictions
and targets) and returns a scalar value, the mean over the batch.

Every loss is built from core ops with gradient rules, and computes in
float32 or wider even when the predictions are low precision (mixed
precision keeps losses in float32).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyhal import ops
from polyhal.errors import IRError, TrainingError
from polyhal.ir.builder import Var
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.types import TensorType

Loss = Callable[[Var, Var], Var]
"""``loss(predictions, targets) -> scalar``."""


def _wide(value: Var) -> Var:
    """``value`` in float32 when it is a narrower float."""
    if value.dtype in (DType.FLOAT16, DType.BFLOAT16):
        return ops.cast(value, to=DType.FLOAT32)
    return value


def _float(value: Var, what: str, loss: str) -> Var:
    if value.dtype not in FLOAT_TYPES:
        raise IRError(f"{loss}: {what} must be floating-point, got {value.type}")
    return _wide(value)


def _same_shape(a: Var, b: Var, loss: str) -> None:
    if a.type.rank != b.type.rank or any(
            isinstance(x, int) and isinstance(y, int) and x != y
            for x, y in zip(a.shape, b.shape, strict=False)):
        raise IRError(f"{loss}: predictions {a.type} and targets {b.type} must have the "
                      "same shape")


def _mean(value: Var) -> Var:
    return ops.reduce_mean(value, keepdims=0)


def mse(predictions: Var, targets: Var) -> Var:
    """Mean squared error: ``mean((predictions - targets) ** 2)`` over every element."""
    p = _float(predictions, "predictions", "mse")
    t = _float(targets, "targets", "mse")
    _same_shape(p, t, "mse")
    if t.dtype != p.dtype:
        t = ops.cast(t, to=p.dtype)
    error = p - t
    return _mean(error * error)


def cross_entropy(logits: Var, labels: Var) -> Var:
    """Softmax cross-entropy of ``logits`` ``[N, C]``, the mean over the batch.

    ``labels`` are class indices (any integer dtype, ``[N]``, each in ``[0, C)``) or
    class probabilities (float ``[N, C]``). A label outside ``[0, C)`` is an error
    when the graph runs (a negative one is not read from the back, as
    GatherElements would); ``fit`` and ``evaluate`` refuse it before that (see
    :func:`check_targets`).
    """
    x = _float(logits, "logits", "cross_entropy")
    if x.type.rank != 2:
        raise IRError(f"cross_entropy: logits must be [batch, classes], got {x.type}")
    log_p = ops.log_softmax(x, axis=1)
    if labels.dtype.is_int:
        if labels.type.rank != 1:
            raise IRError(f"cross_entropy: integer labels must be [batch], got {labels.type}")
        index = ops.cast(labels, to=DType.INT64)
        classes = x.shape[1]
        if isinstance(classes, int):  # GatherElements would wrap a negative label
            index = ops.where(ops.less(index, np.int64(0)), index - np.int64(classes), index)
        picked = ops.gather_elements(log_p, ops.unsqueeze(index, np.array([1], np.int64)),
                                     axis=1)
        return -_mean(picked)
    if not labels.dtype.is_float:
        raise IRError(f"cross_entropy: labels must be integer class indices or float class "
                      f"probabilities, got {labels.type}")
    probabilities = _float(labels, "labels", "cross_entropy")
    _same_shape(x, probabilities, "cross_entropy")
    if probabilities.dtype != log_p.dtype:
        probabilities = ops.cast(probabilities, to=log_p.dtype)
    per_sample = ops.reduce_sum(probabilities * log_p, np.array([1], np.int64), keepdims=0)
    return -_mean(per_sample)


def check_targets(loss: Loss, predictions: TensorType, targets: np.ndarray,
                  where: str) -> None:
    """Refuse integer class labels outside ``[0, C)`` for :func:`cross_entropy` (``C``:
    the last axis of ``predictions``), naming the first bad label and its sample,
    before a step runs; other losses take any targets."""
    classes = predictions.shape[-1] if predictions.rank else None
    if loss is not cross_entropy or targets.dtype.kind not in "iu" or \
            not isinstance(classes, int):
        return
    bad = np.flatnonzero((targets < 0) | (targets >= classes))
    if bad.size:
        raise TrainingError(f"{where}: label {targets.flat[bad[0]]} of sample {bad[0]} is "
                            f"not a class index in [0, {classes}) ({bad.size} of "
                            f"{targets.size} labels are out of range)")


def binary_cross_entropy(probabilities: Var, targets: Var, epsilon: float = 1e-7) -> Var:
    """``-mean(t log p + (1 - t) log(1 - p))``, with ``p`` clipped to
    ``[epsilon, 1 - epsilon]`` so a saturated prediction stays finite."""
    p = _float(probabilities, "probabilities", "binary_cross_entropy")
    t = _float(targets, "targets", "binary_cross_entropy")
    _same_shape(p, t, "binary_cross_entropy")
    if t.dtype != p.dtype:
        t = ops.cast(t, to=p.dtype)
    dtype = p.dtype.numpy
    clipped = ops.clip(p, np.asarray(epsilon, dtype), np.asarray(1 - epsilon, dtype))
    one = np.asarray(1, dtype)
    terms = t * ops.log(clipped) + (one - t) * ops.log(one - clipped)
    return -_mean(terms)


def binary_cross_entropy_with_logits(logits: Var, targets: Var) -> Var:
    """Binary cross-entropy of ``sigmoid(logits)``, computed stably as
    ``mean(max(x, 0) - x t + log(1 + exp(-|x|)))``."""
    x = _float(logits, "logits", "binary_cross_entropy_with_logits")
    t = _float(targets, "targets", "binary_cross_entropy_with_logits")
    _same_shape(x, t, "binary_cross_entropy_with_logits")
    if t.dtype != x.dtype:
        t = ops.cast(t, to=x.dtype)
    dtype = x.dtype.numpy
    softplus_neg_abs = ops.log(np.asarray(1, dtype) + ops.exp(-ops.abs(x)))
    return _mean(ops.relu(x) - x * t + softplus_neg_abs)


LOSSES: dict[str, Loss] = {
    "mse": mse,
    "cross_entropy": cross_entropy,
    "binary_cross_entropy": binary_cross_entropy,
    "binary_cross_entropy_with_logits": binary_cross_entropy_with_logits,
}
"""Losses by name (``fit(loss="cross_entropy")``)."""


def get_loss(loss: str | Loss) -> Loss:
    """A loss given by name or as a function."""
    if callable(loss):
        return loss
    if not isinstance(loss, str) or loss not in LOSSES:
        raise IRError(f"unknown loss {loss!r} (known: {', '.join(LOSSES)})")
    return LOSSES[loss]
