"""``fit``: the training loop, and ``evaluate``.

Every step is one graph run on the training device (see
:mod:`polyhal.train.step`); the host shuffles, batches, keeps metrics and
writes checkpoints. Runs are deterministic: the permutation of epoch ``e`` is
``default_rng([seed, e])``'s, so a run resumed from a checkpoint replays the
same batches and, on the same device, ends with bit-identical weights.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from polyhal.errors import CheckpointError, DeviceError, IRError, TrainingError, shown
from polyhal.hal.contract import Device
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.runtime.session import Session
from polyhal.train import checks
from polyhal.train.checkpoint import (
    Checkpoint,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)
from polyhal.train.history import History, Progress
from polyhal.train.losses import Loss, check_targets, get_loss
from polyhal.train.optim import Adam, Optimizer
from polyhal.train.parallel import SessionTrainer
from polyhal.train.precision import compute_dtype
from polyhal.train.resume import check_arrays, resume_point
from polyhal.train.step import Model, Trainer, fallback_for, forward_graph, loss_graph

Batch = tuple[np.ndarray, np.ndarray]
Metric = Callable[[np.ndarray, np.ndarray], float]
_CLASSIFICATION = ("cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits")


@dataclass(frozen=True)
class StepInfo:
    """Passed to each callback after every step."""

    epoch: int
    """0-based."""
    step: int
    """Steps done so far in the whole run."""
    batch: int
    """Batches done so far in this epoch."""
    loss: float
    finite: bool
    checkpointed: bool
    """Whether a checkpoint was written after this step."""


def accuracy(predictions: np.ndarray, targets: np.ndarray, threshold: float = 0.5) -> float:
    """The fraction of correct predictions: ``argmax`` against integer labels, or
    ``predictions > threshold`` against 0/1 targets of the same shape."""
    if np.issubdtype(targets.dtype, np.integer) and predictions.ndim == targets.ndim + 1:
        return float(np.mean(np.argmax(predictions, axis=-1) == targets))
    guessed = predictions.astype(np.float32) > threshold
    return float(np.mean(guessed == (targets.astype(np.float32) > 0.5)))


@dataclass(frozen=True)
class _Metric:
    """A metric function and how an error names it (``'f1' (metrics[1])``)."""

    function: Metric
    label: str

    def __call__(self, predictions: np.ndarray, targets: np.ndarray, where: str) -> float:
        """The metric on one batch, checked to be one real number."""
        return _metric_value(self.function(predictions, targets), self.label, where)


def _metric_value(value: Any, label: str, where: str) -> float:
    """``value`` as a ``float``, when it is one real number (NaN and inf included): a bool,
    an int or a float (numpy's too), or a numeric array of one element."""
    number = value
    if isinstance(number, np.ndarray | np.generic) and number.size == 1 \
            and number.dtype.kind in "biuf":
        number = number.item()  # a bool, int or float
    if isinstance(number, Real | np.bool_):
        try:
            return float(number)
        except OverflowError:
            raise TrainingError(f"{where}: metric {label} returned {shown(value)}, which is "
                                "too large for a float") from None
    raise TrainingError(f"{where}: metric {label} returned {shown(value)}; a metric must "
                        "return one number (a float, an int, a bool or a numeric array of "
                        "one element)")


_HISTORY_KEYS = ("loss", "samples")
"""What the history (and the sums behind it) keep besides the metrics."""


def _metrics(metrics: Sequence[str | Metric] | None, loss: str | Loss
             ) -> dict[str, _Metric]:
    if metrics is None:
        metrics = ["accuracy"] if loss in _CLASSIFICATION else []
    if isinstance(metrics, str) or callable(metrics) or not isinstance(metrics, Sequence):
        raise TrainingError(f"metrics={metrics!r} must be a list of metric names or functions, "
                            f"e.g. metrics=[{metrics!r}]")
    threshold = 0.0 if loss == "binary_cross_entropy_with_logits" else 0.5
    chosen: dict[str, _Metric] = {}
    for index, metric in enumerate(metrics):
        if isinstance(metric, str) and metric == "accuracy":
            name, function = "accuracy", lambda p, t: accuracy(p, t, threshold)
        elif callable(metric):
            name, function = str(getattr(metric, "__name__", "metric")), metric
        else:
            raise TrainingError(f"unknown metric {metric!r} (known: 'accuracy', or a "
                                "function of (predictions, targets))")
        if name in chosen or name in _HISTORY_KEYS:
            taken = chosen[name].label if name in chosen else "the run's own figure"
            raise TrainingError(f"metrics[{index}] is named {name!r}, as {taken} is: the "
                                "history keeps each figure under its name (give a function "
                                "its own name with def)")
        chosen[name] = _Metric(function, f"{name!r} (metrics[{index}])")
    return chosen


def input_dtype(model: Model) -> np.dtype:
    """The dtype float inputs are cast to: that of the model's first float parameter
    (float32 for a model without one)."""
    for param in model.parameters():
        if param.dtype.is_float:
            return np.dtype(param.dtype.numpy)
    return np.dtype(np.float32)


def _has_dtype(dtype: np.dtype) -> bool:
    """Whether polyhal has a dtype for the numpy ``dtype``."""
    try:
        DType.from_numpy(dtype)
    except IRError:
        return False
    return True


def _targets(y: np.ndarray, what: str) -> np.ndarray:
    """``y`` as the graphs take it: unsigned integer labels polyhal has no dtype for
    (uint16, uint32, uint64) become int64; any other dtype it lacks is refused."""
    if _has_dtype(y.dtype):
        return y
    if y.dtype.kind == "u":
        too_large = np.flatnonzero(y > np.iinfo(np.int64).max)
        if too_large.size:
            sample = np.unravel_index(too_large[0], y.shape)[0]
            raise TrainingError(f"{what}: targets: label {y.flat[too_large[0]]} of sample "
                                f"{sample} does not fit int64 ({too_large.size} of {y.size} "
                                f"{y.dtype} labels are too large; labels are taken as int64)")
        return y.astype(np.int64)
    raise TrainingError(f"{what}: targets have dtype {y.dtype}, which polyhal has no dtype "
                        "for (pass integer labels or float targets)")


def _check_arrays(x: Any, y: Any, what: str, dtype: np.dtype) -> Batch:
    try:
        x, y = np.asarray(x), np.asarray(y)
    except (TypeError, ValueError) as exc:
        raise TrainingError(f"{what}: inputs and targets must be arrays: {exc}") from None
    if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
        raise TrainingError(f"{what}: inputs {list(x.shape)} and targets {list(y.shape)} "
                            "must have the same number of samples (first axis)")
    if len(x) == 0:
        raise TrainingError(f"{what}: there are no samples")
    if x.dtype.kind not in "fc" and x.dtype.kind not in "iub":
        raise TrainingError(f"{what}: inputs must be numeric, got {x.dtype}")
    if x.dtype.kind == "f" and x.dtype != dtype:
        x = x.astype(dtype)  # float inputs take the model's dtype
    if not _has_dtype(x.dtype):
        raise TrainingError(f"{what}: inputs have dtype {x.dtype}, which polyhal has no "
                            "dtype for (pass float inputs or int8/uint8/int16/int32/int64 "
                            "ones)")
    return x, _targets(y, what)


class _Data:
    """Batches of arrays (shuffled per epoch) or of a re-iterable of batches."""

    def __init__(self, data: Batch | Iterable[Batch], batch_size: int, shuffle: bool,
                 seed: int, dtype: np.dtype, what: str = "data") -> None:
        self.batch_size, self.shuffle, self.seed, self.what = batch_size, shuffle, seed, what
        self.dtype = dtype
        if isinstance(data, tuple) and len(data) == 2 and not isinstance(data[0], tuple):
            self.arrays: Batch | None = _check_arrays(*data, what, dtype)
            self.source: Iterable[Batch] | None = None
        elif isinstance(data, Iterable):
            self.arrays, self.source = None, data
        else:
            raise TrainingError(f"{what} must be (inputs, targets) arrays or an iterable of "
                                f"(inputs, targets) batches, got {type(data).__name__}")

    @property
    def samples(self) -> int | None:
        return None if self.arrays is None else len(self.arrays[0])

    @property
    def steps(self) -> int | None:
        n = self.samples
        return None if n is None else -(-n // self.batch_size)

    def batches(self, epoch: int) -> Iterable[Batch]:
        if self.arrays is None:
            assert self.source is not None
            for index, batch in enumerate(self.source):
                if not (isinstance(batch, tuple | list) and len(batch) == 2):
                    raise TrainingError(f"{self.what}: batch {index} of epoch {epoch + 1} is "
                                        "not an (inputs, targets) pair")
                yield _check_arrays(*batch, f"{self.what}: batch {index}", self.dtype)
            return
        x, y = self.arrays
        order = (np.random.default_rng([self.seed, epoch]).permutation(len(x))
                 if self.shuffle else np.arange(len(x)))
        for start in range(0, len(x), self.batch_size):
            chosen = order[start:start + self.batch_size]
            yield x[chosen], y[chosen]


def _config(data: _Data, loss: str | Loss, optimizer: Optimizer, precision: str,
            clip_norm: float | None) -> dict[str, Any]:
    """The settings a resumed run must share, as they read back from JSON."""
    name = loss if isinstance(loss, str) else getattr(loss, "__name__", "custom")
    return json.loads(json.dumps({
        "batch_size": data.batch_size, "seed": data.seed, "shuffle": data.shuffle,
        "samples": data.samples, "loss": name, "optimizer": optimizer.config(),
        "precision": precision, "clip_norm": clip_norm}))


class _EpochSums:
    """Running sums for one epoch's metrics (weighted by batch size)."""

    def __init__(self, data: dict[str, float] | None = None) -> None:
        self.sums: dict[str, float] = dict(data or {})

    def add(self, name: str, value: float, weight: int) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + value * weight

    def means(self, names: Iterable[str] = ()) -> dict[str, float]:
        """The mean of each sum; NaN for those of ``names`` that no sample reached (every
        step of the epoch was skipped), so a metric is never silently missing."""
        count = self.sums.get("samples", 0.0) or 1.0
        means = {name: float("nan") for name in names}
        means.update({k: v / count for k, v in self.sums.items() if k != "samples"})
        return means


def evaluate(model: Model, data: Batch | Iterable[Batch], *, loss: str | Loss = "cross_entropy",
             metrics: Sequence[str | Metric] | None = None,
             device: str | Device | Session = "cpu",
             batch_size: int = 256, precision: str = "fp32",
             fallback: str | Device | None = "reference") -> dict[str, float]:
    """The loss and metrics of ``model`` on ``data`` (means over samples), computed on
    ``device`` in ``precision``."""
    import polyhal

    checks.model(model, "evaluate")
    checks.device(device, "device", "evaluate", session=True)
    checks.device(fallback, "fallback", "evaluate", optional=True)
    loss_fn = get_loss(loss)
    chosen = _metrics(metrics, loss)
    compute_dtype(precision)  # an unknown precision fails before any work
    batch_size = checks.count(batch_size, "batch_size", "evaluate", minimum=1)
    batches = _Data(data, batch_size, shuffle=False, seed=0, dtype=input_dtype(model),
                    what="evaluation data")
    if not isinstance(device, Session):
        fallback = fallback_for(device, fallback)
    sums = _EpochSums()
    compiled: dict[tuple[TensorType, TensorType], Any] = {}
    predictions: dict[tuple[TensorType, TensorType], TensorType] = {}
    params = model.state_dict()
    for index, (x, y) in enumerate(batches.batches(0)):
        key = (TensorType.of(x), TensorType.of(y))
        if key not in compiled:
            graph = loss_graph(forward_graph(model, key[0], precision), key[1], loss_fn, False)
            compiled[key] = (device.compile(graph) if isinstance(device, Session) else
                             polyhal.compile(graph, device=device, fallback=fallback))
            predictions[key] = graph.value_type("y")
        check_targets(loss_fn, predictions[key], y, "evaluation data")
        out = compiled[key](x=x, target=y, **params)
        sums.add("samples", 1.0, len(x))
        sums.add("loss", float(out["loss"]), len(x))
        for name, metric in chosen.items():
            sums.add(name, metric(out["y"], y, f"evaluate: batch {index + 1}"), len(x))
    return sums.means(["loss", *chosen])


def fit(model: Model, data: Batch | Iterable[Batch], *, epochs: int = 1, batch_size: int = 32,
        loss: str | Loss = "cross_entropy", optimizer: Optimizer | None = None,
        device: str | Device | Session = "cpu", metrics: Sequence[str | Metric] | None = None,
        validation_data: Batch | Iterable[Batch] | None = None, shuffle: bool = True,
        seed: int = 0, precision: str = "fp32", clip_norm: float | None = None,
        lr_schedule: Callable[[int, int], float] | None = None,
        checkpoint: str | os.PathLike[str] | None = None,
        checkpoint_every: int | str = "epoch", resume: bool = False, progress: bool = True,
        callbacks: Sequence[Callable[[StepInfo], Any]] | None = (),
        fallback: str | Device | None = "reference", max_recoveries: int = 3) -> History:
    """Train ``model`` on ``data`` and return the per-epoch :class:`History`.

    ``data`` is ``(inputs, targets)`` arrays (shuffled each epoch when ``shuffle``)
    or a re-iterable of ``(inputs, targets)`` batches. Every step runs as one graph
    on ``device`` (nodes it lacks fall back to ``fallback``); over a
    :class:`~polyhal.runtime.Session` each batch is split into the session's
    micro-batches (see :mod:`polyhal.train.parallel`). ``optimizer``
    defaults to ``Adam(1e-3)``; ``lr_schedule(step, epoch)`` overrides its learning
    rate per step (a finite number >= 0, at most float32's largest: the rate is a float32
    graph input). ``precision="fp16"|"bf16"`` trains with
    mixed precision (see :mod:`polyhal.train.precision`); ``clip_norm`` clips the
    gradients' global L2 norm (``None`` or ``inf``: no clipping). A step whose loss
    or gradients are not all finite is skipped in every precision (weights and
    optimizer state unchanged, counted in ``History.skipped_steps``); an epoch
    whose steps were all skipped reports NaN metrics. With ``checkpoint`` (a
    file path) a checkpoint is written atomically every ``checkpoint_every``
    steps (or ``"epoch"``) and at the end; ``resume=True`` continues from it when
    it exists (the configuration must match). ``callbacks``, a list of
    functions, are called with a :class:`StepInfo` after every step.

    **Faults.** The state at every checkpoint is also kept in memory (with or
    without a ``checkpoint`` file, from the start of the run on). When a step
    raises ``DeviceError``, training resumes from that state and replays the
    same batches, up to ``max_recoveries`` times in the whole run; each recovery
    is recorded in ``History.recoveries`` with the seconds it took to get back to
    the failed step. A fault after that is a ``TrainingError`` naming the step
    and the error (the ``DeviceError`` is its ``__cause__``).
    """
    epochs = checks.count(epochs, "epochs", "fit")
    every = checkpoint_every
    if every != "epoch" and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise TrainingError(f"fit: checkpoint_every={every!r} must be 'epoch' or a positive "
                            "integer")
    max_recoveries = checks.count(max_recoveries, "max_recoveries", "fit")
    seed = checks.count(seed, "seed", "fit")
    batch_size = checks.count(batch_size, "batch_size", "fit", minimum=1)
    checks.model(model, "fit")
    checks.device(device, "device", "fit", session=True)
    checks.device(fallback, "fallback", "fit", optional=True)
    compute_dtype(precision)  # an unknown precision fails before any work
    clip_norm = checks.clip_norm(clip_norm, "fit")
    if lr_schedule is not None and not callable(lr_schedule):
        raise TrainingError(f"fit: lr_schedule={lr_schedule!r} must be a function "
                            "(step, epoch) -> learning rate")
    callbacks = checks.functions(callbacks, "callbacks", "fit")
    path = None if checkpoint is None else checkpoint_path(checkpoint)
    optimizer = optimizer if optimizer is not None else Adam(1e-3)
    checks.optimizer(optimizer, "fit")
    loss_fn = get_loss(loss)
    chosen = _metrics(metrics, loss)
    batches = _Data(data, batch_size, shuffle, seed, input_dtype(model))
    trainer: Trainer | SessionTrainer = (
        SessionTrainer(model, loss_fn, optimizer, device, precision, clip_norm)
        if isinstance(device, Session) else
        Trainer(model, loss_fn, optimizer, device, precision, clip_norm, fallback))
    config = _config(batches, loss, optimizer, precision, clip_norm)
    history, step, start_epoch, skip, sums = History(), 0, 0, 0, _EpochSums()
    if resume and path is not None and path.exists():
        history, step, start_epoch, skip, sums = _restore(
            load_checkpoint(path), str(path), model, trainer, config)

    def save(epoch: int, batch: int, current: _EpochSums, write: bool) -> Checkpoint:
        arrays = {f"param/{k}": v for k, v in model.state_dict().items()}
        arrays.update({f"state/{k}": v for k, v in trainer.state.items()})
        state = Checkpoint(arrays, {
            "config": config, "step": step, "epoch": epoch, "batch": batch,
            "sums": json.loads(json.dumps(current.sums)), "history": history.to_dict(),
            "scaler": trainer.scaler.state()})
        if write and path is not None:
            save_checkpoint(path, state.arrays, state.meta)
        return state

    snapshot = save(start_epoch, skip, sums, write=False)
    recoveries: list[dict[str, Any]] = []
    restores = 0  # in the whole run, so a step that always fails ends the run
    failed: tuple[int, float, str] | None = None  # the step that faulted, when, why
    position = "the start"  # what ran when a fault came, for the error that gives up
    bar = Progress(epochs, batches.steps, progress)
    while True:
        try:
            for epoch in range(start_epoch, epochs):
                bar.begin_epoch()
                done = 0
                for x, y in batches.batches(epoch):
                    done += 1
                    if done <= skip:
                        continue  # replayed up to the checkpoint
                    position = f"step {step + 1} (epoch {epoch + 1}, batch {done})"
                    lr = (optimizer.lr if lr_schedule is None else
                          checks.scheduled_lr(lr_schedule(step, epoch), step, epoch))
                    result = trainer.step(x, y, lr)
                    step += 1
                    if failed is not None and step > failed[0]:
                        recoveries.append({"step": failed[0] + 1, "error": failed[2],
                                           "seconds": time.perf_counter() - failed[1]})
                        failed = None
                    if result.finite:
                        sums.add("samples", 1.0, len(x))
                        sums.add("loss", result.loss, len(x))
                        for name, metric in chosen.items():
                            sums.add(name, metric(result.predictions, y, f"fit: {position}"),
                                    len(x))
                    else:
                        history.skipped_steps += 1
                    bar.update(epoch, done, result.loss)
                    written = every != "epoch" and step % int(every) == 0
                    if written:
                        snapshot = save(epoch, done, sums, write=True)
                    for callback in callbacks:
                        callback(StepInfo(epoch, step, done, result.loss, result.finite,
                                          written and path is not None))
                if done == 0 and skip == 0:
                    raise TrainingError(f"epoch {epoch + 1} had no batches (a one-shot "
                                        "iterator cannot be trained on for several epochs)")
                skip = 0
                summary = sums.means(["loss", *chosen])
                if validation_data is not None:
                    position = f"the validation after epoch {epoch + 1}"
                    validation = evaluate(model, validation_data, loss=loss, metrics=metrics,
                                          device=device, precision=precision,
                                          fallback=fallback)
                    summary.update({f"val_{k}": v for k, v in validation.items()})
                history.epochs.append(summary)
                bar.end_epoch(epoch, summary)
                sums = _EpochSums()
                if every == "epoch" or epoch == epochs - 1:
                    snapshot = save(epoch + 1, 0, sums, write=True)
            break
        except DeviceError as exc:
            error = " ".join(str(exc).split())[:300]
            if restores >= max_recoveries:
                raise TrainingError(f"fit: {position} failed with {type(exc).__name__}: "
                                    f"{error} (gave up after {restores} recoveries, "
                                    f"max_recoveries={max_recoveries})") from exc
            restores += 1
            if failed is None:
                failed = (step, time.perf_counter(), error)
            history, step, start_epoch, skip, sums = _restore(snapshot, "the last snapshot",
                                                              model, trainer, config)
    history.recoveries = recoveries
    return history


def _restore(saved: Checkpoint, where: str, model: Model, trainer: Trainer | SessionTrainer,
             config: dict[str, Any]) -> tuple[History, int, int, int, _EpochSums]:
    meta = saved.meta
    written = meta.get("config")
    if not isinstance(written, dict):
        raise CheckpointError(f"checkpoint {where}: config: expected an object")
    differing = sorted(k for k in set(config) | set(written) if config.get(k) != written.get(k))
    if differing:
        raise CheckpointError(f"checkpoint {where} was written by a run with other settings: "
                              + "; ".join(f"{k}: checkpoint {written.get(k)!r}, now "
                                          f"{config.get(k)!r}" for k in differing))
    point = resume_point(meta, where, trainer.scaler.state())
    params = {k[len("param/"):]: v for k, v in saved.arrays.items() if k.startswith("param/")}
    state = {k[len("state/"):]: v for k, v in saved.arrays.items() if k.startswith("state/")}
    # everything is checked before anything is loaded
    check_arrays(params, model.state_dict(), "the parameters do not fit the model", where)
    check_arrays(state, trainer.state, "the optimizer state does not fit the optimizer", where)
    model.load_state_dict(params)
    trainer.state = dict(state)
    for key, value in point.scaler.items():
        setattr(trainer.scaler, key, value)
    return point.history, point.step, point.epoch, point.batch, _EpochSums(point.sums)
