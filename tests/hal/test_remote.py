"""Devices hosted on Ray workers: results, own processes, crashes, hangs, worker_env,
and the errors of a bad host or a missing Ray. Real Ray, one small local instance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import polyhal
import polyhal.hal as hal
from polyhal.errors import DeviceCrashError, DeviceTimeoutError, PolyhalError
from polyhal.hal.isolation import IsolatedDevice
from polyhal.hal.remote import RayHost
from tests.hal.isolation_adapters import HANG
from tests.hal.test_isolation import (  # noqa: F401 - _test_adapters is a fixture
    OPTIONS,
    _test_adapters,
    inner,
    mlp_graph,
    mlp_inputs,
    run_on,
    worker_pid,
)


def reference_result(arrays: list[np.ndarray]) -> np.ndarray:
    return polyhal.run(mlp_graph(), *arrays)["y"]


def test_ray_hosted_devices_give_the_reference_result_in_their_own_processes(ray_instance):
    graph, arrays = mlp_graph(), mlp_inputs()
    want = reference_result(arrays)
    here = ray_instance.get_runtime_context().get_node_id()
    devices = [hal.open_device("reference", host="ray", timeout=20),
               hal.open_device("cpu", host=RayHost(node_id=here), timeout=20)]
    try:
        for device in devices:
            got = run_on(device, device.compile(graph, OPTIONS), arrays)
            assert len(got) == 1
            np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)
        pids = {worker_pid(device) for device in devices}
        assert len(pids) == 2 and os.getpid() not in pids
        assert [d.address for d in devices] == ["reference:0", "cpu:0"]
    finally:
        for device in devices:
            device.close()


def test_killed_actor_raises_crash_error_then_restarts(ray_instance):
    device = hal.open_device("reference", host="ray", timeout=20)
    try:
        executable = device.compile(mlp_graph(), OPTIONS)
        arrays = mlp_inputs()
        want = run_on(device, executable, arrays)
        first_pid = worker_pid(device)
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(DeviceCrashError, match=r"the Ray actor died") as info:
            device.upload(arrays[0])
        assert "reference:0 Device.upload failed" in str(info.value)
        np.testing.assert_array_equal(run_on(device, executable, arrays)[0], want[0])
        stats = inner(device).worker_stats()
        assert stats["generation"] == 2 and stats["pid"] != first_pid
    finally:
        device.close()


def test_hang_times_out_and_actor_restarts(ray_instance):
    timeout = 2.0
    device = hal.open_device("test-faulty", host="ray", timeout=timeout)
    try:
        executable = device.compile(mlp_graph(), OPTIONS)
        inputs = [device.upload(a) for a in mlp_inputs(HANG)]
        start = time.monotonic()
        with pytest.raises(DeviceTimeoutError, match=r"timed out after 2 s") as info:
            executable.run(inputs)
        # the hang never ends: stopping at all is the timeout; the slack is for Ray's
        # actor kill, which goes through its control store (slower on a loaded machine)
        assert timeout <= time.monotonic() - start < timeout + 5
        assert "test-faulty:0 Executable.run" in str(info.value)
        arrays = mlp_inputs()
        np.testing.assert_allclose(run_on(device, executable, arrays)[0],
                                   reference_result(arrays), rtol=1e-6, atol=1e-6)
        assert inner(device).generation == 2
    finally:
        device.close()


def test_worker_env_is_set_before_imports(ray_instance):
    device = hal.open_device("test-env", host="ray", timeout=20)
    try:
        tags = device.capabilities.tags
        assert {"flag=1", "import-flag=1", "worker=test-env:0"} <= tags
    finally:
        device.close()


def test_bad_host_is_named():
    with pytest.raises(PolyhalError, match=r"reference:0.*unknown host 'k8s'.*'process', 'ray'"):
        hal.open_device("reference", host="k8s")
    with pytest.raises(PolyhalError, match=r"num_cpus=-1: expected a number >= 0"):
        RayHost(num_cpus=-1)
    device = hal.open_device("reference", host="process")
    assert not isinstance(device.inner, IsolatedDevice)  # host only places isolated workers
    device.close()


def test_missing_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(PolyhalError, match=r"install it with pip install 'polyhal\[distributed\]'"):
        hal.open_device("reference", host="ray")


def test_importing_remote_does_not_import_ray():
    code = "import sys, polyhal.hal.remote; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
