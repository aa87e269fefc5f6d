"""The GPU adapters: gpu-sim conformance, precision modes, isolation, PTX for a real GPU,
bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.adapters.gpu import GpuAdapter, GpuSimAdapter, gpu_capabilities
from polyhal.conformance import run_suite
from polyhal.conformance.tolerances import compare, precision_tolerance
from polyhal.errors import DeviceError, ExecutionError, UnsupportedError
from polyhal.hal import CompileOptions, open_device
from polyhal.hal.isolation import IsolatedDevice
from polyhal.ir import GraphBuilder, f32, i64
from polyhal.simulators.gpu import SIMULATOR_ENV


@pytest.fixture(scope="module")
def sim():
    device = open_device("gpu-sim")
    yield device
    device.close()


def _run(device, graph, *arrays, precision="fp32"):
    executable = device.compile(graph, CompileOptions(precision=precision))
    outputs = executable.run([device.upload(a) for a in arrays])
    return [device.download(b) for b in outputs]


def test_gpu_sim_passes_l0_to_l2_with_an_empty_manifest():
    report = run_suite("gpu-sim", levels=["L0", "L1", "L2"], profile="ci")
    bad = [(c.id, c.outcome, c.message) for c in report.cases if c.outcome != "passed"]
    assert report.ok and not bad, bad[:10]
    assert report.summary["xfail"] == 0
    by_level = {lv: sum(c.level == lv for c in report.cases) for lv in ("L0", "L1", "L2")}
    assert by_level["L1"] > 1000 and by_level["L2"] >= 12, by_level
    models = {c.id.split("/")[1] for c in report.cases if c.level == "L2"}
    assert {"mlp", "cnn", "attention"} <= models


def test_gpu_sim_always_runs_in_a_worker_with_the_simulator(sim):
    assert isinstance(sim.inner, IsolatedDevice)
    assert GpuSimAdapter.worker_env == {SIMULATOR_ENV: "1"}
    assert SIMULATOR_ENV not in os.environ  # the caller's numba keeps its real target
    assert sim.capabilities == gpu_capabilities()


def _matmul_graph(k: int):
    g = GraphBuilder("matmul")
    a = g.input("a", f32[16, k])
    b = g.input("b", f32[k, 8])
    g.output(ops.relu(a @ b) + 0.5, name="y")
    return g.build()


def test_precision_modes_are_applied_and_stay_within_their_tolerances(sim):
    rng = np.random.default_rng(3)
    k = 64
    a = rng.uniform(-1, 1, (16, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, 8)).astype(np.float32)
    exact = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0) + 0.5
    graph = _matmul_graph(k)
    errors = {}
    for mode in ("fp32", "tf32", "fp16", "bf16"):
        (y,) = _run(sim, graph, a, b, precision=mode)
        assert y.dtype == np.float32 and y.shape == (16, 8)
        comparison = compare(y.astype(np.float64), exact, precision_tolerance("core.MatMul",
                                                                             mode))
        assert comparison.ok, (mode, comparison.message)
        errors[mode] = comparison.max_abs_err
    # each reduced mode really reduces precision, by about its unit roundoff
    assert errors["fp32"] < 1e-5
    for mode, at_least in (("tf32", 1e-4), ("fp16", 1e-4), ("bf16", 1e-3)):
        assert errors[mode] > at_least and errors[mode] > 20 * errors["fp32"], errors
    assert errors["bf16"] > 2 * errors["fp16"], errors


def test_tf32_rounds_only_the_matmul_operands(sim):
    g = GraphBuilder("scale")
    x = g.input("x", f32[8])
    g.output(x * 1.0009765625, name="y")  # 1 + 2^-10: representable in TF32
    x = (1 + np.arange(8, dtype=np.float32) * 2.0 ** -20).astype(np.float32)
    (fp32,) = _run(sim, g.build(), x)
    (tf32,) = _run(sim, g.build(), x, precision="tf32")
    np.testing.assert_array_equal(fp32, tf32)  # no MatMul: nothing rounded
    assert len(np.unique(tf32)) == 8


def test_tf32_leaves_float64_matmuls_exact(sim):
    g = GraphBuilder("f64")
    a = g.input("a", polyhal.ir.f64[4, 8])
    g.output(a @ np.full((8, 3), 1 + 2.0 ** -30), name="y")
    a = np.random.default_rng(1).normal(size=(4, 8))
    (fp32,) = _run(sim, g.build(), a)
    (tf32,) = _run(sim, g.build(), a, precision="tf32")
    np.testing.assert_array_equal(fp32, tf32)


def test_bfloat16_and_float16_graphs_round_once_per_stored_value(sim):
    import ml_dtypes

    g = GraphBuilder("half")
    x = g.input("x", polyhal.ir.bf16[5])
    g.output(ops.exp(x) * x, name="y")
    data = np.array([-1.5, 0.0, 0.33, 2.0, np.inf], ml_dtypes.bfloat16)
    (y,) = _run(sim, g.build(), data)
    expected = polyhal.run(g.build(), x=data)["y"]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), expected.astype(np.float32))


def test_gather_out_of_range_is_an_execution_error_naming_the_node(sim):
    g = GraphBuilder("gather")
    data = g.input("data", f32[4, 3])
    idx = g.input("idx", i64[2])
    g.output(ops.gather(data, idx, axis=0), name="y")
    graph = g.build()
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    (ok,) = _run(sim, graph, table, np.array([-1, 2]))
    np.testing.assert_array_equal(ok, table[[3, 2]])
    with pytest.raises(ExecutionError, match=r"Gather.*index 4 is out of range for axis 0"):
        _run(sim, graph, table, np.array([0, 4]))


def test_bad_options_and_unclaimed_ops_are_refused(sim):
    with pytest.raises(UnsupportedError, match="precision 'fp8' is not offered"):
        sim.compile(_matmul_graph(4), CompileOptions(precision="fp8"))
    g = GraphBuilder("unclaimed")
    x = g.input("x", f32[3])
    g.output(ops.sign(x), name="y")
    with pytest.raises(UnsupportedError, match=r"gpu-sim cannot run: .*Sign"):
        sim.compile(g.build(), CompileOptions())
    with pytest.raises(UnsupportedError, match="unknown option"):
        _ = open_device("gpu-sim", turbo=True).capabilities  # the worker opens on first use
    with pytest.raises(UnsupportedError, match="one device"):
        _ = open_device("gpu-sim:1").capabilities


def test_plans_of_every_shape_share_one_device_copy_of_the_weights(sim):
    rng = np.random.default_rng(3)
    g = GraphBuilder("mlp")
    x = g.input("x", f32["n", 16])
    w = rng.normal(size=(16, 8)).astype(np.float32)
    g.output(ops.relu(x @ g.constant(w, name="w")), name="y")
    graph = g.build()
    executable = sim.compile(graph, CompileOptions())
    for rows in (1, 2, 3):
        xs = rng.normal(size=(rows, 16)).astype(np.float32)
        (out,) = executable.run([sim.upload(xs)])
        np.testing.assert_allclose(sim.download(out), np.maximum(xs @ w, 0), rtol=1e-5,
                                   atol=1e-5)
        counters = executable.profile().counters
        assert counters["plans"] == rows and counters["constant_bytes"] == w.nbytes, counters


def test_runtime_places_on_gpu_sim_with_fallback():
    g = GraphBuilder("mixed")
    x = g.input("x", f32["n", 4])
    g.output(ops.sign(ops.tanh(x @ np.eye(4, dtype=np.float32))), name="y")
    compiled = polyhal.compile(g.build(), device="gpu-sim", fallback="cpu")
    data = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(compiled(data)["y"], np.sign(np.tanh(data)),
                               rtol=1e-5)
    assert compiled.placement.fallback_count == 1


@pytest.mark.skipif(GpuAdapter().probe()[0].available, reason="this machine has a CUDA GPU")
def test_gpu_without_a_device_says_why_and_refuses_to_open():
    (info,) = GpuAdapter().probe()
    assert not info.available and "gpu-sim" in info.reason
    with pytest.raises(DeviceError):
        open_device("gpu")


@pytest.mark.parametrize(("scale_shape", "bias_shape"), [((1, 4), None), ((3, 4), (3, 1)),
                                                        ((4,), (1, 1))])
def test_layer_norm_takes_any_scale_and_bias_that_broadcast_to_x(sim, scale_shape, bias_shape):
    """A scale of rank above the normalized axes ([1, 4] over [4]), or one per row
    ([3, 4]), broadcasts to X as the reference has it (the kernel took only the
    normalized axes' shape, and failed on [1, 4])."""
    rng = np.random.default_rng(3)
    g = GraphBuilder("layer_norm")
    inputs = [g.input("x", f32[3, 4]), g.input("scale", f32[scale_shape])]
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal(scale_shape)]
    if bias_shape is not None:
        inputs.append(g.input("bias", f32[bias_shape]))
        arrays.append(rng.standard_normal(bias_shape))
    g.output(ops.layer_normalization(*inputs, axis=1), name="y")
    graph, arrays = g.build(), [a.astype(np.float32) for a in arrays]
    (got,) = _run(sim, graph, *arrays)
    expected = polyhal.run(graph, *arrays)["y"]
    assert compare(got, expected, precision_tolerance("core.LayerNormalization", "fp32")).ok


