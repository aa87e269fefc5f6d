"""``polyhal.compile`` and ``Outputs``: a bad argument is a PolyhalError that names it."""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.adapters.cpu import CpuDevice
from polyhal.errors import PolyhalError, UnsupportedError
from polyhal.hal import open_device
from polyhal.ir import GraphBuilder, f32
from polyhal.runtime.compiled import UnknownOutputError
from polyhal.runtime.placement import place


def _graph() -> polyhal.Graph:
    g = GraphBuilder("g")
    g.output(ops.tanh(ops.relu(g.input("x", f32["n", 3]))), name="y")
    return g.build()


@pytest.mark.parametrize(("arguments", "error", "message"), [
    ({"device": ["cpu"]}, PolyhalError,
     r"compile: device=\['cpu'\] must be a device address \(such as 'cpu'\) or an opened "
     "Device"),
    ({"fallback": 5}, PolyhalError, r"compile: fallback=5 must be None, a device address"),
    ({"fallback": True}, PolyhalError, r"compile: fallback=True must be None"),
    ({"fallback": ["reference", 5]}, PolyhalError, r"fallback=\['reference', 5\] must be"),
    ({"precision": ["fp32"]}, UnsupportedError,
     r"compile: precision \['fp32'\] is not one of bf16, fp16, fp32, tf32"),
    ({"options": "abc"}, PolyhalError,
     "compile: options='abc' must be a mapping of option name to value, or None"),
    ({"options": [1, 2]}, PolyhalError, r"compile: options=\[1, 2\] must be a mapping"),
    ({"isolate": 1}, PolyhalError, "compile: isolate=1 must be True or False"),
    ({"device": CpuDevice()}, PolyhalError,
     "compile: this CpuDevice was not opened through polyhal, so it has no address; pass an "
     "address such as 'cpu', or a device from polyhal.hal.open_device"),
])
def test_a_bad_argument_is_named(arguments, error, message):
    with pytest.raises(error, match=message) as caught:
        polyhal.compile(_graph(), **arguments)
    assert type(caught.value) is error


def test_a_precision_the_device_lacks_is_named_not_blamed_on_the_ops():
    with pytest.raises(UnsupportedError,
                       match=r"^compile: cpu:0 offers precisions fp32; fp16 is not one of them$"):
        polyhal.compile(_graph(), device="cpu", precision="fp16")


def test_placement_names_the_precision_a_skipped_device_lacks():
    graph = _graph()
    caps = open_device("reference").capabilities
    placement = place(graph, ["a:0", "b:0"], [caps, caps],
                      unusable={"a:0": "offers precisions fp32; fp16 is not one of them"})
    assert set(placement.assignment.values()) == {"b:0"}
    assert set(placement.reasons.values()) == {
        "a:0: offers precisions fp32; fp16 is not one of them"}


def test_a_device_listed_twice_is_named_with_its_roles():
    with pytest.raises(UnsupportedError, match=r"^compile: cpu:0 is both the device and a "
                                               r"fallback; list each device once$"):
        polyhal.compile(_graph(), device="cpu", fallback="cpu")
    with pytest.raises(UnsupportedError, match=r"^compile: reference:0 is listed twice as a "
                                               r"fallback; list each device once$"):
        polyhal.compile(_graph(), device="cpu", fallback=["reference", "reference:0"])


def test_outputs_asked_for_by_a_name_or_position_they_lack_are_named():
    out = polyhal.compile(_graph(), device="reference")(np.ones((2, 3), np.float32))
    assert out[0] is out["y"] and out[-1] is out["y"] and out[np.int64(0)] is out["y"]
    for key in (5, -2, "nope", True, None):
        with pytest.raises(UnknownOutputError,
                           match=rf"^outputs: no output {key!r}; the outputs are 'y' "
                                 r"\(positions 0 to 0\)$") as caught:
            out[key]
        assert isinstance(caught.value, PolyhalError)
        assert isinstance(caught.value, KeyError) and isinstance(caught.value, IndexError)
