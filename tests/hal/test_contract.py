"""The HAL contract: registration checks, discovery, run-time enforcement, and
the grading of deliberately broken adapters by the conformance suite."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest

from polyhal import hal
from polyhal.adapters.template import TemplateAdapter
from polyhal.conformance import run_suite
from polyhal.errors import AdapterContractError, DeviceError, InputBindingError, PolyhalError
from polyhal.hal import Buffer, Capabilities, CompileOptions, open_device
from polyhal.ir import TensorType

from . import broken_adapters as broken


@pytest.fixture
def registered():
    names = []

    def add(cls):
        hal.register(cls, replace=True)
        names.append(cls.name)
        return cls

    yield add
    for name in names:
        hal.unregister(name)


def test_builtin_adapters_are_discovered():
    assert {"reference", "template"} <= set(hal.adapters())
    assert hal.check_adapter_class(TemplateAdapter).ok


def test_missing_required_method_is_a_registration_error():
    with pytest.raises(AdapterContractError) as info:
        hal.register(broken.MissingUploadAdapter)
    message = str(info.value)
    assert "adapter 'missing-upload'" in message
    assert "Device.upload is required but MissingUploadDevice does not define it" in message
    assert "Fix: define `def upload(self, array: np.ndarray) -> Buffer`" in message


def test_incompatible_api_version_is_a_registration_error():
    with pytest.raises(AdapterContractError, match=r"api_version 7\.\.9 does not include the "
                                                   r"HAL contract version 1"):
        hal.register(broken.FutureApiAdapter)


def test_bad_signature_and_name_are_reported_together():
    class BadDevice(broken.TemplateDevice):
        def upload(self):  # takes no array
            return None

    class BadAdapter(TemplateAdapter):
        name = "Bad Name"
        device_class = BadDevice

    report = hal.check_adapter_class(BadAdapter)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "Adapter.name is 'Bad Name'" in text
    assert "Device.upload of " in text and "cannot be called the way the HAL calls it" in text


def test_plugin_that_fails_to_import_is_listed_not_fatal(monkeypatch):
    real = metadata.entry_points

    def entry_points(group=None, **kwargs):
        found = list(real(group=group, **kwargs)) if group else []
        if group == hal.ENTRY_POINT_GROUP:
            found.append(metadata.EntryPoint("boom", "tests.hal.boom_plugin:Adapter", group))
        return found

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    hal.discover(refresh=True)
    try:
        failures = {f.name: f for f in hal.plugin_failures()}
        assert "boom" in failures
        assert "RuntimeError: boom: this plugin cannot be imported" in failures["boom"].error
        assert {"reference", "template"} <= set(hal.adapters())
        with pytest.raises(AdapterContractError, match="failed to load"):
            hal.get_adapter("boom")
    finally:
        monkeypatch.undo()
        hal.discover(refresh=True)


def test_polyhal_adapters_env_narrows_the_set(monkeypatch):
    monkeypatch.setenv("POLYHAL_ADAPTERS", "template")
    assert list(hal.adapters()) == ["template"]
    with pytest.raises(PolyhalError, match="no adapter named 'reference'"):
        hal.get_adapter("reference")


def test_capabilities_are_validated():
    with pytest.raises(AdapterContractError, match=r"unknown op 'core\.Nope'"):
        Capabilities(ops={"Nope": ["float32"]})
    with pytest.raises(AdapterContractError, match="does not admit bool"):
        Capabilities(ops={"Exp": ["bool"]})
    with pytest.raises(AdapterContractError, match="precisions"):
        Capabilities(ops={}, precisions=frozenset({"fp8"}))


def test_bad_addresses():
    assert hal.parse_address("gpu-sim:2") == ("gpu-sim", 2)
    for bad in ("", "GPU", "gpu:-1", "gpu:x", "a b"):
        with pytest.raises(PolyhalError, match="bad device address"):
            hal.parse_address(bad)


def test_runtime_contract_violations_name_the_adapter_and_call(registered):
    registered(broken.WrongDtypeAdapter)
    from polyhal import ops
    from polyhal.ir import GraphBuilder, f32

    g = GraphBuilder()
    g.output(ops.relu(g.input("x", f32[3])))
    device = open_device("wrong-dtype")
    executable = device.compile(g.build(), CompileOptions())
    with pytest.raises(AdapterContractError, match=r"wrong-dtype:0 Executable.run: output .* got "
                                                   r"float64\[3\], expected float32\[3\]"):
        executable.run([device.upload(np.ones(3, np.float32))])
    other = open_device("template")
    # The caller's buffers are the caller's error, not the adapter's.
    with pytest.raises(InputBindingError, match="input 'x': the buffer belongs to template:0"):
        executable.run([other.upload(np.ones(3, np.float32))])
    with pytest.raises(InputBindingError, match="expected a Buffer"):
        device.download(np.ones(3))
    stray = Buffer(device.inner, TensorType.of(np.ones(2, np.float32)), "not an array")
    with pytest.raises(AdapterContractError, match=r"wrong-dtype:0 Device\.download returned an "
                                                   r"array of dtype <U12"):
        device.download(stray)
    stray.handle = _Unreadable()
    with pytest.raises(DeviceError, match=r"wrong-dtype:0 Device\.download raised"):
        device.download(stray)


def test_a_result_of_the_wrong_shape_or_device_names_the_output():
    from polyhal import ops
    from polyhal.hal.checked import CheckedExecutable
    from polyhal.hal.contract import Executable
    from polyhal.ir import GraphBuilder, f32

    g = GraphBuilder()
    g.output(ops.relu(g.input("x", f32["n", 2])), name="y")
    device, other = open_device("template"), open_device("reference")

    class Returning(Executable):
        def __init__(self, result):
            self.result = result

        def run(self, inputs):
            return [self.result]

    x = device.upload(np.ones((3, 2), np.float32))
    short = CheckedExecutable(device, Returning(device.upload(np.ones((1, 2), np.float32))),
                              g.build())
    with pytest.raises(AdapterContractError, match=r"template:0 Executable\.run: output 'y': "
                                                   r"dimension 0 is 1, expected n = 3"):
        short.run([x])
    foreign = CheckedExecutable(device, Returning(other.upload(np.ones((3, 2), np.float32))),
                                g.build())
    with pytest.raises(AdapterContractError, match=r"Executable\.run \(output 'y'\): the buffer "
                                                   r"belongs to reference:0"):
        foreign.run([x])


def test_every_run_is_checked_though_each_signature_is_checked_once():
    from polyhal import ops
    from polyhal.hal.checked import CheckedExecutable
    from polyhal.hal.contract import Executable
    from polyhal.ir import GraphBuilder, f32

    g = GraphBuilder()
    g.output(ops.relu(g.input("x", f32["n", 2])), name="y")
    device = open_device("template")

    class Echo(Executable):  # returns its input, or a queued result
        def __init__(self):
            self.results: list[Buffer] = []

        def run(self, inputs):
            return [self.results.pop()] if self.results else [inputs[0]]

    echo = Echo()
    checked = CheckedExecutable(device, echo, g.build())
    x = device.upload(np.ones((3, 2), np.float32))
    for _ in range(3):  # the checked signature is remembered
        assert checked.run([x])[0] is x
    echo.results.append(device.upload(np.ones((4, 2), np.float32)))  # same inputs, bad output
    with pytest.raises(AdapterContractError, match=r"output 'y': dimension 0 is 4, expected "
                                                   r"n = 3"):
        checked.run([x])
    wrong = device.upload(np.ones((3, 2), np.float64))
    with pytest.raises(InputBindingError, match=r"input 'x': got float64\[3, 2\]"):
        checked.run([wrong])
    retyped = Buffer(device.inner, TensorType(f32, (3, 2)), x.handle)  # equal, not same
    assert checked.run([retyped])[0] is retyped
    echo.results.append(Buffer(device.inner, TensorType(f32, (3, 3)), x.handle))
    with pytest.raises(AdapterContractError, match="dimension 1 is 3, expected 2"):
        checked.run([retyped])


class _Unreadable:
    """A handle numpy cannot read, so the adapter's download raises."""

    def __array__(self, *args, **kwargs):
        raise RuntimeError("device memory unreadable")


