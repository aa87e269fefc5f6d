"""Initializers: how a :class:`~polyhal.nn.Parameter` draws its value.

Every function here is a factory: call it to get an :class:`Initializer`, a
callable ``init(param, rng) -> ndarray`` that draws ``param.shape`` values
from the ``numpy.random.Generator`` it is given (so a model's
:meth:`~polyhal.nn.Module.initialize` seeds everything from one seed). Values
are drawn in float64 and rounded once to the parameter's dtype, so a float32
and a float64 model initialized from the same seed agree to float32 precision.

The scaled initializers read ``param.fans`` (fan-in, fan-out). A layer states
them; the default for a parameter that does not follows polyhal's layouts:

* rank 0 and 1: ``(n, n)`` with ``n`` the element count;
* rank 2, a matmul weight ``[in, out]`` (``x @ W``): ``(in, out)``;
* rank >= 3, an ONNX ``Conv`` weight ``[out, in/groups, *kernel]``:
  ``(in/groups * prod(kernel), out * prod(kernel))``.

>>> import numpy as np
>>> from polyhal import nn
>>> p = nn.Parameter((256, 10), nn.init.kaiming_uniform())
>>> value = nn.init.kaiming_uniform()(p, np.random.default_rng(0))
>>> bool(np.abs(value).max() <= np.sqrt(6 / 256))
True

A custom initializer is any callable with that signature:
``def small(param, rng): return rng.normal(0, 1e-3, param.shape)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from polyhal.errors import IRError

if TYPE_CHECKING:
    from polyhal.nn.parameter import Parameter

Fans = tuple[int, int]
Draw = Callable[[tuple[int, ...], Fans, np.random.Generator], np.ndarray]

__all__ = ["Initializer", "constant", "default_fans", "kaiming_normal", "kaiming_uniform",
           "normal", "ones", "uniform", "xavier_normal", "xavier_uniform", "zeros"]


class Initializer:
    """A named initializer: ``init(param, rng)`` returns an array of ``param.shape``."""

    def __init__(self, description: str, draw: Draw) -> None:
        self.description = description
        self._draw = draw
        self.recipe: tuple[str, tuple[Any, ...], dict[str, Any]] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        if self.recipe is None:
            raise TypeError(f"initializer {self.description} cannot be pickled")
        return _remake, self.recipe

    def __call__(self, param: Parameter, rng: np.random.Generator) -> np.ndarray:
        return self._draw(param.shape, param.fans, rng)

    def __repr__(self) -> str:
        return self.description


def default_fans(shape: tuple[int, ...]) -> Fans:
    """``(fan_in, fan_out)`` of a parameter of ``shape`` under polyhal's layouts."""
    if len(shape) < 2:
        n = int(np.prod(shape, dtype=np.int64))
        return n, n
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[2:], dtype=np.int64))
    return shape[1] * receptive, shape[0] * receptive


def _factory(function: Callable[..., Initializer]) -> Callable[..., Initializer]:
    """Mark ``function`` as a factory, and let what it makes pickle as the call that made it."""

    @functools.wraps(function)
    def make(*args: Any, **kwargs: Any) -> Initializer:
        made = function(*args, **kwargs)
        made.recipe = (function.__name__, args, kwargs)
        return made

    make.is_initializer_factory = True  # type: ignore[attr-defined]
    return make


