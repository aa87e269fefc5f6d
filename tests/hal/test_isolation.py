"""Isolated devices: results, crashes, hangs, errors, leaks, worker_env, threads."""

from __future__ import annotations

import concurrent.futures
import gc
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import polyhal.hal as hal
from polyhal import ops
from polyhal.errors import (
    DeviceCrashError,
    DeviceError,
    DeviceTimeoutError,
    ExecutionError,
    InputBindingError,
    PolyhalError,
    UnsupportedError,
    VerificationError,
)
from polyhal.hal.isolation import (
    MIN_START_TIMEOUT,
    SLOW_CALL_FACTOR,
    IsolatedDevice,
    IsolatedExecutable,
)
from polyhal.ir import GraphBuilder, f32
from tests.hal.isolation_adapters import (
    CRASH,
    EXECUTION_ERROR,
    HANG,
    LOCAL_ERROR,
    OWN_ERROR,
    RAISE,
    UNPICKLABLE,
    EnvAdapter,
    FaultyAdapter,
    FaultyUnsupported,
    SlowOpenAdapter,
)

OPTIONS = hal.CompileOptions()


@pytest.fixture(scope="module", autouse=True)
def _test_adapters():
    for cls in (FaultyAdapter, EnvAdapter, SlowOpenAdapter):
        hal.register(cls)
    yield
    for cls in (FaultyAdapter, EnvAdapter, SlowOpenAdapter):
        hal.unregister(cls.name)


def mlp_graph():
    g = GraphBuilder("mlp")
    x = g.input("x", f32["n", 4])
    w = g.input("w", f32[4, 3])
    b = g.input("b", f32[3])
    g.output(ops.relu(x @ w + b), name="y")
    return g.build()


def mlp_inputs(first: float | None = None, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    if first is not None:
        x[0, 0] = first
    return [x, rng.standard_normal((4, 3)).astype(np.float32),
            rng.standard_normal(3).astype(np.float32)]


def expected(arrays: list[np.ndarray]) -> np.ndarray:
    x, w, b = arrays
    return np.maximum(x @ w + b, 0)


def run_on(device: hal.Device, executable: hal.Executable, arrays: list[np.ndarray]):
    outputs = executable.run([device.upload(a) for a in arrays])
    return [device.download(o) for o in outputs]


def worker_pid(device: hal.Device) -> int:
    return inner(device).worker_stats()["pid"]


def inner(device: hal.Device) -> IsolatedDevice:
    assert isinstance(device, hal.CheckedDevice)
    assert isinstance(device.inner, IsolatedDevice)
    return device.inner


@pytest.fixture(scope="module")
def template():
    """One isolated template device shared by the tests that do not break it."""
    device = hal.open_device("template", isolate=True, timeout=20)
    yield device
    device.close()


@pytest.mark.parametrize("adapter", ["reference", "template"])
def test_isolated_matches_in_process(adapter, template):
    graph = mlp_graph()
    arrays = mlp_inputs()
    plain = hal.open_device(adapter)
    isolated = template if adapter == "template" else hal.open_device(adapter, isolate=True)
    try:
        want = run_on(plain, plain.compile(graph, OPTIONS), arrays)
        got = run_on(isolated, isolated.compile(graph, OPTIONS), arrays)
        assert len(got) == len(want) == 1
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[0], expected(arrays), rtol=1e-6)
        assert isolated.capabilities == plain.capabilities
        assert isolated.address == f"{adapter}:0"
        assert isolated.adapter is hal.get_adapter(adapter)
        buffer = isolated.upload(arrays[0])
        assert isinstance(buffer, hal.Buffer) and buffer.device is inner(isolated)
        assert buffer.type.shape == (2, 4)
    finally:
        plain.close()
        if isolated is not template:
            isolated.close()


