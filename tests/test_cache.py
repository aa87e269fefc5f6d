"""Every disk cache lives under one root: ``$POLYHAL_CACHE_DIR`` or ``~/.cache/polyhal``."""

from __future__ import annotations

from pathlib import Path

from polyhal.adapters.cpu import fusion
from polyhal.adapters.neuro import runner
from polyhal.cache import cache_dir
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
