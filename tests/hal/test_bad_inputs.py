"""Malformed input to the HAL, as a fuzzer finds it: each is the caller's
``PolyhalError`` naming what is wrong and where, the same on every adapter and
in-process or isolated; never a bare traceback from deep inside, nor a
``DeviceError`` (which drives recovery: the runtime would restart a healthy device)."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import hal
from polyhal.errors import (
    AdapterContractError,
    DeviceError,
    InputBindingError,
    IRError,
    PolyhalError,
)
from polyhal.hal import Buffer, CompileOptions, Executable
from polyhal.hal.checked import CheckedExecutable
from polyhal.hal.isolation import IsolatedDevice
from polyhal.ir import f32
from tests.hal.helpers import raises_exactly, relu_graph
from tests.hal.isolation_adapters import NO_ROOM_ABOVE, NoRoomAdapter

ADAPTERS = ["reference", "template", "cpu"]
HUGE = np.broadcast_to(np.float32(1), (2**56,))
"""A view of 256 PiB: no machine can copy it (it exceeds a 57-bit address space)."""
HUGE_TYPE = (r"\(float32, shape \(72057594037927936,\), 288230376151711744 bytes = "
             r"256\.0 PiB\)")
MASKED = np.ma.array([1.0, 1e30, 2.0], mask=[0, 1, 0], dtype=np.float32)




@pytest.fixture(scope="module")
def isolated():
    """One isolated reference device, shared by the tests that do not break it."""
    device = hal.open_device("reference", isolate=True, timeout=30)
    yield device
    device.close()


@pytest.fixture(params=[*ADAPTERS, "isolated"])
def device(request):
    """Each in-process adapter's device, and the isolated one."""
    if request.param == "isolated":
        yield request.getfixturevalue("isolated")
        return
    opened = hal.open_device(request.param)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def no_room():
    hal.register(NoRoomAdapter, replace=True)
    yield NoRoomAdapter.name
    hal.unregister(NoRoomAdapter.name)


def _where(device: hal.Device, call: str) -> str:
    """The start of the message of an error in ``call`` on ``device``, as a regex."""
    return f"^{device.address} {call}: ".replace(".", r"\.")


# --------------------------------------------------------------------------- CompileOptions


@pytest.mark.parametrize(("fields", "problem"), [
    ({"precision": ["fp32"]}, r"CompileOptions\.precision=\['fp32'\] must be a string \(fp32, "
                              r"tf32, fp16 or bf16\)"),
    ({"precision": None}, r"CompileOptions\.precision=None must be a string"),
    ({"extra": None}, r"CompileOptions\.extra=None must be a mapping of option name \(a "
                      r"string\) to value"),
    ({"extra": [1]}, r"CompileOptions\.extra=\[1\] must be a mapping"),
    ({"extra": "abc"}, r"CompileOptions\.extra='abc' must be a mapping"),
    ({"extra": {1: 2}}, r"CompileOptions\.extra: option name 1 \(int\) is not a string"),
])
def test_compile_options_of_the_wrong_types_are_refused_when_made(fields, problem):
    raises_exactly(PolyhalError, f"^{problem}", CompileOptions, **fields)


def test_compile_options_of_the_right_types_are_made():
    options = CompileOptions(precision="fp8", extra={"tile": 4})  # fp8: the device's to refuse
    assert options.precision == "fp8" and options.extra == {"tile": 4}


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("precision", ["fp32"], r"CompileOptions\.precision=\['fp32'\] must be a string"),
    ("extra", None, r"CompileOptions\.extra=None must be a mapping"),
    ("extra", {1: 2}, r"CompileOptions\.extra: option name 1 \(int\) is not a string"),
])
def test_compile_refuses_options_forced_past_their_check(device, field, value, problem):
    options = CompileOptions()
    object.__setattr__(options, field, value)  # as a copy made without __init__ would be
    raises_exactly(PolyhalError, _where(device, "Device.compile") + problem, device.compile,
                   relu_graph(), options)


# --------------------------------------------------------------------------- run_arrays


@pytest.mark.parametrize(("arrays", "problem"), [
    (None, r"expected a list of arrays \(one per graph input: x\), got NoneType$"),
    (np.ones(2, np.float32), "expected a list of arrays .*, got ndarray$"),
    ([], r"0 arrays given, graph 'relu' takes 1 \(x\)$"),
    ([np.ones(2, np.float32)] * 2, r"2 arrays given, graph 'relu' takes 1 \(x\)$"),
])
def test_run_arrays_checks_the_list_of_arrays_first(device, arrays, problem):
    executable = device.compile(relu_graph(), CompileOptions())
    raises_exactly(InputBindingError, _where(device, "Executable.run") + problem,
                   executable.run_arrays, arrays)


