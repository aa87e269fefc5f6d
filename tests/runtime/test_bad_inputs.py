"""Malformed input to the runtime, as a fuzzer finds it: the caller's ``PolyhalError``
naming what is wrong and where, never a bare ``TypeError`` from deep inside; and a
device someone closed does not stay in the process-wide cache."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.errors import PolyhalError
from polyhal.ir import GraphBuilder, f32
from polyhal.runtime import Session, shared_device


def _graph() -> polyhal.Graph:
    g = GraphBuilder("g")
    g.output(ops.relu(g.input("x", f32["batch", 3])), name="y")
    return g.build()


@pytest.mark.parametrize(("options", "problem"), [
    ({"timeout": 5}, r"'timeout' is an argument of open_device, not an Adapter\.open option: "
                     r"pass Session\(timeout=\.\.\.\)"),
    ({"host": "ray"}, r"'host' is an argument of open_device, .*: pass Session\(host=\.\.\.\)"),
    ({"isolate": False}, r"'isolate' is an argument of open_device, .*: the session opens "
                         "addresses isolated; pass an opened Device to use one in this process"),
    ({"address": "cpu"}, r"'address' is an argument of open_device, .*: give the address as the "
                         "entry's first item"),
    ({1: 2}, r"option name 1 \(int\) is not a string"),
    ({"threads": 1, None: 2}, r"option name None \(NoneType\) is not a string"),
])
def test_an_option_that_open_device_cannot_take_is_refused_naming_the_device(options, problem):
    spec = ("cpu", options)
    with pytest.raises(PolyhalError, match="^" + re.escape(f"Session: device {spec!r}: ")
                       + problem + "$") as caught:
        Session(["reference", spec], timeout=30)
    assert type(caught.value) is PolyhalError


@pytest.mark.parametrize(("options", "problem"), [
    ({1: 2}, r"compile: options=\{1: 2\}: option name 1 \(int\) is not a string"),
    ({"tile": 4, (1,): 2}, r"compile: options=.*: option name \(1,\) \(tuple\) is not a string"),
])
def test_compile_options_not_named_by_strings_are_refused(options, problem):
    with pytest.raises(PolyhalError, match=f"^{problem}$") as caught:
        polyhal.compile(_graph(), device="reference", options=options)
    assert type(caught.value) is PolyhalError


@pytest.mark.parametrize("isolate", [False, True])
def test_a_closed_shared_device_is_opened_again(isolate):
    graph = _graph()
    first = polyhal.compile(graph, device="reference", isolate=isolate)
    closed = first.devices["reference:0"]
    closed.close()
    assert closed.closed
    again = polyhal.compile(graph, device="reference", isolate=isolate)
    device = again.devices["reference:0"]
    assert device is not closed and not device.closed
    assert shared_device("reference", isolate) is device
    x = np.array([[-1.0, 2.0, 0.5]], np.float32)
    np.testing.assert_array_equal(again(x)["y"], np.maximum(x, 0))
