"""``Session``: bad arguments are refused at construction, a device that cannot be opened is
the caller's error, and a device thread that stops unexpectedly fails calls, never hangs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.adapters.cpu import CpuDevice
from polyhal.adapters.template import TemplateAdapter, TemplateDevice
from polyhal.errors import DeviceError, InputBindingError, PolyhalError, UnsupportedError
from polyhal.hal import Buffer, CompileOptions, Executable
from polyhal.ir import GraphBuilder, f32
from polyhal.runtime import Session


def _graph() -> polyhal.Graph:
    g = GraphBuilder("g")
    g.output(ops.relu(g.input("x", f32["batch", 3])), name="y")
    return g.build()


@pytest.mark.parametrize(("name", "value"), [
    ("max_backoff", "x"), ("max_backoff", -1), ("max_backoff", math.inf),
    ("probe_interval", 0), ("give_up_after", math.inf), ("give_up_after", math.nan),
    ("timeout", "x"), ("timeout", 0), ("timeout", True),
])
def test_a_bad_duration_is_refused_at_construction(name, value):
    with pytest.raises(PolyhalError, match=rf"^Session: {name}={value!r} must be a positive, "
                                           "finite number of seconds"):
        Session(["reference"], **{name: value})


@pytest.mark.parametrize(("spec", "message"), [
    ("cpu:9", r"^Session: device cpu:9 cannot be opened: cpu has one device \(index 0\), "
              "not 9$"),
    (("cpu", {"thread": 2}), r"^Session: device cpu:0 cannot be opened: cpu: unknown "
                             r"option\(s\) thread \(known: threads\)$"),
])
def test_a_device_that_cannot_be_opened_is_refused_at_construction(spec, message):
    # Before: every micro-batch went quietly to the fallback, and health() said "healthy".
    with pytest.raises(UnsupportedError, match=message):
        Session(["reference", spec], timeout=30)


def test_a_device_instance_that_polyhal_did_not_open_is_refused():
    with pytest.raises(PolyhalError, match=r"^Session: this CpuDevice was not opened through "
                                           "polyhal"):
        Session([CpuDevice()])


def test_bad_map_requests_and_batch_dims_are_named():
    with Session(["reference"], timeout=30) as session:
        compiled = session.compile(_graph())
        x = np.ones((2, 3), np.float32)
        with pytest.raises(InputBindingError, match=r"^SessionGraph\.map: request 1 is a ndarray, "
                                                    r"not a mapping of input name to array$"):
            compiled.map([{"x": x}, x])
        for requests, kind in ((None, "NoneType"), ("x", "str"), ({"x": x}, "dict")):
            with pytest.raises(InputBindingError, match="^SessionGraph.map: requests must be a "
                                                        f"list of mappings .*, got {kind}$"):
                compiled.map(requests)
        assert compiled.map([{"x": x}])[0]["y"].shape == (2, 3)
        with pytest.raises(PolyhalError, match=r"^batch dimension \['batch'\] must be a "
                                               "dimension symbol"):
            session.compile(_graph(), ["batch"])


class _FaultsThenBreaks(TemplateDevice):
    """Runs fault (a DeviceError); after that, uploads raise a RuntimeError, so the health
    probe the session runs in the device's thread breaks: a device that breaks the contract
    where nothing of polyhal checks it."""

    def __init__(self) -> None:
        self.adapter = TemplateAdapter()
        self.faulted = False

    def compile(self, graph: polyhal.Graph, options: CompileOptions) -> Executable:
        device = self

        class Faulting(Executable):
            def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
                device.faulted = True
                raise DeviceError("template:0: injected fault")

        return Faulting()

    def upload(self, array: np.ndarray) -> Buffer:
        if self.faulted:
            raise RuntimeError("the probe's upload broke")
        return super().upload(array)


def test_a_device_thread_that_stops_unexpectedly_fails_the_calls_it_leaves():
    with Session([_FaultsThenBreaks()], fallback=None, micro_batch=2) as session:
        compiled = session.compile(_graph())
        future = compiled.submit(x=np.ones((2, 3), np.float32))
        with pytest.raises(PolyhalError, match=r"no device is left to run micro-batch 0 of 'g' "
                                               r"\(template:0: Session: the thread of device "
                                               "template:0 stopped on RuntimeError: the probe's "
                                               "upload broke\\)"):
            future.result(timeout=30)
        health = session.health()["template:0"]
        assert health.state == "failed" and "RuntimeError" in health.last_error
        with pytest.raises(PolyhalError, match="no device is left to run micro-batch 0"):
            compiled.submit(x=np.ones((2, 3), np.float32)).result(timeout=30)


def test_a_device_at_the_fallbacks_address_keeps_its_own_health_entry():
    with Session(["reference"], fallback="reference", timeout=30) as session:
        session.compile(_graph()).submit(x=np.ones((2, 3), np.float32)).result(timeout=60)
        health = session.health()
    assert set(health) == {"reference:0", "reference:0 (fallback)"}
    assert health["reference:0"].completed == 1
    assert health["reference:0 (fallback)"].completed == 0
