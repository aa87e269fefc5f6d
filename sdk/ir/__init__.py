"""The tensor IR: dtypes, tensor types with symbolic dims, values, nodes, graphs,
the verifier, the builder, the printer and serialization."""

from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import (
    ALL_TYPES,
    FLOAT_TYPES,
    INT_TYPES,
    NUMERIC_TYPES,
    SIGNED_INT_TYPES,
    SIGNED_NUMERIC_TYPES,
    DType,
    b8,
    bf16,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    u8,
)
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ir.limits import DEFAULT_LIMITS, Limits, current_limits, use_limits
from polyhal.ir.printer import format_graph
from polyhal.ir.serialize import load, save
from polyhal.ir.types import TensorType

__all__ = [
    "ALL_TYPES",
    "DEFAULT_LIMITS",
    "FLOAT_TYPES",
    "INT_TYPES",
    "NUMERIC_TYPES",
    "SIGNED_INT_TYPES",
    "SIGNED_NUMERIC_TYPES",
    "DType",
    "Graph",
    "GraphBuilder",
    "Limits",
    "Node",
    "TensorType",
    "Value",
    "Var",
    "b8",
    "bf16",
    "current_limits",
    "f16",
    "f32",
    "f64",
    "format_graph",
    "i8",
    "i16",
    "i32",
    "i64",
    "load",
    "save",
    "u8",
    "use_limits",
]
