"""The command line: outputs shown in the docs, ``run``, and errors on bad input."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyhal
import polyhal.interop.loading
from polyhal import ops
from polyhal.ir import GraphBuilder, f32

ROOT = Path(__file__).resolve().parents[1]


def polyhal_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyhal.cli", *args], capture_output=True,
                          text=True, cwd=cwd, check=False)


def _doc_block_after(doc: str, marker: str) -> str:
    text = (ROOT / "docs" / doc).read_text()
    start = text.index(marker)
    block = re.search(r"```text\n(.*?)```", text[start:], re.S)
    assert block is not None
    return block.group(1)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@pytest.mark.parametrize(("command", "marker"), [
    (("devices",), "`polyhal devices` lists"),
    (("check-adapter", "template"), "`polyhal check-adapter NAME` prints"),
])
def test_outputs_shown_in_docs_are_current(command, marker):
    result = polyhal_cli(*command, "--width", "100")
    assert result.returncode == 0, result.stderr
    assert _lines(result.stdout) == _lines(_doc_block_after("hal.md", marker))


def test_run_a_model_with_inputs_and_outputs(tmp_path):
    g = GraphBuilder("m")
    x = g.input("x", f32["n", 2])
    g.output(ops.tanh(ops.relu(x)), name="y")
    polyhal.save(g.build(), tmp_path / "m.json")
    np.save(tmp_path / "x.npy", np.array([[-1, 2]], np.float32))
    result = polyhal_cli("run", str(tmp_path / "m.json"), "--device", "template", "--fallback",
                         "reference", "--input", f"x={tmp_path / 'x.npy'}", "--output",
                         str(tmp_path / "out"), "--show-placement")
    assert result.returncode == 0, result.stderr
    assert "y: float32[1, 2]" in result.stdout
    assert "1 fallbacks" in result.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), [[0, np.tanh(2)]],
                               rtol=1e-6)


def test_run_a_nir_network(tmp_path):
    import nir

    lif = nir.LIF(tau=np.full(2, 2e-3), r=np.ones(2), v_leak=np.zeros(2),
                  v_threshold=np.full(2, 0.5))
    nir.write(tmp_path / "lif.nir", nir.NIRGraph.from_list(lif))
    x = np.random.default_rng(0).uniform(0, 2, (20, 1, 2))
    np.save(tmp_path / "x.npy", x)
    result = polyhal_cli("run", str(tmp_path / "lif.nir"), "--dt", "1e-3", "--method", "exact",
                         "--reset", "subtract", "--input", f"input={tmp_path / 'x.npy'}",
                         "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    graph = polyhal.interop.loading.load_model(tmp_path / "lif.nir", dt=1e-3, method="exact",
                                               reset="subtract")
    expected = polyhal.run(graph, x)["output"]
    assert expected.sum() > 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output.npy"), expected)
    result = polyhal_cli("run", str(tmp_path / "lif.nir"))
    assert result.returncode == 2 and "pass dt" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("run", "missing.json"), "cannot read model file"),
    (("run", "model.pb"), "unknown model format '.pb'"),
    (("run", "missing.onnx"), "cannot read model file"),
    (("run", "{model}", "--input", "x"), "expected NAME=FILE.npy"),
    (("run", "{model}", "--input", "x=nope.npy"), "nope.npy: cannot read --input x (No such file"),
    (("run", "{model}", "--input", "x={pickle}"), "cannot read"),
    (("run", "{model}", "--input", "x={model}"), "is not a .npy file"),
    (("run", "{model}", "--input", "x={x}", "--input", "x={x}"), "--input x: given twice"),
    (("run", "{model}", "--input", "x={x}", "--output", "{model}"), "exists and is not a folder"),
    (("run", "{model}", "--input", "x={x}", "--output", "{model}/out"),
     "cannot create the folder"),
    (("run", "{model}", "--device", "warp-drive"), "no adapter named 'warp-drive'"),
    (("run", "{model}", "--device", "Bad:Address"), "bad device address"),
    (("run", "{model}"), "missing input(s) x"),
    (("check-adapter", "warp-drive"), "no adapter named 'warp-drive'"),
    (("conformance", "reference", "--level", "L9"), "unknown level(s) L9"),
    (("conformance", "warp-drive"), "no adapter named 'warp-drive'"),
    (("conformance", "reference", "--report", "{model}"), "exists and is not a folder"),
    (("ops", "--domain", "nope"), "--domain 'nope': no such op domain (domains: core,"),
    (("new-adapter", "Not_Valid"), "adapter name 'Not_Valid' is not valid"),
    (("new-adapter", "reference"), "'reference' is already installed"),
    (("new-adapter", "fresh", "--dir", "{model}"), "is not a folder"),
    (("gen-docs", "--check", "--hal", "missing.md"), "--hal missing.md: no such file"),
])
def test_bad_input_is_a_clear_error(tmp_path, args, message):
    g = GraphBuilder("m")
    g.output(ops.relu(g.input("x", f32[2])))
    polyhal.save(g.build(), tmp_path / "model.json")
    np.save(tmp_path / "obj.npy", np.array([object()], dtype=object), allow_pickle=True)
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    args = [a.format(model=tmp_path / "model.json", pickle=tmp_path / "obj.npy",
                     x=tmp_path / "x.npy") for a in args]
    model = (tmp_path / "model.json").read_bytes()
    result = polyhal_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # refused before any work (no progress bar, no outputs)
    assert (tmp_path / "model.json").read_bytes() == model


def test_outputs_whose_names_make_the_same_file_name_are_all_saved(tmp_path):
    g = GraphBuilder("m")
    x = g.input("x", f32[2])
    for name, value in (("a/b", x), ("a_b", ops.neg(x)), ("A_B", ops.abs(x)), ("..", ops.exp(x))):
        g.output(value, name=name)
    polyhal.save(g.build(), tmp_path / "m.json")
    np.save(tmp_path / "x.npy", np.array([-1, 2], np.float32))
    result = polyhal_cli("run", str(tmp_path / "m.json"), "--input", f"x={tmp_path / 'x.npy'}",
                         "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["A_B-3.npy", "a_b-2.npy", "a_b.npy",
                                                     "output.npy"]
    assert f"a/b: float32[2] -> {out / 'a_b.npy'}" in result.stdout
    np.testing.assert_array_equal(np.load(out / "a_b.npy"), [-1, 2])
    np.testing.assert_array_equal(np.load(out / "a_b-2.npy"), [1, -2])
    np.testing.assert_array_equal(np.load(out / "A_B-3.npy"), [1, 2])


def test_help_everywhere():
    for command in ("ops", "gen-docs", "devices", "check-adapter", "conformance", "new-adapter",
                    "run"):
        result = polyhal_cli(command, "--help")
        assert result.returncode == 0 and "usage: polyhal" in result.stdout


@pytest.mark.parametrize("command", [["ops"], ["gen-docs", "--check", "--out",
                                                  str(ROOT / "docs" / "ops.md"), "--hal",
                                                  str(ROOT / "docs" / "hal.md")]])
def test_a_closed_pipe_ends_the_command_quietly(command):
    """`polyhal ops | head -1`: no traceback when the reader has gone away."""
    process = subprocess.Popen([sys.executable, "-m", "polyhal.cli", *command],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone before the first write
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    assert stderr == ""
