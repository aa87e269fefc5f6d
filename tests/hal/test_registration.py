"""Registration and discovery: name clashes, class attributes, plugins that misbehave."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest

from polyhal import hal
from polyhal.adapters.cpu import CpuAdapter
from polyhal.adapters.template import TemplateAdapter
from polyhal.errors import AdapterContractError, PolyhalError
from polyhal.hal import registry


def test_a_builtin_name_is_taken_before_discovery_too(monkeypatch):
    # A fresh registry, as in a new process: nothing discovered yet.
    monkeypatch.setattr(registry, "_adapters", {})
    monkeypatch.setattr(registry, "_instances", {})
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_discovered", False)

    class Impostor(TemplateAdapter):
        name = "cpu"

    with pytest.raises(AdapterContractError, match=r"adapter name 'cpu' is taken by "
                                                   r"polyhal\.adapters\.cpu:CpuAdapter"):
        hal.register(Impostor)
    assert hal.adapters()["cpu"] is CpuAdapter


@pytest.mark.parametrize(("attribute", "value", "problem"), [
    ("worker_env", "X=1", "Adapter.worker_env is 'X=1'"),
    ("worker_env", None, "Adapter.worker_env is None"),
    ("worker_env", {"X": 1}, r"Adapter.worker_env is \{'X': 1\}"),
    ("always_isolate", "no", "Adapter.always_isolate is 'no'"),
    ("manifest", 5, "Adapter.manifest is 5"),
    ("api_version", (True, True), r"Adapter.api_version is \(True, True\)"),
])
def test_class_attributes_are_checked_at_registration(attribute, value, problem):
    broken = type("Broken", (TemplateAdapter,), {"name": "test-broken-attr", attribute: value})
    with pytest.raises(AdapterContractError, match=rf"(?s)adapter 'test-broken-attr' .*{problem}"):
        hal.register(broken)
    assert "test-broken-attr" not in hal.adapters()


def _discover_with(monkeypatch, *extra: tuple[str, str]) -> None:
    """Discovery with ``extra`` (name, value) entry points advertised besides the real ones."""
    real = metadata.entry_points

    def entry_points(group=None, **kwargs):
        found = list(real(group=group, **kwargs)) if group else []
        if group == hal.ENTRY_POINT_GROUP:
            found += [metadata.EntryPoint(name, value, group) for name, value in extra]
        return found

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    hal.discover(refresh=True)


@pytest.fixture
def rediscover(monkeypatch):
    yield lambda *extra: _discover_with(monkeypatch, *extra)
    monkeypatch.undo()
    hal.discover(refresh=True)


def test_a_plugin_that_exits_or_is_no_class_is_listed_not_fatal(rediscover):
    rediscover(("exiter", "tests.hal.exit_plugin:Adapter"), ("notaclass", "os:sep"))
    failures = {f.name: f.error for f in hal.plugin_failures()}
    assert "the plugin called sys.exit(3) while importing" in failures["exiter"]
    assert failures["notaclass"].startswith("entry point 'notaclass' (os:sep) names a str, "
                                            "not an Adapter class")
    assert {"cpu", "reference", "template"} <= set(hal.adapters())


def test_an_interrupted_discovery_propagates(rediscover):
    with pytest.raises(KeyboardInterrupt):
        rediscover(("interrupted", "tests.hal.interrupt_plugin:Adapter"))


class _ProbesAnInt(TemplateAdapter):
    name = "test-probe-int"

    def probe(self) -> Any:
        return 5


class _ProbesStrings(TemplateAdapter):
    name = "test-probe-strings"

    def probe(self) -> Any:
        return ["gpu0"]


@pytest.mark.parametrize(("adapter", "problem"), [
    (_ProbesAnInt, "adapter 'test-probe-int' probe returned int, not a list of DeviceInfo"),
    (_ProbesStrings, "adapter 'test-probe-strings' probe returned a list holding a str"),
])
def test_a_bad_probe_result_is_that_adapters_failure(adapter, problem):
    hal.register(adapter)
    try:
        rows = {name: (devices, error) for name, devices, error in hal.probe_all()}
    finally:
        hal.unregister(adapter.name)
    assert rows[adapter.name][0] is None
    assert rows[adapter.name][1].startswith(problem)
    assert rows["template"][0] and not rows["template"][1]


def _unknown_adapter_error(name: str) -> PolyhalError:
    with pytest.raises(PolyhalError) as error:
        hal.get_adapter(name)
    assert type(error.value) is PolyhalError  # a setting or a typo: not the adapter's fault
    return error.value


def test_a_name_left_out_by_polyhal_adapters_says_so(monkeypatch):
    monkeypatch.setenv("POLYHAL_ADAPTERS", "template")
    assert str(_unknown_adapter_error("reference")) == (
        "no adapter named 'reference' in this process: POLYHAL_ADAPTERS='template' leaves "
        "it out (available: template); add 'reference' to POLYHAL_ADAPTERS or unset it")


def test_an_unknown_name_says_that_polyhal_adapters_narrowed_the_list(monkeypatch):
    monkeypatch.setenv("POLYHAL_ADAPTERS", "template, cpu")
    message = str(_unknown_adapter_error("warp-drive"))
    assert message.startswith("no adapter named 'warp-drive' (available: cpu, template, as "
                              "POLYHAL_ADAPTERS='template, cpu' narrowed the list; left out: ")
    assert "reference" in message.partition("left out: ")[2]


def test_polyhal_adapters_that_selects_nothing_reads_clearly(monkeypatch):
    monkeypatch.setenv("POLYHAL_ADAPTERS", "nope")
    assert "(available: none: POLYHAL_ADAPTERS='nope' selects no registered adapter; " \
           "left out: " in str(_unknown_adapter_error("warp-drive"))
    assert "POLYHAL_ADAPTERS='nope' leaves it out (available: none)" in str(
        _unknown_adapter_error("cpu"))


def test_without_polyhal_adapters_the_message_lists_every_adapter(monkeypatch):
    monkeypatch.delenv("POLYHAL_ADAPTERS", raising=False)
    message = str(_unknown_adapter_error("warp-drive"))
    assert message == f"no adapter named 'warp-drive' (available: {', '.join(hal.adapters())})"
    monkeypatch.setattr(registry, "_adapters", {})
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_discovered", True)
    assert str(_unknown_adapter_error("warp-drive")) == (
        "no adapter named 'warp-drive' (available: none: no adapter is registered)")


def test_check_adapter_names_polyhal_adapters_too(monkeypatch, capsys):
    from polyhal.cli import main

    monkeypatch.setenv("POLYHAL_ADAPTERS", "template")
    assert main(["check-adapter", "reference"]) == 2
    assert capsys.readouterr().err == (
        "polyhal: error: no adapter named 'reference' in this process: "
        "POLYHAL_ADAPTERS='template' leaves it out (available: template); add 'reference' "
        "to POLYHAL_ADAPTERS or unset it\n")
