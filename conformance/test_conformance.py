"""Conformance cases as pytest tests (collected with ``--pyargs polyhal.conformance``).

Each case of each ``--adapter`` becomes one test whose id is the case id. The
device under test runs isolated; expected failures from the adapter's
manifest become xfails, an unexpected pass fails, and a case that does not
apply to the device (L3) is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from polyhal.conformance.manifest import load_manifest, unsettled
from polyhal.conformance.profiles import get_profile, parse_levels
from polyhal.conformance.runner import (
    apply_expectations,
    device_timeout,
    execute_case,
    generate_cases,
)
from polyhal.hal import get_adapter, open_device
from polyhal.hal.isolation import check_timeout


def _options(config: pytest.Config) -> tuple[list[str], tuple[str, ...], str, float | None]:
    return (config.getoption("--adapter"), parse_levels(config.getoption("--conformance-level")),
            config.getoption("--conformance-profile"),
            config.getoption("--conformance-timeout"))


def plugin_timeout(profile: str, timeout: float | None) -> float:
    """The per-call timeout of the devices under test, by the rules of ``polyhal
    conformance --timeout`` (:func:`~polyhal.conformance.runner.device_timeout`):
    ``--conformance-timeout``, else ``POLYHAL_DEVICE_TIMEOUT``, else the profile's;
    a value that is not a positive number of seconds is a :class:`PolyhalError`."""
    if timeout is not None:
        check_timeout("--conformance-timeout", timeout)
    return device_timeout(timeout, get_profile(profile).case_timeout_s)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per case of each adapter."""
    if "case" not in metafunc.fixturenames:
        return
    adapters, levels, profile, timeout = _options(metafunc.config)
    timeout = plugin_timeout(profile, timeout) if adapters else None
    params = []
    for adapter in adapters:
        device = open_device(adapter, isolate=True, timeout=timeout)
        try:
            caps = device.capabilities
        finally:
            device.close()
        for case in generate_cases(caps, levels, profile):
            params.append(pytest.param(adapter, case, id=f"{adapter}:{case.id}"))
    if not params:
        params = [pytest.param(None, None, id="no-adapter",
                               marks=pytest.mark.skip(reason="pass --adapter NAME"))]
    metafunc.parametrize(("adapter", "case"), params)


@pytest.fixture(scope="session")
def devices(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """One isolated device per adapter under test, opened on first use."""
    opened: dict[str, Any] = {}
    _, _, profile, timeout = _options(request.config)
    timeout = plugin_timeout(profile, timeout)

    def get(name: str) -> Any:
        if name not in opened:
            opened[name] = open_device(name, isolate=True, timeout=timeout)
        return opened[name]

    yield {"get": get}
    for device in opened.values():
        device.close()


def test_case(adapter: str, case: Any, devices: dict[str, Any]) -> None:
    """Grade one case; expected failures xfail."""
    device = devices["get"](adapter)
    manifest = load_manifest(type(get_adapter(adapter)))
    shared = next((e for e in unsettled() if e.matches(case.id)), None)
    result = apply_expectations(execute_case(case, device), manifest.match(case.id), shared)
    if result.outcome == "not_applicable":
        pytest.skip(f"not applicable: {result.message}")
    if result.outcome == "xfail":
        pytest.xfail(result.message)
    if result.outcome != "passed":
        pytest.fail(f"{result.outcome}: {result.message}", pytrace=False)