# --------------------------------------------------------------------------- forged buffers


def test_a_buffer_whose_type_is_no_tensor_type_is_the_callers_error(device):
    executable = device.compile(relu_graph(), CompileOptions())
    good = device.upload(np.ones(2, np.float32))
    device.download(executable.run([good])[0])  # a signature seen and remembered
    forged = Buffer(device, "float32[2]", np.ones(2, np.float32))  # type: ignore[arg-type]
    raises_exactly(InputBindingError, _where(device, "Executable.run")
                   + r"input 'x': the buffer's type is a str \('float32\[2\]'\), not a "
                     r"TensorType; make buffers with Device.upload$", executable.run, [forged])
    raises_exactly(InputBindingError, _where(device, "Device.download")
                   + r"the buffer's type is a NoneType \(None\), not a TensorType",
                   device.download, Buffer(device, None, good.handle))  # type: ignore[arg-type]


def test_a_buffer_with_a_handle_the_isolated_device_did_not_make_is_the_callers(isolated):
    executable = isolated.compile(relu_graph(), CompileOptions())
    proxy = isolated.inner
    assert isinstance(proxy, IsolatedDevice)
    forged = Buffer(proxy, f32[2], "not a handle")
    raises_exactly(InputBindingError, r"^reference:0 Executable\.run: the buffer's handle is "
                                      "not one this device made", executable.run, [forged])


def test_an_output_whose_type_is_no_tensor_type_blames_the_adapter():
    class Forging(Executable):
        def run(self, inputs):
            return [Buffer(device.inner, "float32[2]", None)]

    device = hal.open_device("template")
    checked = CheckedExecutable(device, Forging(), relu_graph())
    raises_exactly(AdapterContractError, r"^template:0 Executable\.run: output 'y': the "
                                         r"buffer's type is a str \('float32\[2\]'\), not a "
                                         r"TensorType$", checked.run,
                   [device.upload(np.ones(2, np.float32))])


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(("address", "problem"), [
    ("cpu:" + "9" * 5000, r"'cpu:9{56}'\.\.\. \(str, 5004 characters\): its index has 5000 "
                          "digits; a device index has at most 18$"),
    ("cpu:" + "1" * 19, r"'cpu:1{19}': its index has 19 digits; a device index has at most "
                        "18$"),
    ("!" * 1000, r"'!{60}'\.\.\. \(str, 1000 characters\): expected ADAPTER or ADAPTER:INDEX"),
], ids=["5000 digits", "19 digits", "1000 characters"])
def test_a_malformed_address_is_named_briefly(address, problem):
    raises_exactly(PolyhalError, "^bad device address " + problem, hal.parse_address, address)
    raises_exactly(PolyhalError, "^bad device address " + problem, hal.open_device, address)


def test_an_index_of_eighteen_digits_is_an_index():
    assert hal.parse_address("gpu:" + "0" * 17 + "7") == ("gpu", 7)


# --------------------------------------------------------------------------- what cannot be sent


def test_an_array_of_no_polyhal_dtype_fails_alike_in_process_and_isolated(isolated,
                                                                          worker_requests):
    bad = np.array([1, lambda: 0], dtype=object)  # it cannot be pickled either
    plain = hal.open_device("reference")
    message = r"^reference:0 Device\.upload: numpy dtype object has no polyhal dtype$"
    sent = worker_requests(isolated.inner)
    for device in (plain, isolated):
        executable = device.compile(relu_graph(), CompileOptions())
        del sent[:]
        raises_exactly(IRError, message, executable.run_arrays, [bad])
        raises_exactly(IRError, message, device.upload, bad)
    assert sent == []  # told before any request


def test_options_that_cannot_be_pickled_are_the_callers_error_not_a_device_fault(isolated):
    generation = isolated.inner.generation
    graph = relu_graph()
    for extra, name in [({"f": lambda: 0}, r"CompileOptions\.extra\['f'\]"),
                        ({"ok": 1, "nested": {"g": [0, lambda: 0]}},
                         r"CompileOptions\.extra\['nested'\]\['g'\]\[1\]")]:
        raises_exactly(PolyhalError, rf"^reference:0 Device\.compile: {name} cannot be sent to "
                                     "the device's worker process, as it cannot be pickled "
                                     r"\(\w+: ", isolated.compile, graph,
                       CompileOptions(extra=extra))
    # Nothing was sent: the worker runs on, as healthy as before.
    executable = isolated.compile(graph, CompileOptions())
    assert executable.run_arrays([np.array([-1.0, 2.0], np.float32)])[0].tolist() == [0.0, 2.0]
    assert isolated.inner.generation == generation


