"""The fault-injecting simulator: each fault as it is seen by a caller, and bad options."""

from __future__ import annotations

import time

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.errors import DeviceCrashError, DeviceError, DeviceTimeoutError, PolyhalError
from polyhal.hal import open_device
from polyhal.ir import GraphBuilder, f32
from polyhal.simulators.faulty import CRASH_EXIT_CODE


def _graph() -> polyhal.Graph:
    g = GraphBuilder("double")
    x = g.input("x", f32["n"])
    g.output(ops.relu(x) * 2.0, name="y")
    return g.build()


X = np.linspace(-1, 1, 64, dtype=np.float32)
EXPECTED = np.maximum(X, 0) * 2


def _run(**options):
    device = open_device("faulty:0", timeout=options.pop("timeout", 30), **options)
    try:
        return polyhal.compile(_graph(), device=device)(X)["y"]
    finally:
        device.close()


def test_without_faults_it_is_the_inner_device():
    np.testing.assert_array_equal(_run(inner="cpu"), EXPECTED)


def test_error_at_fails_exactly_the_runs_named():
    device = open_device("faulty:0", inner="reference", error_at=[1, 2], timeout=30)
    compiled = polyhal.compile(_graph(), device=device)
    outcomes = []
    for _ in range(4):
        try:
            compiled(X)
            outcomes.append("ok")
        except DeviceError as error:
            assert "injected fault in Executable.run" in str(error)
            outcomes.append("error")
    device.close()
    assert outcomes == ["ok", "error", "error", "ok"]


def test_a_crash_and_a_hang_end_as_device_errors():
    with pytest.raises(DeviceCrashError, match=f"exit code {CRASH_EXIT_CODE}"):
        _run(crash_rate=1.0)
    started = time.perf_counter()
    with pytest.raises(DeviceTimeoutError, match="timed out after 1 s"):
        _run(hang_rate=1.0, timeout=1.0)
    assert time.perf_counter() - started < 15


def test_corruption_is_silent_without_checksums_and_caught_with_them():
    corrupted = _run(corrupt_rate=1.0)
    # Compared as bits: a flipped sign bit of 0.0 gives -0.0, which equals 0.0 as a value.
    assert corrupted.tobytes() != EXPECTED.tobytes()
    flipped = np.unpackbits(corrupted.view(np.uint8) ^ EXPECTED.view(np.uint8))
    assert flipped.sum() == 1  # exactly one bit
    with pytest.raises(DeviceError, match="checksum mismatch"):
        _run(corrupt_rate=1.0, checksum=True)
    np.testing.assert_array_equal(_run(checksum=True), EXPECTED)  # no corruption: passes


def _seconds_per_call(device, graph, x) -> float:
    compiled = polyhal.compile(graph, device=device)
    compiled(x)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        compiled(x)
        times.append(time.perf_counter() - started)
    device.close()
    return sorted(times)[1]


def test_slowdown_stretches_runs():
    # Heavy compute, light transfers: the run itself dominates a call.
    g = GraphBuilder("chain")
    h = g.input("x", f32[64, 256])
    w = g.constant(np.eye(256, dtype=np.float32), name="w")
    for _ in range(30):
        h = ops.relu(h @ w)
    g.output(h, name="y")
    graph, x = g.build(), np.ones((64, 256), np.float32)
    slow = _seconds_per_call(open_device("faulty:0", inner="reference", slowdown=20.0,
                                         timeout=30), graph, x)
    fast = _seconds_per_call(open_device("faulty:1", inner="reference", timeout=30), graph, x)
    assert slow > 4 * fast, (slow, fast)


def test_an_adapter_that_is_no_entry_point_is_wrapped_by_its_class():
    path = "polyhal.adapters.reference:ReferenceAdapter"
    np.testing.assert_array_equal(_run(inner="reference", inner_adapter=path), EXPECTED)
    with pytest.raises(DeviceError, match=r"cannot import the adapter class no\.such:Adapter"):
        _run(inner_adapter="no.such:Adapter")


@pytest.mark.parametrize(("options", "message"), [
    ({"bogus": 1}, r"unknown option\(s\) bogus \(known: checksum, "),
    ({"error_rate": 1.5}, r"error_rate=1.5 must be a probability"),
    ({"hang_rate": "x"}, r"hang_rate='x' must be a probability"),
    ({"error_rate": 0.6, "crash_rate": 0.6}, r"exceeds 1"),
    ({"slowdown": 0.5}, r"slowdown=0.5 must be a number >= 1"),
    ({"inner": "faulty:1"}, r"inner='faulty:1' must be the address of another device"),
    ({"inner": "no such"}, r"bad device address"),
    ({"error_at": [-1]}, r"error_at=\[-1\] must be a list of run numbers"),
    ({"checksum": 1}, r"checksum=1 must be True or False"),
    ({"inner_adapter": "nocolon"}, r"inner_adapter='nocolon' must be 'module:qualname'"),
    ({"inner_options": [1]}, r"inner_options=\[1\] must be a mapping"),
])
def test_bad_options_are_named(options, message):
    device = open_device("faulty:3", timeout=30, **options)
    try:
        with pytest.raises(PolyhalError, match=message):
            device.capabilities  # noqa: B018 - opening happens on the first call
    finally:
        device.close()
