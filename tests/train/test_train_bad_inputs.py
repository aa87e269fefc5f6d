"""Malformed arguments and data found by fuzzing the training API: each is a PolyhalError
naming what is wrong and where, raised before the weights or any file are touched, never a
bare TypeError, OverflowError or OSError from deep inside, nor silently wrong weights."""

from __future__ import annotations

import os
import re
import socket
import stat

import numpy as np
import pytest

from polyhal import nn, train
from polyhal.errors import CheckpointError, IRError, TrainingError
from polyhal.runtime import Session
from polyhal.train.parallel import SessionTrainer

X, Y = train.spirals(16, seed=0)


def _model():
    return nn.Sequential(nn.Linear(2, 2)).initialize(seed=0)


def _fit(model, data=(X, Y), **options):
    return train.fit(model, data, **{"device": "reference", "progress": False, **options})


def _evaluate(model, data=(X, Y), **options):
    return train.evaluate(model, data, **{"device": "reference", **options})


def _unchanged(model, before):
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


# ------------------------------------------------------------ precision, device, fallback


@pytest.mark.parametrize("run", [_fit, _evaluate])
@pytest.mark.parametrize("precision", [["fp16"], {"fp16": 1}, None, 16, "fp8"])
def test_a_precision_that_is_not_one_of_the_names_is_refused(run, precision):
    model = _model()
    before = model.state_dict()
    shown = repr(precision).replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(TrainingError, match=rf"precision={shown} must be one of the names "
                       r"'fp32', 'fp16', 'bf16'"):
        run(model, precision=precision)
    _unchanged(model, before)


DEVICES = "a device address such as 'cpu' or 'gpu:1', a Device"


@pytest.mark.parametrize(("where", "options", "message"), [
    ("fit", {"fallback": ["cpu"]}, rf"fit: fallback=\['cpu'\] must be {DEVICES} or None"),
    ("fit", {"fallback": 3}, rf"fit: fallback=3 must be {DEVICES} or None"),
    ("fit", {"device": ["cpu"]}, rf"fit: device=\['cpu'\] must be {DEVICES} or a Session"),
    ("fit", {"device": None}, rf"fit: device=None must be {DEVICES} or a Session"),
    ("evaluate", {"fallback": ["cpu"]},
     rf"evaluate: fallback=\['cpu'\] must be {DEVICES} or None"),
    ("evaluate", {"device": ("cpu",)}, rf"evaluate: device=\('cpu',\) must be {DEVICES}"),
    ("Trainer", {"fallback": ["cpu"]}, rf"Trainer: fallback=\['cpu'\] must be {DEVICES} "
                                       r"or None"),
    ("Trainer", {"device": ["cpu"]},
     r"Trainer: device=\['cpu'\] must be a device address such as 'cpu' or 'gpu:1' or a "
     r"Device$"),
])
def test_a_device_or_fallback_that_is_not_a_device_is_refused(where, options, message):
    model = _model()
    before = model.state_dict()
    with pytest.raises(TrainingError, match=message):
        if where == "Trainer":
            train.Trainer(model, train.cross_entropy, train.SGD(0.1),
                          **{"device": "reference", **options})
        else:
            (_fit if where == "fit" else _evaluate)(model, **options)
    _unchanged(model, before)


# ------------------------------------------------------------ checkpoint paths


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    return tmp_path / "pipe", r"is a named pipe \(FIFO\), not a regular file; name a " \
                              r"regular file"


def _link_to_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", tmp_path / "link")
    return tmp_path / "link", r"is a symbolic link to a named pipe \(FIFO\), not a regular file"


def _dangling_link(tmp_path):
    os.symlink(tmp_path / "nothing", tmp_path / "link")
    return tmp_path / "link", r"is a symbolic link and it points to nothing"


def _link_loop(tmp_path):
    os.symlink(tmp_path / "link", tmp_path / "link")
    return tmp_path / "link", r"is a symbolic link and cannot follow it: Too many levels"


def _socket(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a relative name: AF_UNIX paths are short
    try:
        server.bind("sock")
    finally:
        os.chdir(cwd)
    server.close()  # the socket file stays
    return tmp_path / "sock", r"is a socket, not a regular file"


def _nul(tmp_path):
    return str(tmp_path / "run\0.ckpt"), r"'.*run\\x00\.ckpt': a path cannot hold a NUL byte"


def _long_name(tmp_path):
    return tmp_path / ("a" * 300), r"a{300}: cannot use this path \(File name too long\)"


BAD_PATHS = {"fifo": _fifo, "symlink to a fifo": _link_to_fifo,
             "dangling symlink": _dangling_link, "symlink loop": _link_loop,
             "socket": _socket, "NUL byte": _nul,
             "name too long": _long_name}


@pytest.mark.parametrize("how", ["fit", "save_checkpoint"])
@pytest.mark.parametrize("case", sorted(BAD_PATHS))
def test_a_checkpoint_path_that_is_not_a_regular_file_is_refused_and_left_alone(
        tmp_path, case, how):
    path, message = BAD_PATHS[case](tmp_path)
    before = {p.name: os.lstat(p) for p in tmp_path.iterdir()}
    model = _model()
    weights = model.state_dict()
    with pytest.raises(CheckpointError, match=r"checkpoint .*" + message):
        if how == "fit":
            _fit(model, checkpoint=path)
        else:
            train.save_checkpoint(path, {"a": np.ones(2)}, {"step": 1})
    _unchanged(model, weights)
    after = {p.name: os.lstat(p) for p in tmp_path.iterdir()}
    assert set(after) == set(before)  # nothing written, nothing left behind
    for name, info in before.items():
        assert stat.S_IFMT(after[name].st_mode) == stat.S_IFMT(info.st_mode)
        assert after[name].st_ino == info.st_ino  # the same file, not a replacement
    if (tmp_path / "pipe").exists():
        assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)


