"""Every disk cache lives under one root: ``$POLYHAL_CACHE_DIR`` or ``~/.cache/polyhal``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import polyhal
from polyhal import cache, ops
from polyhal.adapters.cpu import fusion
from polyhal.adapters.neuro import runner
from polyhal.cache import cache_dir, writable_cache_dir
from polyhal.conformance.snn_networks import neuron
from polyhal.errors import PolyhalError
from polyhal.hal import open_device
from polyhal.ir import DType, GraphBuilder, TensorType, f32
from polyhal.reference import run
from polyhal.simulators.fpga import build


def test_the_variable_moves_every_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path))
    assert cache_dir("onnx", create=False) == tmp_path / "onnx"
    assert not (tmp_path / "onnx").exists()
    assert cache_dir("onnx") == tmp_path / "onnx" and (tmp_path / "onnx").is_dir()
    assert fusion.cache_dir() == tmp_path / "cpu-kernels"
    assert runner.cache_root() == tmp_path / "neuro"
    assert runner.cython_cache_root() == tmp_path / "neuro-cython"
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


@pytest.fixture
def no_private_folders(monkeypatch):
    """No component has fallen back yet in this process (each warns once, on falling back)."""
    monkeypatch.setattr(cache, "_private", {})


def _cache_in_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``POLYHAL_CACHE_DIR`` naming a regular file: no folder can be made under it (for
    root too, whom a read-only folder does not stop)."""
    root = tmp_path / "afile"
    root.write_text("x")
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(root))
    return root


def _fallback_warning(who: str, root: Path, component: str) -> str:
    return (rf"{who}: the cache folder {re.escape(str(root / component))} cannot be written "
            rf"\(Not a directory; it is POLYHAL_CACHE_DIR='{re.escape(str(root))}'\); "
            r"building for this process only, in .*polyhal-cache-" + component)


def test_a_writable_cache_is_used_without_a_warning(tmp_path, monkeypatch, no_private_folders):
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert writable_cache_dir("neuro", "neuro") == tmp_path / "neuro"
    assert (tmp_path / "neuro").is_dir() and list((tmp_path / "neuro").iterdir()) == []


def test_a_cache_that_cannot_be_made_falls_back_once_per_component(tmp_path, monkeypatch,
                                                                   no_private_folders):
    root = _cache_in_a_file(tmp_path, monkeypatch)
    with pytest.warns(UserWarning, match=_fallback_warning("neuro", root, "neuro")) as caught:
        folder = writable_cache_dir("neuro", "neuro")
    assert len(caught) == 1 and str(folder) in str(caught[0].message)
    (folder / "probe").write_text("x")  # writable
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same folder, no second warning
        assert writable_cache_dir("neuro", "neuro") == folder
    with pytest.warns(UserWarning, match=_fallback_warning("fpga", root, "fpga")):
        assert writable_cache_dir("fpga", "fpga") not in (folder, root / "fpga")


def test_an_existing_folder_no_one_may_write_falls_back(monkeypatch, no_private_folders):
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc here")
    monkeypatch.setenv("POLYHAL_CACHE_DIR", "/proc/self")  # its fd folder takes no files
    with pytest.warns(UserWarning, match=r"test: the cache folder /proc/self/fd cannot be "
                                         r"written \("):
        folder = writable_cache_dir("fd", "test")
    assert folder.is_dir() and not str(folder).startswith("/proc")


def test_the_private_folder_is_removed_at_exit(tmp_path):
    (tmp_path / "afile").write_text("x")
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from polyhal.cache import writable_cache_dir\n"
            "folder = writable_cache_dir('neuro', 'neuro')\n"
            "(folder / 'project').mkdir()\n"
            "print(folder)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "POLYHAL_CACHE_DIR": str(tmp_path / "afile")},
                            timeout=120, check=True)
    folder = Path(result.stdout.strip())
    assert folder.name.startswith("polyhal-cache-neuro-") and not folder.exists()


def test_a_run_on_cpu_with_a_bad_cache_warns_and_goes_on(tmp_path, monkeypatch,
                                                         no_private_folders):
    root = _cache_in_a_file(tmp_path, monkeypatch)
    g = GraphBuilder("m")
    x = g.input("x", f32[2])
    g.output(ops.exp(ops.tanh(ops.relu(x) * np.float32(0.8125) + np.float32(0.40625))), name="y")
    graph = g.build()  # constants of its own: a kernel no earlier test compiled
    with pytest.warns(UserWarning, match=_fallback_warning("cpu", root, "cpu-kernels")):
        got = polyhal.compile(graph, device="cpu")(np.ones(2, np.float32))
    np.testing.assert_allclose(got["y"], polyhal.run(graph, np.ones(2, np.float32))["y"],
                               rtol=1e-6)


def test_a_standalone_neuro_run_with_a_bad_cache_warns_and_goes_on(tmp_path, monkeypatch,
                                                                   no_private_folders):
    root = _cache_in_a_file(tmp_path, monkeypatch)
    rng = np.random.default_rng(41)  # a network of its own: no runner of it is kept yet
    g = GraphBuilder("lif")
    x = g.input("x", TensorType(DType.FLOAT64, (12, 2, 3)))
    g.output(*neuron("LIF", x, rng, DType.FLOAT64, 3, "exact", "v_reset", 2))
    graph = g.build()
    data = rng.normal(0.5, 1, (12, 2, 3))
    compiled = polyhal.compile(graph, device=open_device("neuro", target="cpp_standalone"))
    # brian2's import sends warnings to its log: imported before pytest.warns is entered,
    # the warnings inside are recorded
    import brian2  # noqa: F401
    with pytest.warns(UserWarning, match=_fallback_warning("neuro", root, "neuro")):
        got = compiled(data)  # the project is built on the first call
    for value, want in zip(got.values(), run(graph, data).values(), strict=True):
        np.testing.assert_allclose(value, want, rtol=1e-6, atol=1e-9)
    (binary,) = cache._private["neuro"].glob("standalone-*/main")  # built in the fallback
    assert binary.is_file()


def test_an_fpga_run_with_a_bad_cache_warns_and_goes_on(tmp_path, monkeypatch,
                                                        no_private_folders):
    root = _cache_in_a_file(tmp_path, monkeypatch)
    a = np.arange(-3, 3, dtype=np.int8).reshape(2, 3)
    b = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    g = GraphBuilder("mmi")
    g.output(g.op("MatMulInteger", g.input("a", TensorType.of(a)),
                  g.input("b", TensorType.of(b))), name="y")
    graph = g.build()
    tiny = {"ROWS": 4, "COLS": 4, "WORD_BYTES": 32, "A_WORDS": 4, "B_WORDS": 4,
            "C_WORDS": 8, "Q_WORDS": 2, "P_WORDS": 2}
    with (pytest.warns(UserWarning, match=_fallback_warning("fpga", root, "fpga")),
          open_device("fpga", simulator="icarus", parameters=tiny) as device):
        got = polyhal.compile(graph, device=device)(a, b)
    np.testing.assert_array_equal(got["y"], run(graph, a, b)["y"])
    fallback = cache._private["fpga"]  # the build went there
    assert [p.parent.name.split("-")[:2] for p in fallback.glob("*/polyhal_build.json")] == \
        [["icarus", "polyhal_fpga_sim"]]
