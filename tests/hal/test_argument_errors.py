"""A caller's bad argument to a device call is the caller's error: never a
``DeviceError`` (which drives recovery) nor an ``AdapterContractError`` (which
blames the adapter); what an adapter returns wrong still blames the adapter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from polyhal import hal
from polyhal.adapters.template import TemplateAdapter
from polyhal.errors import (
    AdapterContractError,
    DeviceError,
    InputBindingError,
    PolyhalError,
    UnsupportedError,
)
from polyhal.hal import Capabilities, CompileOptions, Executable, open_device
from polyhal.hal.checked import CheckedExecutable
from tests.hal.helpers import raises_exactly, relu_graph


@pytest.mark.parametrize(("graph", "options", "problem"), [
    (relu_graph(), None, r"template:0 Device\.compile: options must be a CompileOptions .*got "
                         "NoneType"),
    (relu_graph(), {}, r"options must be a CompileOptions .*got dict"),
    ("x", CompileOptions(), r"template:0 Device\.compile: expected a Graph, got str"),
])
def test_compile_checks_its_arguments(graph, options, problem):
    raises_exactly(PolyhalError, problem, open_device("template").compile, graph, options)


def test_run_upload_and_download_arguments_are_the_callers_error():
    device = open_device("template")
    executable = device.compile(relu_graph(), CompileOptions())
    x = device.upload(np.ones(2, np.float32))
    where = r"template:0 Executable\.run: "
    for inputs, problem in [
        (None, "expected a list of buffers .*input: x.*, got NoneType"),
        (x, "expected a list of buffers .*, got Buffer"),
        ([], r"0 buffers given, graph 'relu' takes 1 \(x\)"),
        ([x, x], r"2 buffers given, graph 'relu' takes 1 \(x\)"),
        ([np.ones(2, np.float32)], r"input 'x': expected a Buffer, got ndarray; upload arrays "
                                   "first"),
        ([device.upload(np.ones(2))], r"input 'x': got float64\[2\], expected float32\[n\]"),
    ]:
        raises_exactly(InputBindingError, where + problem, executable.run, inputs)
    raises_exactly(InputBindingError, r"template:0 Device\.upload: expected a numpy array, got "
                                      "list", device.upload, [1.0])
    raises_exactly(InputBindingError, r"template:0 Device\.download: expected a Buffer, got "
                                      "list", device.download, [1.0])


def test_a_buffer_of_another_device_at_the_same_address_says_so():
    first, second = open_device("template"), open_device("template")
    executable = first.compile(relu_graph(), CompileOptions())
    stray = second.upload(np.ones(2, np.float32))
    same = (r"the buffer belongs to another device instance at the same address \(template:0, "
            r"opened separately\), not this one")
    raises_exactly(InputBindingError, r"Executable\.run: input 'x': " + same, executable.run,
                   [stray])
    raises_exactly(InputBindingError, r"Device\.download: " + same, first.download, stray)


def test_a_byte_swapped_array_uploads_in_native_order():
    device = open_device("template")
    swapped = np.array([-1.5, 2.0, 3.25], dtype=">f4" if np.little_endian else "<f4")
    buffer = device.upload(swapped)
    assert buffer.type.dtype.value == "float32"
    back = device.download(buffer)
    assert back.dtype.isnative and back.tolist() == [-1.5, 2.0, 3.25]
    executable = device.compile(relu_graph(), CompileOptions())
    assert device.download(executable.run([buffer])[0]).tolist() == [0.0, 2.0, 3.25]


def test_a_non_ascii_digit_is_no_device_index():
    raises_exactly(PolyhalError, "bad device address 'template:٣'", hal.parse_address,
                   "template:٣")


@pytest.mark.parametrize(("address", "options", "problem"), [
    ("cpu", {"threads": "two"}, r"cpu: threads must be >= 1 \(an integer\), got 'two'"),
    ("cpu", {"threads": 1.5}, r"cpu: threads must be >= 1 \(an integer\), got 1\.5"),
    ("cpu", {"threads": True}, r"cpu: threads must be >= 1 \(an integer\), got True"),
    ("reference", {"bogus": 1}, r"reference: unknown option\(s\) bogus \(known: none\)"),
    ("template", {"bogus": 1, "fast": True}, r"template: unknown option\(s\) bogus, fast "
                                             r"\(known: none\)"),
])
def test_bad_open_options_are_unsupported(address, options, problem):
    raises_exactly(UnsupportedError, problem, open_device, address, **options)


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"isolate": True, "timeout": "x"}, r"timeout='x' must be a positive number of seconds"),
    ({"timeout": -1}, "timeout=-1 must be a positive number of seconds"),
    ({"isolate": "no"}, "isolate='no' must be True or False"),
])
def test_bad_open_device_arguments_are_refused_before_opening(arguments, problem):
    raises_exactly(PolyhalError, r"open_device\('template'\): " + problem, open_device,
                   "template", **arguments)


class _OpenRaisesAdapter(TemplateAdapter):
    """Opening fails with a bare exception, before any device exists."""

    name = "test-open-raises"

    def open(self, index: int = 0, **options: Any) -> Any:
        return int(options["size"])


def test_an_exception_escaping_open_is_a_device_error_naming_the_options():
    hal.register(_OpenRaisesAdapter, replace=True)
    try:
        with pytest.raises(DeviceError) as info:
            open_device("test-open-raises", size="big")
    finally:
        hal.unregister(_OpenRaisesAdapter.name)
    assert str(info.value).startswith("test-open-raises:0 Adapter.open (size='big') raised "
                                      "ValueError: invalid literal")


def test_a_profile_that_is_no_profile_blames_the_adapter():
    class Boasting(Executable):
        def run(self, inputs):
            return list(inputs)

        def profile(self):
            return "fast"

    device = open_device("template")
    checked = CheckedExecutable(device, Boasting(), relu_graph())
    raises_exactly(AdapterContractError, r"template:0 Executable\.profile returned str, not a "
                                         "Profile or None", checked.profile)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"max_rank": "2"}, "Capabilities.max_rank='2' must be an integer in \\[0, 64\\]"),
    ({"max_rank": True}, "Capabilities.max_rank=True must be an integer"),
    ({"max_rank": 65}, "Capabilities.max_rank=65 must be an integer in \\[0, 64\\]"),
    ({"memory_bytes": "1GB"}, "Capabilities.memory_bytes='1GB' must be a positive integer or "
                              "None"),
    ({"memory_bytes": 0}, "Capabilities.memory_bytes=0 must be a positive integer"),
    ({"dynamic_shapes": "yes"}, "Capabilities.dynamic_shapes='yes' must be True or False"),
    ({"tags": "training"}, "Capabilities.tags='training' must be a collection of strings"),
    ({"tags": [1]}, r"Capabilities.tags=\[1\] must be a collection of strings"),
    ({"precisions": "fp32"}, "Capabilities.precisions='fp32' must be a collection of strings"),
])
def test_capabilities_fields_are_validated(fields, problem):
    raises_exactly(AdapterContractError, problem, Capabilities, ops={"Relu": ["float32"]},
                   **fields)


def test_downloading_after_close_says_the_device_was_closed():
    device = open_device("reference", isolate=True, timeout=30)
    try:
        buffer = device.upload(np.ones(2, np.float32))
    finally:
        device.close()
    with pytest.raises(DeviceError, match=r"reference:0 Device\.download: the device is closed"):
        device.download(buffer)
