"""The examples in polyhal.nn's docstrings run as written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import polyhal.nn

MODULES = ["polyhal.nn", *(f"polyhal.nn.{info.name}"
                          for info in pkgutil.iter_modules(polyhal.nn.__path__))]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
