"""The pytest plugin: ``pytest --pyargs polyhal.conformance --adapter NAME``.

Registered through the ``pytest11`` entry point, it adds the options below;
the cases themselves are collected from ``polyhal/conformance/test_conformance.py``.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """The conformance options."""
    group = parser.getgroup("polyhal conformance")
    group.addoption("--adapter", action="append", default=[], metavar="NAME",
                    help="adapter to grade (repeatable)")
    group.addoption("--conformance-level", action="append", default=[], metavar="LEVEL",
                    help="only this level (repeatable; default: all)")
    group.addoption("--conformance-profile", default="ci", choices=["ci", "full"],
                    help="case-space size (default: ci)")
    group.addoption("--conformance-timeout", type=float, default=None, metavar="SECONDS",
                    help="per-call timeout of the device under test")
