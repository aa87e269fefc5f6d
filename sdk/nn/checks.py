"""Argument and input checks shared by the layers.

Constructor arguments fail with an :class:`~polyhal.errors.IRError` naming the
layer class and the argument; inputs fail at build time with a
:class:`~polyhal.errors.VerificationError`, to which
:meth:`polyhal.nn.Module.__call__` prepends the layer's dotted name.
"""

from __future__ import annotations

import math
from typing import Any

from polyhal.errors import IRError, VerificationError
from polyhal.ir.builder import Var
from polyhal.ir.dtypes import DType


def positive_int(value: Any, what: str, layer: str, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum``; an :class:`IRError` naming ``layer`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise IRError(f"{layer}: {what} must be an int >= {minimum}, got {value!r}")
    return value


def int_pair(value: Any, what: str, layer: str, minimum: int = 1) -> tuple[int, int]:
    """An int or a pair of ints, each ``>= minimum``, as a pair."""
    items = value if isinstance(value, tuple | list) else (value, value)
    if len(items) != 2:
        raise IRError(f"{layer}: {what} must be an int or a pair of ints, got {value!r}")
    first, second = (positive_int(v, what, layer, minimum) for v in items)
    return first, second


def finite_float(value: Any, what: str, layer: str) -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IRError(f"{layer}: {what} must be a finite number, got {value!r}")
    return float(value)


def float_dtype(value: Any, layer: str) -> DType:
    """A floating-point :class:`DType` from a DType or its name."""
    dtype = DType.parse(value, f"{layer}: dtype")
    if not dtype.is_float:
        raise IRError(f"{layer}: dtype must be a floating-point type, got {dtype.value}")
    return dtype


def graph_value(x: Any) -> Var:
    """``x`` if it is a builder value; a :class:`VerificationError` otherwise."""
    if not isinstance(x, Var):
        raise VerificationError(f"input must be a graph value (Var), got {type(x).__name__}; "
                                "to run on arrays use model.predict(...)")
    return x


def matching_dtype(x: Var, dtype: DType) -> None:
    """The input must have the layer's dtype (polyhal never casts implicitly)."""
    if x.dtype != dtype:
        remedy = (f"cast the input or build the layer with dtype={x.dtype.value!r}"
                  if x.dtype.is_float else f"cast the input to {dtype.value}")
        raise VerificationError(f"input {x.type} is {x.dtype.value} but the layer's parameters "
                                f"are {dtype.value}; {remedy}")


def axis_in_range(x: Var, axis: int, what: str = "axis") -> int:
    """``axis`` normalized to ``0 .. rank-1`` of ``x``."""
    rank = x.type.rank
    if not -rank <= axis < rank:
        raise VerificationError(f"{what}={axis} is out of range for input {x.type} (rank {rank})")
    return axis % rank