def test_a_symlink_to_a_regular_file_is_still_a_checkpoint_path(tmp_path):
    (tmp_path / "real.ckpt").write_bytes(b"")
    os.symlink(tmp_path / "real.ckpt", tmp_path / "link.ckpt")
    _fit(_model(), checkpoint=tmp_path / "link.ckpt")
    assert train.load_checkpoint(tmp_path / "link.ckpt").meta["step"] == 1


# ------------------------------------------------------------ learning rates


@pytest.mark.parametrize("make", [
    lambda: train.SGD(10 ** 400),
    lambda: train.Adam(10 ** 400),
    lambda: train.AdamW(-10 ** 400),
    lambda: train.SGD(0.1, momentum=10 ** 400),
    lambda: train.Adam(1e-3, weight_decay=10 ** 400),
])
def test_an_optimizer_argument_too_large_for_a_float_is_named(make):
    with pytest.raises(IRError, match=r"optimizer argument \w+=-?1000.*\.\.\. \(int\) is too "
                       "large: it must be a finite number"):
        make()


@pytest.mark.parametrize("optimizer", [
    train.SGD(0.1, weight_decay=1e39), train.Adam(1e-3, weight_decay=1e39),
    train.AdamW(1e-3, eps=1e39)])
def test_a_hyperparameter_infinite_in_the_parameters_dtype_is_refused(optimizer):
    model = _model()
    before = model.state_dict()
    with pytest.raises(IRError, match=r"optimizer argument (weight_decay|eps)=1e\+39 is too "
                       r"large for parameter '0\.(weight|bias)': it is float32, where 1e\+39 is "
                       "infinite"):
        _fit(model, optimizer=optimizer)
    _unchanged(model, before)


def test_a_hyperparameter_finite_in_the_parameters_dtype_is_taken():
    x, y = train.spirals(16, seed=0)
    model = nn.Sequential(nn.Linear(2, 2, dtype="float64")).initialize(seed=0)
    _fit(model, (x.astype(np.float64), y), optimizer=train.SGD(1e-45, weight_decay=1e39))
    assert all(np.isfinite(v).all() for v in model.state_dict().values())


def _set_lr(value):
    optimizer = train.SGD(0.1)
    optimizer.lr = value
    return optimizer


@pytest.mark.parametrize(("source", "value"), [
    ("optimizer", 1e39), ("optimizer", 10 ** 400), ("attribute", 1e39),
    ("schedule", 1e39), ("schedule", 10 ** 400), ("schedule", np.float64(1e39)),
    ("Trainer.step", 1e39), ("SessionTrainer.step", 1e39)])
def test_a_learning_rate_that_is_infinite_in_float32_is_refused(source, value):
    model = _model()
    before = model.state_dict()
    shown = "1000.*" if isinstance(value, int) else r"(np\.float64\()?1e\+39\)?"
    limit = r"3\.4028235e\+38"
    if source == "optimizer":
        message = rf"optimizer argument lr={shown} (must be <= {limit}|is too large)"
        with pytest.raises(IRError, match=message):
            train.SGD(value)
        return
    if source == "attribute":
        message = rf"fit: optimizer SGD has lr={shown}; it must be a finite number >= 0 and " \
                  rf"<= {limit}"
        with pytest.raises(TrainingError, match=message):
            _fit(model, optimizer=_set_lr(value))
    elif source == "schedule":
        message = rf"fit: lr_schedule\(1, 0\) returned {shown} for step 2 \(epoch 1\); it " \
                  rf"must return a finite number >= 0 and <= {limit}"
        with pytest.raises(TrainingError, match=message):
            _fit(model, batch_size=8, shuffle=False, optimizer=train.SGD(0.1),
                 lr_schedule=lambda step, epoch: 0.1 if step == 0 else value)
        assert all(np.isfinite(v).all() for v in model.state_dict().values())
        return
    elif source == "Trainer.step":
        trainer = train.Trainer(model, train.cross_entropy, train.SGD(0.1), "reference")
        with pytest.raises(TrainingError, match=rf"Trainer.step: lr={shown} must be"):
            trainer.step(X, Y, value)
    else:
        with Session(["reference"], micro_batch=8) as session:
            trainer = SessionTrainer(model, train.cross_entropy, train.SGD(0.1), session)
            with pytest.raises(TrainingError, match=rf"SessionTrainer.step: lr={shown} must "):
                trainer.step(X, Y, value)
    _unchanged(model, before)


