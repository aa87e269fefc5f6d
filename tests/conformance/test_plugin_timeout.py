"""The pytest plugin's device timeout follows the rules of ``polyhal conformance --timeout``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from polyhal.conformance.profiles import get_profile
from polyhal.conformance.test_conformance import plugin_timeout
from polyhal.errors import PolyhalError


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_a_timeout_that_is_not_positive_names_the_option(monkeypatch, timeout):
    monkeypatch.delenv("POLYHAL_DEVICE_TIMEOUT", raising=False)
    with pytest.raises(PolyhalError, match=rf"--conformance-timeout: timeout={timeout!r} must "
                                           "be a positive number of seconds"):
        plugin_timeout("ci", timeout)


def test_without_the_option_the_variable_comes_before_the_profile(monkeypatch):
    monkeypatch.setenv("POLYHAL_DEVICE_TIMEOUT", "7")
    assert plugin_timeout("ci", None) == 7.0
    assert plugin_timeout("ci", 3.0) == 3.0
    monkeypatch.delenv("POLYHAL_DEVICE_TIMEOUT")
    assert plugin_timeout("full", None) == get_profile("full").case_timeout_s
    monkeypatch.setenv("POLYHAL_DEVICE_TIMEOUT", "0")
    with pytest.raises(PolyhalError, match=r"POLYHAL_DEVICE_TIMEOUT='0' must be a positive"):
        plugin_timeout("ci", None)


def test_the_plugin_refuses_a_zero_timeout_naming_the_option(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "polyhal.conformance", "--adapter",
         "template", "--conformance-timeout", "0", "--collect-only", "-q",
         "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert ("--conformance-timeout: timeout=0.0 must be a positive number of seconds"
            in result.stdout + result.stderr)