def _remake(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Initializer:
    return globals()[name](*args, **kwargs)


def _finite(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IRError(f"init.{where}: {what} must be a finite number, got {value!r}")
    return float(value)


def _non_negative(value: Any, what: str, where: str) -> float:
    if _finite(value, what, where) < 0:
        raise IRError(f"init.{where}: {what} must be >= 0, got {value!r}")
    return float(value)


def _fan(fans: Fans, mode: str) -> int:
    return max(fans[0] if mode == "fan_in" else fans[1], 1)


def _mode(mode: str, where: str) -> str:
    if mode not in ("fan_in", "fan_out"):
        raise IRError(f"init.{where}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return mode


@_factory
def zeros() -> Initializer:
    """All zeros (the default for biases)."""
    return Initializer("zeros()", lambda shape, fans, rng: np.zeros(shape))


@_factory
def ones() -> Initializer:
    """All ones."""
    return Initializer("ones()", lambda shape, fans, rng: np.ones(shape))


@_factory
def constant(value: Any) -> Initializer:
    """``value`` (a number, or an array that broadcasts to the parameter's shape)."""
    try:
        array = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise IRError(f"init.constant: value must be a number or a numeric array, "
                      f"got {type(value).__name__}") from None

    def draw(shape: tuple[int, ...], fans: Fans, rng: np.random.Generator) -> np.ndarray:
        try:
            return np.broadcast_to(array, shape).copy()
        except ValueError:
            raise IRError(f"init.constant: value of shape {array.shape} does not broadcast to "
                          f"the parameter shape {shape}") from None

    shown = f"{float(array):g}" if array.ndim == 0 else f"array{list(array.shape)}"
    return Initializer(f"constant({shown})", draw)


@_factory
def normal(std: float = 1.0, mean: float = 0.0) -> Initializer:
    """Normal with standard deviation ``std`` around ``mean``."""
    std = _non_negative(std, "std", "normal")
    mean = _finite(mean, "mean", "normal")
    return Initializer(f"normal(std={std:g}, mean={mean:g})",
                       lambda shape, fans, rng: rng.normal(mean, std, shape))


@_factory
def uniform(a: float = 0.0, b: float = 1.0) -> Initializer:
    """Uniform on ``[a, b)``."""
    a, b = _finite(a, "a", "uniform"), _finite(b, "b", "uniform")
    if a > b:
        raise IRError(f"init.uniform: need a <= b, got a={a:g}, b={b:g}")
    return Initializer(f"uniform({a:g}, {b:g})", lambda shape, fans, rng: rng.uniform(a, b, shape))


@_factory
def xavier_uniform(gain: float = 1.0) -> Initializer:
    """Glorot uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(6 / (fan_in + fan_out))``."""
    gain = _non_negative(gain, "gain", "xavier_uniform")

    def draw(shape: tuple[int, ...], fans: Fans, rng: np.random.Generator) -> np.ndarray:
        bound = gain * math.sqrt(6.0 / max(fans[0] + fans[1], 1))
        return rng.uniform(-bound, bound, shape)

    return Initializer(f"xavier_uniform(gain={gain:g})", draw)


@_factory
def xavier_normal(gain: float = 1.0) -> Initializer:
    """Glorot normal: ``N(0, std^2)``, ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    gain = _non_negative(gain, "gain", "xavier_normal")

    def draw(shape: tuple[int, ...], fans: Fans, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0.0, gain * math.sqrt(2.0 / max(fans[0] + fans[1], 1)), shape)

    return Initializer(f"xavier_normal(gain={gain:g})", draw)


@_factory
def kaiming_uniform(gain: float = math.sqrt(2.0), mode: str = "fan_in") -> Initializer:
    """He uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(3 / fan)``.

    The default gain ``sqrt(2)`` suits ReLU (variance ``2 / fan_in``); it is the
    default weight initializer of :class:`~polyhal.nn.Linear` and
    :class:`~polyhal.nn.Conv2d`.
    """
    gain = _non_negative(gain, "gain", "kaiming_uniform")
    mode = _mode(mode, "kaiming_uniform")

    def draw(shape: tuple[int, ...], fans: Fans, rng: np.random.Generator) -> np.ndarray:
        bound = gain * math.sqrt(3.0 / _fan(fans, mode))
        return rng.uniform(-bound, bound, shape)

    return Initializer(f"kaiming_uniform(gain={gain:.4g}, mode={mode!r})", draw)


@_factory
def kaiming_normal(gain: float = math.sqrt(2.0), mode: str = "fan_in") -> Initializer:
    """He normal: ``N(0, std^2)``, ``std = gain / sqrt(fan)``."""
    gain = _non_negative(gain, "gain", "kaiming_normal")
    mode = _mode(mode, "kaiming_normal")

    def draw(shape: tuple[int, ...], fans: Fans, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0.0, gain / math.sqrt(_fan(fans, mode)), shape)

    return Initializer(f"kaiming_normal(gain={gain:.4g}, mode={mode!r})", draw)