def test_crash_becomes_device_error_and_worker_restarts():
    device = hal.open_device("test-faulty", isolate=True, timeout=20)
    try:
        executable = device.compile(mlp_graph(), OPTIONS)
        arrays = mlp_inputs()
        np.testing.assert_allclose(run_on(device, executable, arrays)[0], expected(arrays),
                                   rtol=1e-6)
        old = device.upload(arrays[0])
        first_pid = worker_pid(device)

        start = time.monotonic()
        with pytest.raises(DeviceCrashError, match=r"exit code 3") as info:
            run_on(device, executable, mlp_inputs(CRASH))
        assert time.monotonic() - start < 5
        assert "test-faulty:0" in str(info.value) and "Executable.run" in str(info.value)

        with pytest.raises(DeviceError, match="buffer from before the device restarted"):
            device.download(old)
        with pytest.raises(DeviceError, match="buffer from before the device restarted"):
            executable.run([old, *[device.upload(a) for a in arrays[1:]]])

        # The same executable recompiles in the new worker.
        np.testing.assert_allclose(run_on(device, executable, arrays)[0], expected(arrays),
                                   rtol=1e-6)
        stats = inner(device).worker_stats()
        assert stats["generation"] == 2 and stats["pid"] != first_pid
        assert executable.profile().counters["runs"] == 1  # counted in the new worker
    finally:
        device.close()


def test_run_arrays_is_one_request_checked_as_each_call_is(template, worker_requests):
    graph = mlp_graph()
    arrays = mlp_inputs()
    executable = template.compile(graph, OPTIONS)
    before = inner(template).worker_stats()["buffers"]
    sent = worker_requests(inner(template))
    got = executable.run_arrays(arrays)
    assert sent == ["execute"]
    np.testing.assert_array_equal(got[0], run_on(template, executable, arrays)[0])
    np.testing.assert_allclose(got[0], expected(arrays), rtol=1e-6)
    assert inner(template).worker_stats()["buffers"] == before  # none left behind

    # The worker's checks give the errors and messages of the calls made one by one.
    wrong_dtype = [arrays[0].astype(np.float64), *arrays[1:]]
    not_an_array = [arrays[0].tolist(), *arrays[1:]]
    for bad in (wrong_dtype, not_an_array):
        with pytest.raises(PolyhalError) as one_by_one:
            run_on(template, executable, bad)
        with pytest.raises(type(one_by_one.value)) as at_once:
            executable.run_arrays(bad)
        assert str(at_once.value) == str(one_by_one.value)
    # A miscount is the caller's, told before any request.
    del sent[:]
    with pytest.raises(InputBindingError, match="2 arrays given, graph 'mlp' takes 3"):
        executable.run_arrays(arrays[:2])
    assert sent == []


def test_an_op_registered_here_only_is_named_by_the_worker(template, monkeypatch):
    """A graph comes into the worker unverified (it was verified when it was made):
    an op the worker does not know is still named, with the node and why."""
    from polyhal.ir import Graph, Node, Value
    from polyhal.ops import infer, registry

    op = registry.OpDef(name="TwiceHere", inputs=(registry.Input("X", "T"),),
                        outputs=(registry.Output("Y", "T"),),
                        type_vars={"T": frozenset({f32})},
                        infer=infer.same_as_input(0), kernel=lambda x: 2 * x, doc="2x",
                        domain="test.here")
    monkeypatch.setitem(registry._REGISTRY, ("test.here", "TwiceHere"), op)
    y = Value("y", f32[2])
    graph = Graph("custom", (Value("x", f32[2]),), (y,),
                  (Node("TwiceHere", "twice", ("x",), (y,), {}, "test.here"),))
    with pytest.raises(VerificationError, match=r"^graph 'custom': node 'twice' "
                       r"\(test.here.TwiceHere\): unknown op test.here.TwiceHere in the "
                       r"device's worker process \(an op registered at run time exists only "
                       r"in the process that registered it\)$"):
        template.compile(graph, OPTIONS)


def test_run_arrays_carries_device_errors_and_runs_on_after_a_crash():
    device = hal.open_device("test-faulty", isolate=True, timeout=20)
    try:
        executable = device.compile(mlp_graph(), OPTIONS)
        with pytest.raises(ExecutionError, match=r"^faulty kernel failed on -2$"):
            executable.run_arrays(mlp_inputs(EXECUTION_ERROR))
        with pytest.raises(DeviceError, match="ValueError: the faulty device refuses -1"):
            executable.run_arrays(mlp_inputs(RAISE))
        with pytest.raises(DeviceCrashError, match=r"exit code 3"):
            executable.run_arrays(mlp_inputs(CRASH))
        # No buffer to go stale: the executable compiles again in the new worker.
        arrays = mlp_inputs()
        np.testing.assert_allclose(executable.run_arrays(arrays)[0], expected(arrays),
                                   rtol=1e-6)
        assert inner(device).worker_stats()["generation"] == 2
    finally:
        device.close()