def test_the_largest_float32_learning_rate_is_accepted():
    assert train.SGD(float(np.finfo(np.float32).max)).lr == float(np.finfo(np.float32).max)


# ------------------------------------------------------------ metrics


def high(predictions, targets):
    return "high"


def several(predictions, targets):
    return np.array([0.5, 0.25])


def loss(predictions, targets):
    return 0.0


@pytest.mark.parametrize("run", [_fit, _evaluate])
@pytest.mark.parametrize(("metrics", "problem"), [
    ([lambda p, t: 1.0, lambda p, t: 2.0], "metrics[1] is named '<lambda>', as '<lambda>' "
                                           "(metrics[0]) is"),
    (["accuracy", "accuracy"], "metrics[1] is named 'accuracy', as 'accuracy' (metrics[0]) is"),
    ([loss], "metrics[0] is named 'loss', as the run's own figure is"),
], ids=["two-lambdas", "accuracy-twice", "loss"])
def test_two_metrics_of_one_name_are_refused(run, metrics, problem):
    """The history keeps each figure under its name: a second metric of the same name (two
    lambdas, say), or one named as the loss, overwrote the first in silence."""
    with pytest.raises(TrainingError, match=re.escape(problem)):
        run(_model(), metrics=metrics)


@pytest.mark.parametrize("run", [_fit, _evaluate])
@pytest.mark.parametrize(("metric", "shown"), [
    (high, "'high'"),
    (several, r"array\(\[0\.5 *, 0\.25\]\)"),
    (lambda p, t: None, "None"),
    (lambda p, t: [0.5], r"\[0\.5\]"),
    (lambda p, t: 1j, "1j"),
    (lambda p, t: np.array(["a"]), r"array\(\['a'\], dtype='<U1'\)"),
    (lambda p, t: 10 ** 400, "1000.*"),
])
def test_a_metric_that_does_not_return_one_number_is_named(run, metric, shown):
    name = metric.__name__
    where = "fit: step 1 \\(epoch 1, batch 1\\)" if run is _fit else "evaluate: batch 1"
    with pytest.raises(TrainingError, match=rf"{where}: metric '{name}' \(metrics\[1\]\) "
                       rf"returned {shown}"):
        run(_model(), metrics=["accuracy", metric])


def test_a_metric_may_return_numpy_numbers_and_one_element_arrays():
    values = {"f32": np.float32(0.25), "one": np.array([0.5]), "zero_d": np.array(2),
              "flag": np.True_, "integer": 3, "nan": float("nan")}
    metrics = []
    for name, value in values.items():
        def metric(predictions, targets, value=value):
            return value
        metric.__name__ = name
        metrics.append(metric)
    history = _fit(_model(), metrics=metrics, epochs=2)
    for name, value in values.items():
        assert all(type(v) is float for v in history[name])
        np.testing.assert_array_equal(history[name], [float(np.asarray(value).item())] * 2)


# ------------------------------------------------------------ targets and inputs


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_wide_unsigned_labels_train_and_evaluate_like_int64_labels(dtype):
    unsigned, signed = _model(), _model()
    _fit(unsigned, (X, Y.astype(dtype)), epochs=2)
    _fit(signed, (X, Y.astype(np.int64)), epochs=2)
    for name, value in signed.state_dict().items():
        np.testing.assert_array_equal(unsigned.state_dict()[name], value)
    assert _evaluate(unsigned, (X, Y.astype(dtype))) == _evaluate(signed, (X, Y))
    batches = [(X[:8], Y[:8].astype(dtype)), (X[8:], Y[8:].astype(dtype))]
    assert len(_fit(_model(), batches).epochs) == 1  # batches from an iterable too


@pytest.mark.parametrize(("run", "what"), [(_fit, "data"), (_evaluate, "evaluation data")])
@pytest.mark.parametrize(("targets", "message"), [
    (np.where(np.arange(16) == 5, 2 ** 63, Y).astype(np.uint64),
     r"targets: label 9223372036854775808 of sample 5 does not fit int64 \(1 of 16 uint64 "
     r"labels are too large"),
    (np.array(list("ab" * 8)), r"targets have dtype <U1, which polyhal has no dtype for"),
    (Y.astype(np.complex64), r"targets have dtype complex64, which polyhal has no dtype for"),
])
def test_targets_polyhal_cannot_take_are_named(run, what, targets, message):
    model = _model()
    before = model.state_dict()
    with pytest.raises(TrainingError, match=rf"^{what}: {message}"):
        run(model, (X, targets))
    _unchanged(model, before)


def test_inputs_polyhal_cannot_take_are_named():
    with pytest.raises(TrainingError, match=r"^data: inputs have dtype uint16, which polyhal "
                       r"has no dtype for"):
        _fit(_model(), (X.astype(np.uint16), Y))