def _outcomes(report, prefix):
    """Outcomes of the cases under ``prefix`` that have data (an empty tensor hides any defect)."""
    return {c.outcome for c in report.cases if c.id.startswith(prefix)
            and c.shape_class != "empty"}


@pytest.mark.parametrize(("adapter", "defect_prefix", "outcome"), [
    (broken.WrongAddAdapter, "L1/core.Add/", "failed"),
    (broken.WrongDtypeAdapter, "L1/core.Relu/", "failed"),
    (broken.RefusingAdapter, "L1/core.Mul/", "failed"),
    (broken.CrashingAdapter, "L1/core.Mul/float64/rank4", "crashed"),
    (broken.HangingAdapter, "L1/core.Mul/float64/rank4", "timeout"),
])
def test_broken_adapter_is_graded(registered, adapter, defect_prefix, outcome):
    registered(adapter)
    report = run_suite(adapter.name, levels=["L1"], profile="ci", timeout=3.0)
    assert _outcomes(report, defect_prefix) == {outcome}
    others = [c for c in report.cases if not c.id.startswith(defect_prefix)]
    assert others
    assert all(c.outcome == "passed" for c in others), [
        (c.id, c.outcome, c.message) for c in others if c.outcome != "passed"][:5]
    assert not report.ok
    if adapter is broken.RefusingAdapter:
        refused = [c for c in report.cases if c.id.startswith(defect_prefix)]
        assert {c.outcome for c in refused} == {"failed"}
        assert all("UnsupportedError" in c.message for c in refused)


def test_a_precision_the_device_does_not_offer_is_refused_before_compile():
    from polyhal import ops
    from polyhal.errors import UnsupportedError
    from polyhal.ir import GraphBuilder, f32

    g = GraphBuilder("m")
    g.output(ops.relu(g.input("x", f32[2])))
    with open_device("template") as device, pytest.raises(
            UnsupportedError, match=r"template:0 Device.compile: precision 'fp16' is not offered"):
        device.compile(g.build(), CompileOptions(precision="fp16"))
