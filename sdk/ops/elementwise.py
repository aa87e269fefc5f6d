"""Elementwise ops (ONNX semantics): unary math, activations, binary arithmetic,
comparisons, logic, and the variadic Sum/Mean/Max/Min."""

from __future__ import annotations

import numpy as np

from polyhal.ir.dtypes import NUMERIC_TYPES, SIGNED_NUMERIC_TYPES
from polyhal.ops.infer import broadcast_all, same_as_input
from polyhal.ops.registry import Input, OpDef, Output, register


def _unary(name: str, kernel, dtypes, doc: str, since: int, **extra) -> OpDef:
    return register(OpDef(
        name=name, inputs=(Input("X", "T"),), outputs=(Output("Y", "T"),),
        type_vars={"T": dtypes}, infer=same_as_input(0), kernel=kernel, doc=doc,
        onnx_since=since, **extra))


def _binary(name: str, kernel, dtypes, doc: str, since: int, **extra) -> OpDef:
    return register(OpDef(
        name=name, inputs=(Input("A", "T"), Input("B", "T")), outputs=(Output("C", "T"),),
        type_vars={"T": dtypes}, infer=broadcast_all(), kernel=kernel, doc=doc,
        onnx_since=since, **extra))


_unary("Relu", lambda x: np.maximum(x, x.dtype.type(0)), SIGNED_NUMERIC_TYPES,
       "max(x, 0), elementwise.", 14, differentiable=True)
_binary("Add", lambda a, b: np.add(a, b), NUMERIC_TYPES,
        "a + b with broadcasting; integers wrap in two's complement.", 14, differentiable=True)
_binary("Mul", lambda a, b: np.multiply(a, b), NUMERIC_TYPES,
        "a * b with broadcasting; integers wrap in two's complement.", 14, differentiable=True)
