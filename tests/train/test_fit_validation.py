"""What fit does with bad arguments, bad data and faults it cannot recover from:
a PolyhalError naming the argument (or step) and what is wrong, never a bare
Python exception, a hang or silently corrupted weights."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import nn, train
from polyhal.errors import (
    CheckpointError,
    DeviceError,
    ExecutionError,
    IRError,
    TrainingError,
)
from polyhal.hal import open_device
from polyhal.ir import GraphBuilder, TensorType
from polyhal.reference import run

X, Y = train.spirals(32, seed=0)


def _model():
    return nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2)).initialize(seed=0)


def _fit(model=None, data=(X, Y), **options):
    options = {"batch_size": 16, "progress": False, "device": "cpu", **options}
    return train.fit(_model() if model is None else model, data, **options)


def _finite(model):
    return all(np.isfinite(v).all() for v in model.state_dict().values())


# ------------------------------------------------------------------- faults


@pytest.fixture()
def always_failing():
    """A device whose first 20 runs raise DeviceError (far more than max_recoveries), so
    without a bounded recovery budget fit would retry step 1 until run 21 succeeded."""
    device = open_device("faulty:0", inner="reference", error_at=list(range(20)))
    yield device
    device.close()


def test_a_step_that_keeps_failing_ends_in_a_training_error(always_failing):
    with pytest.raises(TrainingError, match=r"fit: step 1 \(epoch 1, batch 1\) failed with "
                       r"DeviceError: faulty:0: injected fault .*gave up after 3 recoveries, "
                       r"max_recoveries=3") as caught:
        _fit(device=always_failing, fallback=None, max_recoveries=3)
    assert isinstance(caught.value.__cause__, DeviceError)


def test_with_no_recoveries_allowed_the_first_fault_ends_the_run(always_failing):
    with pytest.raises(TrainingError, match=r"step 1 .*gave up after 0 recoveries, "
                       r"max_recoveries=0"):
        _fit(device=always_failing, fallback=None, max_recoveries=0)


# ------------------------------------------------------------ non-finite steps


def test_a_nan_sample_skips_its_step_in_float32_and_the_weights_stay_finite():
    x = X.copy()
    x[3] = np.nan  # in the first batch of every epoch (no shuffling)
    model = _model()
    history = _fit(model, (x, Y), epochs=2, shuffle=False)
    assert history.skipped_steps == 2 and _finite(model)
    assert len(history["loss"]) == 2 and all(np.isfinite(history["loss"]))


def test_a_skipped_float32_step_leaves_weights_and_optimizer_state_unchanged():
    model = _model()
    trainer = train.Trainer(model, train.cross_entropy, train.Adam(1e-2))
    before, state = model.state_dict(), dict(trainer.state)
    x = X[:16].copy()
    x[0] = np.inf
    assert not trainer.step(x, Y[:16], lr=1e-2).finite
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])
    for name, value in trainer.state.items():
        np.testing.assert_array_equal(value, state[name])


def test_an_epoch_whose_steps_were_all_skipped_reports_nan_metrics():
    model = _model()
    history = _fit(model, (np.full_like(X, np.nan), Y), epochs=2)
    assert history.skipped_steps == 4 and _finite(model)
    assert [set(e) for e in history.epochs] == [{"loss", "accuracy"}] * 2
    assert all(np.isnan(history["loss"])) and all(np.isnan(history["accuracy"]))


# ------------------------------------------------------------ learning rates


@pytest.mark.parametrize("value", [float("nan"), -1.0, None, "fast", np.inf])
def test_a_bad_learning_rate_from_the_schedule_is_named(value):
    model = _model()
    before = model.state_dict()
    with pytest.raises(TrainingError, match=rf"lr_schedule\(1, 0\) returned "
                       rf"{repr(value).replace('(', '.')} for step 2 \(epoch 1\); it must "
                       r"return a finite number >= 0"):
        _fit(model, lr_schedule=lambda step, epoch: 0.1 if step == 0 else value)
    assert _finite(model) and any((model.state_dict()[k] != v).any() for k, v in before.items())


def test_a_schedule_may_return_numpy_numbers():
    history = _fit(lr_schedule=lambda step, epoch: np.float32(0.01))
    assert len(history.epochs) == 1


def test_a_schedule_that_is_not_a_function_is_refused():
    with pytest.raises(TrainingError, match=r"lr_schedule=0.1 must be a function"):
        _fit(lr_schedule=0.1)


# ------------------------------------------------------------ devices


def test_fit_and_evaluate_on_the_reference_device_with_the_default_fallback():
    model = _model()
    history = train.fit(model, (X, Y), device="reference", progress=False)
    assert len(history.epochs) == 1
    assert set(train.evaluate(model, (X, Y), device="reference")) == {"loss", "accuracy"}


# ------------------------------------------------------------ arguments


class _FloatLoss:
    __name__ = "float_loss"

    def __call__(self, predictions, targets):
        return 1.0


BAD_FIT_ARGUMENTS = {
    "seed a string": ({"seed": "x"}, TrainingError, r"fit: seed='x' must be a non-negative "
                      r"integer"),
    "seed negative": ({"seed": -1}, TrainingError, r"fit: seed=-1 must be"),
    "seed a float": ({"seed": 1.5}, TrainingError, r"fit: seed=1.5 must be"),
    "seed None": ({"seed": None}, TrainingError, r"fit: seed=None must be"),
    "clip_norm a string": ({"clip_norm": "x"}, TrainingError,
                           r"fit: clip_norm='x' must be a number > 0"),
    "clip_norm NaN": ({"clip_norm": float("nan")}, TrainingError, r"clip_norm=nan must be"),
    "optimizer a string": ({"optimizer": "adam"}, TrainingError,
                           r"fit: optimizer='adam' must be an optimizer such as train.Adam"),
    "optimizer a class": ({"optimizer": train.Adam}, TrainingError,
                          r"fit: optimizer=Adam is the class; pass an instance"),
    "model a string": ({"model": "abc"}, TrainingError,
                       r"fit: model='abc' is not a model: it has no graph"),
    "callbacks a function": ({"callbacks": print}, TrainingError,
                             r"fit: callbacks=.* must be a list of functions"),
    "callbacks not functions": ({"callbacks": [1]}, TrainingError,
                                r"fit: callbacks=\[1\] must be a list of functions"),
    "checkpoint a number": ({"checkpoint": 5}, CheckpointError,
                            r"checkpoint=5 must be a file path"),
    "metrics a string": ({"metrics": "accuracy"}, TrainingError,
                         r"metrics='accuracy' must be a list of metric names or functions"),
    "loss returns a float": ({"loss": _FloatLoss()}, IRError,
                             r"the loss function returned float 1.0; it must return a scalar "
                             r"built with polyhal.ops"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIT_ARGUMENTS))
def test_bad_fit_arguments_are_named(case):
    options, error, message = BAD_FIT_ARGUMENTS[case]
    with pytest.raises(error, match=message):
        _fit(**options)


def test_a_checkpoint_that_is_a_directory_is_refused_before_training(tmp_path):
    model = _model()
    before = model.state_dict()
    with pytest.raises(CheckpointError, match=rf"checkpoint {tmp_path} is a directory; name "
                       r"a file in it"):
        _fit(model, checkpoint=tmp_path)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


def test_no_callbacks_and_infinite_clip_norm_mean_none():
    unclipped, clipped = _model(), _model()
    _fit(unclipped, optimizer=train.SGD(0.5))
    _fit(clipped, optimizer=train.SGD(0.5), clip_norm=float("inf"),
         callbacks=None)
    for name, value in unclipped.state_dict().items():
        np.testing.assert_array_equal(clipped.state_dict()[name], value)


@pytest.mark.parametrize("betas", [0.9, None, (0.9,)])
def test_adam_betas_that_are_not_two_numbers_are_named(betas):
    with pytest.raises(IRError, match=rf"betas={betas!r} must be two numbers".replace(
            "(", r"\(").replace(")", r"\)")):
        train.Adam(1e-3, betas=betas)


# ------------------------------------------------------------ class labels


@pytest.mark.parametrize("label", [-1, -2, 2, 7])
def test_a_label_outside_the_classes_is_refused_by_fit_and_evaluate(label):
    labels = Y.copy()
    labels[5] = label
    model = _model()
    before = model.state_dict()
    message = rf"label {label} of sample 5 is not a class index in \[0, 2\)"
    with pytest.raises(TrainingError, match="training data: " + message):
        _fit(model, (X, labels), shuffle=False)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])
    with pytest.raises(TrainingError, match="evaluation data: " + message):
        train.evaluate(model, (X, labels))


def test_a_negative_label_is_not_read_from_the_back_by_the_loss_graph():
    g = GraphBuilder("loss")
    logits = np.array([[0.0, 5.0], [1.0, 0.0]], np.float32)
    p = g.input("p", TensorType.of(logits))
    t = g.input("t", TensorType.of(np.zeros(2, np.int64)))
    g.output(train.cross_entropy(p, t), name="loss")
    graph = g.build()
    run(graph, p=logits, t=np.array([1, 0], np.int64))  # in range: runs
    with pytest.raises(ExecutionError, match="out of range"):
        run(graph, p=logits, t=np.array([-1, 0], np.int64))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
def test_narrow_integer_labels_train_like_int64_labels(dtype):
    narrow, wide = _model(), _model()
    _fit(narrow, (X, Y.astype(dtype)))
    _fit(wide, (X, Y))
    for name, value in wide.state_dict().items():
        np.testing.assert_allclose(narrow.state_dict()[name], value, rtol=1e-6, atol=1e-7)


def test_labels_that_are_neither_integers_nor_floats_are_named():
    with pytest.raises(IRError, match=r"labels must be integer class indices or float class "
                       r"probabilities, got bool\[16\]"):
        _fit(data=(X, Y > 0))
