"""The op registry and builder functions for every op.

Each registered op is callable here under its snake_case name, on builder
values (:class:`polyhal.ir.Var`)::

    y = ops.relu(x @ w + b)
    s = ops.reduce_sum(y, [1], keepdims=0)
    a, b = ops.split(x, axis=1, num_outputs=2)

Keyword arguments are attributes; ``name=`` names the node, ``num_outputs=``
asks for optional outputs, ``domain=`` picks a domain other than ``core``.
"""

from __future__ import annotations

import functools
import keyword
import re
from typing import Any

from polyhal.ops import (  # noqa: F401  (importing registers the ops)
    elementwise,
    linalg,
    movement,
    nn,
    normalization,
    quant,
    quantum,
    reduce,
    requantize,
    scatter,
    shape,
    snn,
    transposed_conv,
)
from polyhal.ops.registry import (
    REQUIRED,
    Attr,
    AttrKind,
    Input,
    OpDef,
    Output,
    all_ops,
    domains,
    get_op,
    lookup,
    register,
)

__all__ = ["REQUIRED", "Attr", "AttrKind", "Input", "OpDef", "Output", "all_ops", "apply",
           "domains", "get_op", "lookup", "register", "snake_name"]


@functools.cache
def snake_name(op_name: str) -> str:
    """The builder-function name of an op: ``ReduceSum`` -> ``reduce_sum``, ``And`` -> ``and_``."""
    text = op_name.replace("MatMul", "Matmul").replace("NaN", "Nan")
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", text).lower()
    return name + "_" if keyword.iskeyword(name) else name


def apply(op: str, *inputs: Any, domain: str = "core", builder: Any = None, **kwargs: Any) -> Any:
    """Apply ``domain.op`` to builder values; see the module docstring."""
    from polyhal.ir.builder import Var

    owner = builder
    for value in inputs:
        if isinstance(value, Var):
            owner = value.builder
            break
    if owner is None:
        raise TypeError(f"{domain}.{op}: pass at least one graph value, or builder=")
    return owner.op(op, *inputs, domain=domain, **kwargs)


def _builder_function(opdef: OpDef) -> Any:
    def call(*inputs: Any, **kwargs: Any) -> Any:
        return apply(opdef.name, *inputs, domain=opdef.domain, **kwargs)

    call.__name__ = snake_name(opdef.name)
    call.__doc__ = opdef.doc
    return call


def __getattr__(name: str) -> Any:
    for opdef in all_ops():
        if snake_name(opdef.name) == name and opdef.domain == "core":
            return _builder_function(opdef)
    raise AttributeError(f"polyhal.ops has no op or attribute {name!r}")
