"""Every disk cache lives under one root: ``$POLYHAL_CACHE_DIR`` or ``~/.cache/polyhal``."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyhal.adapters.cpu import fusion
from polyhal.adapters.neuro import runner
from polyhal.cache import cache_dir
from polyhal.errors import PolyhalError
from polyhal.simulators.fpga import build


def test_the_variable_moves_every_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path))
    assert cache_dir("onnx", create=False) == tmp_path / "onnx"
    assert not (tmp_path / "onnx").exists()
    assert cache_dir("onnx") == tmp_path / "onnx" and (tmp_path / "onnx").is_dir()
    assert fusion.cache_dir() == tmp_path / "cpu-kernels"
    assert runner.cache_root() == tmp_path / "neuro"
    assert build.cache_root() == tmp_path / "fpga"


def test_without_the_variable_caches_live_in_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("POLYHAL_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir("neuro", create=False) == Path(tmp_path) / ".cache" / "polyhal" / "neuro"
    monkeypatch.setenv("POLYHAL_CACHE_DIR", "")  # empty counts as unset
    assert cache_dir("fpga", create=False) == Path(tmp_path) / ".cache" / "polyhal" / "fpga"


def test_a_leading_tilde_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("POLYHAL_CACHE_DIR", "~/caches")
    monkeypatch.chdir(tmp_path)
    assert cache_dir("onnx") == tmp_path / "caches" / "onnx"
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("root", ["afile", "/proc/polyhal-cache"])
def test_a_cache_folder_that_cannot_be_made_names_the_variable(tmp_path, monkeypatch, root):
    if root.startswith("/proc") and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    (tmp_path / "afile").write_text("x")
    root = str(tmp_path / root) if root == "afile" else root
    monkeypatch.setenv("POLYHAL_CACHE_DIR", root)
    with pytest.raises(PolyhalError, match=rf"POLYHAL_CACHE_DIR='{root}': cannot create the "
                                           rf"cache folder {root}/cpu-kernels"):
        fusion.cache_dir()


def test_a_run_on_cpu_with_a_bad_cache_warns_and_goes_on(tmp_path, monkeypatch):
    import numpy as np

    import polyhal
    from polyhal import ops
    from polyhal.ir import GraphBuilder, f32

    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path / "afile"))
    g = GraphBuilder("m")
    x = g.input("x", f32[2])
    g.output(ops.exp(ops.tanh(ops.relu(x) * np.float32(0.8125) + np.float32(0.40625))), name="y")
    graph = g.build()  # constants of its own: a kernel no earlier test compiled
    with pytest.warns(UserWarning, match="the kernel cache cannot be written .*POLYHAL_CACHE_DIR"):
        got = polyhal.compile(graph, device="cpu")(np.ones(2, np.float32))
    np.testing.assert_allclose(got["y"], polyhal.run(graph, np.ones(2, np.float32))["y"],
                               rtol=1e-6)