def test_run_arrays_in_process_makes_the_checked_calls():
    device = hal.open_device("template")
    arrays = mlp_inputs()
    executable = device.compile(mlp_graph(), OPTIONS)
    np.testing.assert_array_equal(executable.run_arrays(arrays)[0],
                                  run_on(device, executable, arrays)[0])
    with pytest.raises(InputBindingError, match=r"template:0 Device.upload: expected a "
                                                    r"numpy array, got list"):
        executable.run_arrays([arrays[0].tolist(), *arrays[1:]])


def test_hang_times_out_and_worker_restarts():
    timeout = 3.0
    device = hal.open_device("test-faulty", isolate=True, timeout=timeout)
    try:
        executable = device.compile(mlp_graph(), OPTIONS)
        inputs = [device.upload(a) for a in mlp_inputs(HANG)]
        start = time.monotonic()
        with pytest.raises(DeviceTimeoutError, match=r"timed out after 3 s") as info:
            executable.run(inputs)
        elapsed = time.monotonic() - start
        assert timeout <= elapsed < timeout + 2.5
        assert "test-faulty:0 Executable.run" in str(info.value)
        arrays = mlp_inputs()
        np.testing.assert_allclose(run_on(device, executable, arrays)[0], expected(arrays),
                                   rtol=1e-6)
        assert inner(device).generation == 2
    finally:
        device.close()


def test_worker_errors_come_back(template):
    # A PolyhalError from compile: the same class, the same message.
    g = GraphBuilder("sub")
    x = g.input("x", f32[2])
    g.output(x - x)
    graph = g.build()
    plain = hal.open_device("template")
    with pytest.raises(UnsupportedError) as local:
        plain.compile(graph, OPTIONS)
    with pytest.raises(UnsupportedError) as remote:
        template.compile(graph, OPTIONS)
    assert str(remote.value) == str(local.value)
    assert "cannot run" in remote.value.worker_traceback

    device = hal.open_device("test-faulty", isolate=True, timeout=20)
    try:
        executable = device.compile(mlp_graph(), OPTIONS)
        pid = worker_pid(device)
        with pytest.raises(DeviceError) as info:
            run_on(device, executable, mlp_inputs(RAISE))
        message = str(info.value)
        assert "ValueError: the faulty device refuses -1" in message
        assert "worker traceback" in message and "isolation_adapters.py" in message
        with pytest.raises(ExecutionError, match=r"^faulty kernel failed on -2$"):
            run_on(device, executable, mlp_inputs(EXECUTION_ERROR))
        with pytest.raises(DeviceError, match="UnpicklableError: this error holds a lock"):
            run_on(device, executable, mlp_inputs(UNPICKLABLE))
        with pytest.raises(FaultyUnsupported, match=r"^no -4 on this device$"):
            run_on(device, executable, mlp_inputs(OWN_ERROR))
        # A class the caller cannot load comes back as its nearest polyhal base.
        with pytest.raises(UnsupportedError, match=r"^no -5 on this device$") as info:
            run_on(device, executable, mlp_inputs(LOCAL_ERROR))
        assert type(info.value) is UnsupportedError
        # Errors do not cost the worker.
        assert worker_pid(device) == pid
        arrays = mlp_inputs()
        np.testing.assert_allclose(run_on(device, executable, arrays)[0], expected(arrays),
                                   rtol=1e-6)
    finally:
        device.close()


def test_open_error_comes_back_and_leaves_no_worker():
    device = hal.open_device("template:1", isolate=True, timeout=20)
    with pytest.raises(UnsupportedError, match="template has one device"):
        device.upload(np.zeros(2, np.float32))
    assert inner(device)._holder[0] is None
    device.close()


