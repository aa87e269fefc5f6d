"""Kill-and-resume: a run killed (SIGKILL) after a checkpoint and resumed in a new
process ends with weights identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np

SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    import numpy as np
    from polyhal import nn, train

    checkpoint, weights, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    x, y = train.spirals(400, seed=0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2)).initialize(seed=3)

    def kill(info):
        if info.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    history = train.fit(model, (x, y), epochs=3, batch_size=32, device="cpu",
                        optimizer=train.AdamW(5e-3), checkpoint=checkpoint,
                        checkpoint_every=7, resume=True, progress=False,
                        callbacks=[kill] if kill_at else [])
    np.savez(weights, **model.state_dict())
    with open(weights + ".json", "w") as stream:
        json.dump(history.to_dict(), stream)
""")


def _run(tmp_path, name, kill_at):
    script = tmp_path / "train_run.py"
    script.write_text(SCRIPT)
    checkpoint = tmp_path / f"{name}.ckpt"
    weights = tmp_path / f"{name}.npz"
    result = subprocess.run([sys.executable, str(script), str(checkpoint), str(weights),
                             str(kill_at)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONHASHSEED": "0"})
    return result, checkpoint, weights


def test_a_killed_run_resumes_to_identical_weights(tmp_path):
    done, _, straight = _run(tmp_path, "straight", kill_at=0)
    assert done.returncode == 0, done.stderr

    killed, checkpoint, resumed = _run(tmp_path, "resumed", kill_at=17)  # 13 steps per epoch
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert checkpoint.exists() and not resumed.exists()
    from polyhal.train import load_checkpoint

    saved = load_checkpoint(checkpoint).meta
    assert (saved["step"], saved["epoch"], saved["batch"]) == (14, 1, 1)  # mid-epoch

    again, _, _ = _run(tmp_path, "resumed", kill_at=0)
    assert again.returncode == 0, again.stderr
    with np.load(straight) as a, np.load(resumed) as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            assert np.array_equal(a[name], b[name]), name
    history_a = json.loads((tmp_path / "straight.npz.json").read_text())
    history_b = json.loads((tmp_path / "resumed.npz.json").read_text())
    assert history_a == history_b and len(history_a["epochs"]) == 3