def test_every_kernel_compiles_to_ptx_for_a_real_gpu():
    """NVVM (numba-cuda[cu12]) compiles each kernel variant, with no GPU here: code only
    the simulator accepts fails this test."""
    env = {k: v for k, v in os.environ.items() if k != SIMULATOR_ENV}
    result = subprocess.run([sys.executable, "-m", "polyhal.adapters.gpu.ptx"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    count = int(result.stdout.split()[1])
    assert count >= 150, result.stdout


_SHARED_ARRAY_RACE = """
import sys, threading
import numpy as np
from numba import cuda, float32
import polyhal.adapters.gpu.target  # noqa: F401 (makes shared arrays thread-safe)
from numba.cuda.simulator.kernelapi import FakeCUDAShared

sys.setswitchinterval(1e-6)
TRIALS, THREADS = 500, 16
blocks = [FakeCUDAShared(0) for _ in range(TRIALS)]
got = [[None] * THREADS for _ in range(TRIALS)]
start = threading.Barrier(THREADS)

def thread(i):
    for t in range(TRIALS):
        start.wait()
        got[t][i] = blocks[t].array((2, 16, 8), np.float64)

threads = [threading.Thread(target=thread, args=(i,)) for i in range(THREADS)]
for t in threads: t.start()
for t in threads: t.join()
split = sum(len({id(a) for a in row}) > 1 for row in got)

block = FakeCUDAShared(0)
first = block.array(4, float32)
second = block.array(4, float32)
print(split, first.dtype, first is not second, block.array(0, np.dtype(np.float32)).size)
"""


def test_the_simulators_threads_of_a_block_share_one_shared_array():
    """16 threads of a block ask for a shared array at once, 500 times, switching every
    microsecond: each time all get the same array (numba's simulator handed out two in
    about a fifth of the trials: a GEMM then read uninitialized data). Two lines get two
    arrays; numba dtypes and dynamic shared memory still work."""
    env = {**os.environ, SIMULATOR_ENV: "1"}
    result = subprocess.run([sys.executable, "-c", _SHARED_ARRAY_RACE], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["0", "float32", "True", "0"]