def test_a_script_without_a_main_guard_is_told_why_its_worker_died(tmp_path):
    """spawn runs the script's top level in the worker, which then tries to start a worker
    of its own; the error names the script and the fix."""
    script = tmp_path / "unguarded.py"
    script.write_text("import numpy as np\nimport polyhal.hal as hal\n"
                      "device = hal.open_device('template', isolate=True)\n"
                      "device.upload(np.zeros(2, np.float32))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "DeviceCrashError" in last and "exit code 1" in last, result.stderr[-2000:]
    assert "(unguarded.py)" in last and 'if __name__ == "__main__":' in last

    guarded = tmp_path / "guarded.py"
    guarded.write_text(script.read_text().replace("device =", "if __name__ == '__main__':\n"
                                                   "    device =").replace(
        "\ndevice.upload", "\n    device.upload"))
    ok = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True,
                        timeout=120, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_no_leak_over_many_cycles(template):
    graph = mlp_graph()
    arrays = mlp_inputs()
    isolated = inner(template)
    base = isolated.worker_stats()
    held = template.upload(arrays[0])
    assert isolated.worker_stats()["buffers"] == base["buffers"] + 1
    del held
    for _ in range(250):
        executable = template.compile(graph, OPTIONS)
        outputs = executable.run([template.upload(a) for a in arrays])
        template.download(outputs[0])
    del executable, outputs
    gc.collect()
    stats = isolated.worker_stats()
    assert stats["buffers"] == base["buffers"]
    assert stats["executables"] == base["executables"]
    assert stats["generation"] == base["generation"]
    assert stats["open_fds"] <= base["open_fds"] + 2
    assert stats["rss_bytes"] > 0


def test_worker_env_is_set_before_imports():
    assert "POLYHAL_TEST_FLAG" not in os.environ
    device = hal.open_device("test-env", isolate=True, timeout=20)
    try:
        tags = device.capabilities.tags
        assert {"flag=1", "import-flag=1", "worker=test-env:0"} <= tags
        assert "POLYHAL_TEST_FLAG" not in os.environ  # the caller's environment is untouched
    finally:
        device.close()


def test_run_async_from_threads(template):
    executable = template.compile(mlp_graph(), OPTIONS)

    def work(seed: int) -> None:
        for i in range(5):
            arrays = mlp_inputs(seed=seed * 10 + i)
            future = executable.run_async([template.upload(a) for a in arrays])
            (output,) = future.result(timeout=30)
            np.testing.assert_allclose(template.download(output), expected(arrays), rtol=1e-6)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(work, seed) for seed in range(4)]:
            future.result(timeout=60)


def test_a_worker_start_is_not_held_to_a_short_call_timeout():
    """A start may take MIN_START_TIMEOUT whatever the per-call timeout: here the
    worker takes longer to open than SLOW_CALL_FACTOR calls may take."""
    timeout = 0.2
    open_seconds = timeout * SLOW_CALL_FACTOR + 1.0
    assert open_seconds < MIN_START_TIMEOUT
    device = hal.open_device("test-slow-open", isolate=True, timeout=timeout,
                             open_seconds=open_seconds)
    try:
        assert device.inner.worker_stats()["generation"] == 1
        assert device.inner.start_seconds >= open_seconds
    finally:
        device.close()


def test_close_is_idempotent_and_stops_the_worker():
    device = hal.open_device("template", isolate=True, timeout=20)
    pid = worker_pid(device)
    device.close()
    device.close()
    multiprocessing.active_children()  # reap
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(DeviceError, match="closed"):
        device.upload(np.zeros(2, np.float32))


def test_garbage_collected_device_stops_its_worker():
    device = IsolatedDevice("template", 0, {}, timeout=20)
    pid = device.worker_stats()["pid"]
    del device
    gc.collect()
    deadline = time.monotonic() + 5
    while True:
        multiprocessing.active_children()  # reap
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the worker outlived its device"
        time.sleep(0.05)


def test_executable_is_proxied(template):
    executable = template.compile(mlp_graph(), OPTIONS)
    assert isinstance(executable.inner, IsolatedExecutable)
    assert executable.inner.options == OPTIONS
    assert executable.profile() is None  # the template measures nothing


def test_timeout_default_from_environment(monkeypatch):
    monkeypatch.setenv("POLYHAL_DEVICE_TIMEOUT", "7.5")
    assert IsolatedDevice("template", 0, {}).timeout == 7.5
    monkeypatch.setenv("POLYHAL_DEVICE_TIMEOUT", "soon")
    with pytest.raises(PolyhalError, match="POLYHAL_DEVICE_TIMEOUT"):
        IsolatedDevice("template", 0, {})
    monkeypatch.delenv("POLYHAL_DEVICE_TIMEOUT")
    assert IsolatedDevice("template", 0, {}).timeout == 60
