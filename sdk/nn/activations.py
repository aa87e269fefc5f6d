"""Activations: parameter-free modules, one core op each.

``ReLU``, ``Tanh``, ``Sigmoid``, ``GELU``, ``LeakyReLU``, ``Softmax``,
``LogSoftmax`` and ``Identity`` (which adds no node). There is no ``Dropout``:
polyhal's ``Dropout`` op is inference-only (the identity), so a dropout layer
would silently do nothing while training.
"""

from __future__ import annotations

from polyhal import ops
from polyhal.errors import IRError
from polyhal.ir.builder import Var
from polyhal.nn import checks
from polyhal.nn.module import Module


class ReLU(Module):
    """``max(x, 0)`` (``core.Relu``)."""

    def forward(self, x: Var) -> Var:
        """Elementwise."""
        return ops.relu(checks.graph_value(x))


class Tanh(Module):
    """``tanh(x)`` (``core.Tanh``)."""

    def forward(self, x: Var) -> Var:
        """Elementwise."""
        return ops.tanh(checks.graph_value(x))


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` (``core.Sigmoid``)."""

    def forward(self, x: Var) -> Var:
        """Elementwise."""
        return ops.sigmoid(checks.graph_value(x))


class GELU(Module):
    """``0.5 x (1 + erf(x / sqrt 2))``, or its ``approximate="tanh"`` form (``core.Gelu``)."""

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            raise IRError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Var) -> Var:
        """Elementwise."""
        return ops.gelu(checks.graph_value(x), approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """``x`` where ``x >= 0``, else ``alpha * x`` (``core.LeakyRelu``)."""

    def __init__(self, alpha: float = 0.01) -> None:
        self.alpha = checks.finite_float(alpha, "alpha", "LeakyReLU")

    def forward(self, x: Var) -> Var:
        """Elementwise."""
        return ops.leaky_relu(checks.graph_value(x), alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:g}"


class Softmax(Module):
    """``exp(x) / sum(exp(x))`` along ``axis`` (``core.Softmax``)."""

    def __init__(self, axis: int = -1) -> None:
        self.axis = _axis(axis, "Softmax")

    def forward(self, x: Var) -> Var:
        """Along ``axis``."""
        checks.axis_in_range(checks.graph_value(x), self.axis)
        return ops.softmax(x, axis=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class LogSoftmax(Module):
    """``x - log(sum(exp(x)))`` along ``axis`` (``core.LogSoftmax``)."""

    def __init__(self, axis: int = -1) -> None:
        self.axis = _axis(axis, "LogSoftmax")

    def forward(self, x: Var) -> Var:
        """Along ``axis``."""
        checks.axis_in_range(checks.graph_value(x), self.axis)
        return ops.log_softmax(x, axis=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class Identity(Module):
    """Returns its input; adds no node."""

    def forward(self, x: Var) -> Var:
        """``x`` itself."""
        return checks.graph_value(x)


def _axis(axis: object, layer: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise IRError(f"{layer}: axis must be an int, got {axis!r}")
    return axis
