"""examples/npu_adapter: installed with pip, it passes every case it claims, and its
2:4 sparse MatMul really runs from the compressed weights its cycle model counts."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from polyhal import hal, ops
from polyhal.conformance import run_suite
from polyhal.errors import UnsupportedError
from polyhal.ir import GraphBuilder, TensorType, f32
from polyhal.ir.dtypes import DType
from polyhal.passes import prune_2_4
from tests.fresh_venv import fresh_venv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "npu_adapter"


@pytest.fixture(scope="module")
def npu():
    """The example's package, imported from its folder and registered in-process."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        import polyhal_npu

        hal.register(polyhal_npu.NpuAdapter)
        yield polyhal_npu
    finally:
        hal.unregister("npu")
        sys.path.remove(str(EXAMPLE))
        for name in [m for m in sys.modules if m.split(".")[0] == "polyhal_npu"]:
            del sys.modules[name]


def test_installs_with_pip_and_passes_its_claimed_cases(polyhal_wheel, tmp_path):
    # without this machine's packages; onnx for the onnx level
    venv = fresh_venv(tmp_path / "venv", polyhal_wheel, extras="onnx")
    venv.pip_install(EXAMPLE)  # not editable: the installed package is what runs
    devices = venv.run(["polyhal", "devices"], tmp_path).stdout
    assert re.search(r"│ npu\s+│ 0\.1\.0\s+│ npu:0 ", devices), devices
    result = venv.run(["polyhal", "conformance", "npu", "--profile", "ci", "--quiet",
                       "--report", str(tmp_path / "report")], tmp_path, timeout=900)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(r"npu: PASS \(\d+ passed, 0 failed, 0 crashed, 0 timeout, 0 xfail", out)
    for level in ("L0", "L1", "L2", "L4-quant", "L4-sparse", "L5", "onnx"):
        assert re.search(rf"  {level}: (\d+) cases run, \1 passed \(100\.0%\)", out), level
    assert re.search(r"L4-sparse: 14 cases run", out)  # 7 per claimed float dtype


def _sparse_mlp(dtype: DType = DType.FLOAT32):
    rng = np.random.default_rng(0)
    g = GraphBuilder("mlp")
    x = g.input("x", TensorType(dtype, ("batch", 64)))
    w1 = g.constant(rng.standard_normal((64, 32)).astype(dtype.numpy), name="w1")
    w2 = g.constant(rng.standard_normal((32, 16)).astype(dtype.numpy), name="w2")
    g.output(ops.relu(x @ w1) @ w2, name="y")
    return g.build()


def _run(device, graph, x):
    exe = device.compile(graph, hal.CompileOptions())
    out = device.download(exe.run([device.upload(x)])[0])
    return exe, out


@pytest.mark.parametrize("dtype", [DType.FLOAT32, DType.FLOAT16])
def test_pruned_weights_run_compressed_at_half_the_macs(npu, dtype):
    dense, pruned = _sparse_mlp(dtype), prune_2_4(_sparse_mlp(dtype))
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(dtype.numpy)
    with hal.open_device("npu") as device:
        dense_exe, _ = _run(device, dense, x)
        sparse_exe, out = _run(device, pruned, x)
    assert sorted(sparse_exe.inner.sparse_weights) == ["w1", "w2"]
    assert not dense_exe.inner.sparse_weights
    # the dense weights are not kept on the device: only their compressed form
    assert not {"w1", "w2"} & set(sparse_exe.inner.constants)
    from polyhal.reference import run as reference_run

    expected = reference_run(pruned, x)["y"]
    tolerance = 1e-2 if dtype is DType.FLOAT16 else 1e-5
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32),
                               rtol=tolerance, atol=tolerance)
    d, s = dense_exe.profile().counters, sparse_exe.profile().counters
    dense_macs = 8 * 64 * 32 + 8 * 32 * 16
    assert d["macs"] == dense_macs and d["sparse_macs"] == 0
    assert s["macs"] == s["sparse_macs"] == dense_macs / 2 == s["skipped_macs"]
    assert s["cycles"] < d["cycles"] and s["bytes"] < d["bytes"]
    assert s["modelled_s"] == s["cycles"] / 1e9
    assert set(sparse_exe.profile().nodes) == {n.name for n in pruned.nodes}


def test_int8_matmul_counts_int8_rate_and_wraps(npu):
    g = GraphBuilder("imm")
    a = g.input("a", TensorType(DType.INT8, (2, 3)))
    b = g.input("b", TensorType(DType.INT8, (3, 4)))
    g.output(g.op("MatMulInteger", a, b), name="y")
    graph = g.build()
    av = np.full((2, 3), -128, np.int8)
    bv = np.full((3, 4), -128, np.int8)
    with hal.open_device("npu", macs_per_cycle={"int8": 1, "float16": 1, "float32": 1},
                         launch_cycles=0, bytes_per_cycle=10**6) as device:
        exe = device.compile(graph, hal.CompileOptions())
        out = device.download(exe.run([device.upload(av), device.upload(bv)])[0])
    np.testing.assert_array_equal(out, np.full((2, 4), 3 * 128 * 128, np.int32))
    assert exe.profile().counters["cycles"] == 2 * 3 * 4  # one MAC per cycle, configured


def test_non_finite_inputs_keep_dense_semantics(npu):
    """inf * 0 is NaN in a MatMul: the sparse path must not skip the pruned zeros then."""
    graph = prune_2_4(_sparse_mlp())
    x = np.zeros((1, 64), np.float32)
    x[0, 0] = np.inf
    from polyhal.reference import run as reference_run

    with hal.open_device("npu") as device:
        exe, out = _run(device, graph, x)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(reference_run(graph, x)["y"]))
    assert exe.profile().counters["sparse_macs"] < 8 * 64 * 32 / 2  # the first layer ran dense


def test_a_wrong_sparse_kernel_fails_l4_sparse(npu, monkeypatch):
    """The level can fail: a kernel that ignores the stored positions is caught."""
    from polyhal_npu import kernels

    def first_two(x, weight):  # as if every group kept rows 0 and 1
        r = np.arange(weight.values.shape[-2])
        rows = r // 2 * 4 + r % 2
        return np.einsum("...k,kn->...n", x[..., rows], weight.values).astype(x.dtype)

    monkeypatch.setattr(kernels, "sparse_matmul", first_two)
    report = run_suite("npu", levels=["L4-sparse"], profile="ci", isolate=False)
    failed = {c.id for c in report.cases if c.outcome == "failed"}
    assert "L4-sparse/MatMul/float32/16x64x24" in failed
    assert "L4-sparse/MatMul/float32/all-zero" not in failed  # zeros are zeros either way


def test_bad_open_options_and_unclaimed_nodes_are_refused(npu):
    with pytest.raises(UnsupportedError, match=r"unknown option\(s\) clock"):
        hal.open_device("npu", clock=1)
    g = GraphBuilder("t")
    x = g.input("x", f32[2])
    g.output(ops.tanh(x), name="y")
    with hal.open_device("npu") as device, pytest.raises(
            UnsupportedError, match=r"npu cannot run: tanh_1: core\.Tanh is not claimed"):
        device.compile(g.build(), hal.CompileOptions())
