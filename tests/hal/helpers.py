"""Helpers shared by the HAL argument tests: a one-node graph, and an exact raise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from polyhal import ops
from polyhal.ir import Graph, GraphBuilder, f32


def relu_graph() -> Graph:
    """``y = relu(x)`` over a float32 vector of any length."""
    g = GraphBuilder("relu")
    g.output(ops.relu(g.input("x", f32["n"])), name="y")
    return g.build()


def raises_exactly(error: type[Exception], match: str, call: Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Exception:
    """What ``call(*args, **kwargs)`` raised: exactly ``error`` (not a subclass), with a
    message matching ``match``."""
    with pytest.raises(error, match=match) as info:
        call(*args, **kwargs)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    return info.value
