"""Training over a Session: faults do not change the weights, and a step that fails
entirely resumes from the last snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import nn, train
from polyhal.errors import TrainingError
from polyhal.runtime import Session


def _model():
    return nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2)).initialize(seed=0)


@pytest.fixture(scope="module")
def data():
    return train.spirals(96, seed=0)


def _devices(**faults):
    return [(f"faulty:{i}", {"inner": "reference", "seed": i, **faults}) for i in range(3)]


def _plain(index):
    return f"faulty:{index}", {"inner": "reference"}


def _train(devices, data, epochs=2, **options):
    model = _model()
    session_options = {k: options.pop(k) for k in ("max_attempts", "fallback")
                       if k in options}
    with Session(devices, micro_batch=8, timeout=30, probe_interval=0.01,
                 **session_options) as session:
        history = train.fit(model, data, epochs=epochs, batch_size=32, device=session,
                            optimizer=train.Adam(1e-2), progress=False, **options)
        stats = session.stats
    return model.state_dict(), history, stats


@pytest.fixture(scope="module")
def fault_free(data):
    return _train(_devices(), data)


def test_weights_after_faults_are_identical_to_a_fault_free_run(data, fault_free):
    """Acceptance: the gradients are reduced over fixed micro-batches in a fixed order,
    so errors, crashes and corrupted transfers the session recovers from change
    nothing."""
    weights, history, stats = _train(
        _devices(error_rate=0.15, crash_rate=0.02, corrupt_rate=0.05, checksum=True,
                 error_at=[1]), data)
    clean_weights, clean_history, _ = fault_free
    assert stats.faults >= 1 and stats.retries == stats.faults
    for name, value in clean_weights.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)
    assert history["loss"] == clean_history["loss"]


def test_a_step_that_fails_resumes_from_the_last_snapshot(data, fault_free, tmp_path):
    # One attempt per micro-batch and no fallback: a fault fails the whole step.
    devices = [("faulty:0", {"inner": "reference", "error_at": [2, 5]}), _plain(1), _plain(2)]
    weights, history, stats = _train(devices, data, epochs=2,
                                     max_attempts=1, fallback=None, checkpoint_every=2,
                                     checkpoint=tmp_path / "run.ckpt", max_recoveries=100)
    assert stats.failed >= 1 and history.recoveries
    assert all(r["seconds"] > 0 and "injected fault" in r["error"] for r in history.recoveries)
    for name, value in fault_free[0].items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)


def test_session_training_matches_single_device_training(data, fault_free):
    model = _model()
    train.fit(model, data, epochs=2, batch_size=32, device="reference",
              optimizer=train.Adam(1e-2), progress=False, fallback=None)
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(fault_free[0][name], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_over_a_session_tracks_single_device_training(data, precision):
    weights, history, _ = _train(_devices(error_at=[1]), data, precision=precision)
    model = _model()
    reference = train.fit(model, data, epochs=2, batch_size=32, device="reference",
                          optimizer=train.Adam(1e-2), progress=False, fallback=None,
                          precision=precision)
    np.testing.assert_allclose(history["loss"], reference["loss"], rtol=2e-2)
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(weights[name], value, rtol=5e-2, atol=5e-3, err_msg=name)


def test_training_over_a_session_refuses_what_it_cannot_do(data):
    with Session(_devices()[:1], micro_batch=8, timeout=30) as session, \
            pytest.raises(TrainingError, match="precision='fp8'"):
        train.fit(_model(), data, device=session, precision="fp8", progress=False)
    with Session(_devices()[:1], micro_batch=None, timeout=30) as session, \
            pytest.raises(TrainingError, match="micro_batch"):
        train.fit(_model(), data, device=session, progress=False)