def test_an_open_option_that_cannot_be_pickled_is_the_callers_error():
    device = hal.open_device("template", isolate=True, timeout=30, hook=lambda: 0)
    try:
        with pytest.raises(PolyhalError, match=r"^template:0 worker start \(Adapter\.open\): "
                                               r"options\['hook'\] cannot be sent to the "
                                               "device's worker process") as info:
            device.capabilities  # noqa: B018  (the worker starts here)
        assert not isinstance(info.value, DeviceError)
    finally:
        device.close()


# --------------------------------------------------------------------------- memory


def test_an_array_too_large_to_copy_is_the_callers_error(device):
    raises_exactly(InputBindingError, _where(device, "Device.upload") + "the array "
                   + HUGE_TYPE + r" cannot be copied: out of memory \(MemoryError",
                   device.upload, HUGE)
    executable = device.compile(relu_graph(), CompileOptions())
    # An isolated device's run_arrays sends the arrays: the request names the one it could not.
    isolated = isinstance(device.inner, IsolatedDevice)
    where = _where(device, "Executable.run" if isolated else "Device.upload")
    raises_exactly(InputBindingError, where + (r"arrays\[0\] " if isolated else "the array ")
                   + HUGE_TYPE + " cannot be copied: out of memory", executable.run_arrays,
                   [HUGE])


@pytest.mark.parametrize("isolate", [False, True])
def test_a_device_without_room_for_an_array_blames_the_array(no_room, isolate):
    device = hal.open_device(no_room, isolate=isolate, timeout=30)
    try:
        array = np.ones(NO_ROOM_ABOVE + 1, np.float32)
        message = (r"^test-no-room:0 Device\.upload: the array \(float32, shape \(5,\), 20 "
                   r"bytes\) cannot be copied: out of memory \(MemoryError: no room for 20 "
                   r"bytes\)$")
        raises_exactly(InputBindingError, message, device.upload, array)
        executable = device.compile(relu_graph(), CompileOptions())
        raises_exactly(InputBindingError, message, executable.run_arrays, [array])
        small = np.ones(NO_ROOM_ABOVE, np.float32)
        assert executable.run_arrays([small])[0].tolist() == small.tolist()
    finally:
        device.close()


# --------------------------------------------------------------------------- masked arrays


def test_a_masked_array_is_refused_not_uploaded_without_its_mask(device):
    message = (_where(device, "Device.upload") + r"got a masked array, whose mask a device "
               r"would ignore; pass its data or array\.filled\(value\)$")
    raises_exactly(InputBindingError, message, device.upload, MASKED)
    executable = device.compile(relu_graph(), CompileOptions())
    raises_exactly(InputBindingError, message, executable.run_arrays, [MASKED])
    filled = executable.run_arrays([MASKED.filled(0)])[0]  # what the message suggests
    assert filled.tolist() == [1.0, 0.0, 2.0]


@pytest.mark.parametrize(("adapter", "isolate"), [*((a, False) for a in ADAPTERS),
                                                  ("reference", True)],
                         ids=[*ADAPTERS, "isolated"])
def test_a_closed_device_refuses_every_call_alike(adapter, isolate):
    """An isolated device refused calls after close; an in-process one went on (or failed
    inside the adapter, whose resources close had freed)."""
    device = hal.open_device(adapter, isolate=isolate, timeout=30)
    executable = device.compile(relu_graph(), CompileOptions())
    buffer = device.upload(np.ones(2, np.float32))
    device.close()
    device.close()  # a second close does nothing
    closed = "the device is closed"
    raises_exactly(DeviceError, _where(device, "Device.upload") + closed, device.upload,
                   np.ones(2, np.float32))
    raises_exactly(DeviceError, _where(device, "Device.download") + closed, device.download,
                   buffer)
    raises_exactly(DeviceError, _where(device, "Device.compile") + closed, device.compile,
                   relu_graph(), CompileOptions())
    raises_exactly(DeviceError, _where(device, "Executable.run") + closed, executable.run,
                   [buffer])
