"""fit on real devices: spirals to >= 97 % in float32 and within a point in
fp16/bf16, cpu against the reference, loss scaling, clipping, schedules,
callbacks and the errors a user meets."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import nn, train
from polyhal.errors import CheckpointError, TrainingError

SPIRAL_EPOCHS = 60


def _mlp(seed=0, hidden=64):
    return nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 2)).initialize(seed=seed)


@pytest.fixture(scope="module")
def spirals():
    return train.spirals(2000, seed=0), train.spirals(1000, seed=1)


@pytest.fixture(scope="module")
def spiral_accuracy(spirals):
    """Test accuracy of the same MLP trained with fit on cpu in each precision."""
    (x, y), (x_test, y_test) = spirals
    results = {}
    for precision in ("fp32", "fp16", "bf16"):
        model = _mlp()
        history = train.fit(model, (x, y), epochs=SPIRAL_EPOCHS, batch_size=64,
                            optimizer=train.Adam(1e-2), device="cpu", precision=precision,
                            progress=False, fallback=None)
        assert len(history.epochs) == SPIRAL_EPOCHS
        results[precision] = train.evaluate(model, (x_test, y_test), device="cpu",
                                            precision=precision, fallback=None)["accuracy"]
    return results


def test_spirals_reach_97_percent_in_float32(spiral_accuracy):
    assert spiral_accuracy["fp32"] >= 0.97, spiral_accuracy


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_spirals_within_one_point(spiral_accuracy, precision):
    assert spiral_accuracy[precision] >= spiral_accuracy["fp32"] - 0.01, spiral_accuracy


def test_cpu_training_matches_the_reference(spirals):
    (x, y), _ = spirals
    weights = {}
    for device in ("cpu", "reference"):
        model = _mlp(hidden=16)
        train.fit(model, (x[:256], y[:256]), epochs=2, batch_size=64, device=device,
                  optimizer=train.SGD(0.1, momentum=0.9), progress=False, fallback=None)
        weights[device] = model.state_dict()
    for name, value in weights["reference"].items():
        np.testing.assert_allclose(weights["cpu"][name], value, rtol=1e-4, atol=1e-5)


def test_history_has_training_and_validation_metrics(spirals, capsys):
    (x, y), (x_test, y_test) = spirals
    history = train.fit(_mlp(hidden=8), (x[:128], y[:128]), epochs=2, batch_size=32,
                        validation_data=(x_test[:64], y_test[:64]), progress=True)
    assert len(history.epochs) == 2
    assert set(history.last) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert len(history["loss"]) == 2 and history.skipped_steps == 0
    printed = capsys.readouterr().err
    assert "epoch 2/2" in printed and "val_accuracy" in printed


def test_an_iterable_of_batches_and_a_schedule_and_callbacks(spirals):
    (x, y), _ = spirals
    batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 96, 32)]
    seen, rates = [], []

    def schedule(step, epoch):
        rates.append((step, epoch))
        return 0.01 / (1 + step)

    train.fit(_mlp(hidden=8), batches, epochs=2, lr_schedule=schedule,
              callbacks=[lambda info: seen.append((info.epoch, info.step, info.batch))],
              progress=False)
    assert seen == [(0, 1, 1), (0, 2, 2), (0, 3, 3), (1, 4, 1), (1, 5, 2), (1, 6, 3)]
    assert rates[0] == (0, 0) and rates[-1] == (5, 1)


def test_clipping_bounds_the_update(spirals):
    (x, y), _ = spirals
    model = _mlp(hidden=8)
    before = model.state_dict()
    train.fit(model, (x[:32], y[:32]), epochs=1, batch_size=32, optimizer=train.SGD(1.0),
              clip_norm=1e-3, progress=False)
    after = model.state_dict()
    change = np.sqrt(sum(np.sum((after[n] - before[n]) ** 2) for n in before))
    assert 0 < change <= 1e-3 * (1 + 1e-4)


def test_an_overflowing_fp16_step_is_skipped_and_the_scale_backs_off(spirals):
    (x, y), _ = spirals
    model = _mlp(hidden=8)
    trainer = train.Trainer(model, train.cross_entropy, train.Adam(1e-2), device="cpu",
                            precision="fp16")
    trainer.scaler.scale = 2.0 ** 60  # float16 gradients overflow at this scale
    before, state_before = model.state_dict(), dict(trainer.state)
    result = trainer.step(x[:32], y[:32], lr=1e-2)
    assert not result.finite
    assert trainer.scaler.scale == 2.0 ** 59 and trainer.scaler.skipped == 1
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])
    for name, value in trainer.state.items():
        np.testing.assert_array_equal(value, state_before[name])
    trainer.scaler.scale = 1024.0
    assert trainer.step(x[:32], y[:32], lr=1e-2).finite


def test_the_scale_grows_after_a_run_of_finite_steps():
    scaler = train.LossScaler(scale=8.0, growth_interval=3)
    for _ in range(3):
        scaler.update(True)
    assert scaler.scale == 16.0
    scaler.update(False)
    assert scaler.scale == 8.0 and scaler.good_steps == 0
    fixed = train.LossScaler.for_precision("bf16")
    fixed.update(False)
    assert fixed.scale == 1.0 and fixed.skipped == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"data": (np.zeros((4, 2)), np.zeros(3, np.int64))}, "same number of samples"),
    ({"data": (np.zeros((0, 2)), np.zeros(0, np.int64))}, "no samples"),
    ({"data": 42}, "must be \\(inputs, targets\\) arrays"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"epochs": -1}, "epochs=-1"),
    ({"metrics": ["f1"]}, "unknown metric 'f1'"),
    ({"precision": "fp8"}, "precision='fp8'"),
    ({"checkpoint_every": 0}, "checkpoint_every=0"),
    ({"data": iter([(np.zeros((2, 2), np.float32), np.zeros(2, np.int64))]), "epochs": 2},
     "epoch 2 had no batches"),
    ({"data": [(np.zeros((2, 2), np.float32),)]}, "batch 0 of epoch 1"),
])
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"data": (np.zeros((4, 2), np.float32), np.zeros(4, np.int64)), **kwargs}
    data = arguments.pop("data")
    with pytest.raises(TrainingError, match=message):
        train.fit(_mlp(hidden=4), data, progress=False, **arguments)


TAMPERED = {
    "a counter that is not a count": (lambda meta, arrays: meta.update(step="12"),
                                       r"step: expected an integer >= 0, got '12'"),
    "a missing field": (lambda meta, arrays: meta.pop("batch"),
                        r"batch: expected an integer >= 0, got None"),
    "sums that are not numbers": (lambda meta, arrays: meta["sums"].update(loss="high"),
                                  r"sums: expected an object of numbers"),
    "a loss scaler with another field": (lambda meta, arrays: meta["scaler"].update(x=1),
                                         r"scaler: expected the loss scaler's fields"),
    "a loss scaler value of another type": (
        lambda meta, arrays: meta["scaler"].update(dynamic=1),
        r"scaler: expected the loss scaler's fields"),
    "history of the wrong shape": (lambda meta, arrays: meta.update(history="long"),
                                   r"history: expected an object"),
    "history epochs that are not metrics": (
        lambda meta, arrays: meta["history"].update(epochs=[{"loss": "low"}]),
        r"history: epochs: expected a list of \{metric: number\}"),
    "config that is not an object": (lambda meta, arrays: meta.update(config=[1]),
                                     r"config: expected an object"),
    "parameters of another dtype": (
        lambda meta, arrays: arrays.update({"param/0.bias": np.zeros(4, np.float64)}),
        r"the parameters do not fit the model: '0.bias' is float64\[4\], expected "
        r"float32\[4\]"),
    "optimizer state of another shape": (
        lambda meta, arrays: arrays.update({"state/m/0.weight": np.zeros((3, 2, 4), np.float32)}),
        r"the optimizer state does not fit the optimizer: 'm/0.weight' is "
        r"float32\[3, 2, 4\], expected float32\[2, 4\]"),
    "optimizer state of another dtype": (
        lambda meta, arrays: arrays.update({"state/step": np.zeros((), np.float64)}),
        r"the optimizer state does not fit the optimizer: 'step' is float64\[\]"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_checkpoint_is_refused_naming_the_field(tmp_path, spirals, case):
    (x, y), _ = spirals
    path = tmp_path / "run.ckpt"
    train.fit(_mlp(hidden=4), (x[:64], y[:64]), epochs=1, checkpoint=path, progress=False)
    saved = train.load_checkpoint(path)
    meta = {k: v for k, v in saved.meta.items() if k not in ("format", "version")}
    arrays = dict(saved.arrays)
    tamper, message = TAMPERED[case]
    tamper(meta, arrays)
    train.save_checkpoint(path, arrays, meta)
    model = _mlp(hidden=4)
    before = {k: v.copy() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=message):
        train.fit(model, (x[:64], y[:64]), epochs=2, checkpoint=path, resume=True,
                  progress=False)
    for name, value in model.state_dict().items():  # refused before anything was loaded
        np.testing.assert_array_equal(value, before[name])


def test_resuming_with_other_settings_is_refused(tmp_path, spirals):
    (x, y), _ = spirals
    path = tmp_path / "run.ckpt"
    train.fit(_mlp(hidden=4), (x[:64], y[:64]), epochs=1, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match="batch_size: checkpoint 32, now 16"):
        train.fit(_mlp(hidden=4), (x[:64], y[:64]), epochs=2, batch_size=16, checkpoint=path,
                  resume=True, progress=False)
    with pytest.raises(CheckpointError, match="parameters do not fit"):
        train.fit(_mlp(hidden=8), (x[:64], y[:64]), epochs=2, checkpoint=path, resume=True,
                  progress=False)
