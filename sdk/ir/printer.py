"""The textual form of a graph: stable, readable, diff-friendly.

::

    graph mlp(x: float32[batch, 4]) -> (y: float32[batch, 2]) {
      const w: float32[4, 2]
      matmul_1: float32[batch, 2] = core.MatMul(x, w)
      y: float32[batch, 2] = core.Relu(matmul_1)
    }

Attributes are printed in name order inside ``<...>``; a node's name is shown
after ``#`` when it differs from its first output's name.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node, Value

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_SMALL = 8


def format_name(name: str) -> str:
    """A value or node name, quoted when it is not a plain identifier."""
    return name if _PLAIN.fullmatch(name) else json.dumps(name)


def format_tensor(array: np.ndarray) -> str:
    """A tensor literal: values when small, else only its type."""
    dtype = DType.from_numpy(array.dtype)
    head = f"{dtype.value}[{', '.join(str(d) for d in array.shape)}]"
    if array.size > _SMALL:
        return f"tensor<{head}>"
    values = array.astype(np.float64 if dtype.is_low_precision else array.dtype).ravel().tolist()
    return f"tensor<{head}>{values}"


def format_attr(value: Any) -> str:
    """One attribute value."""
    if isinstance(value, np.ndarray):
        return format_tensor(value)
    if isinstance(value, DType):
        return value.value
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    return str(value)


def _value(value: Value) -> str:
    return f"{format_name(value.name)}: {value.type}"


def format_node(node: Node) -> str:
    """One line: ``outputs = domain.Op<attrs>(inputs)``."""
    outputs = ", ".join(_value(o) for o in node.outputs)
    attrs = ""
    if node.attrs:
        attrs = "<" + ", ".join(f"{k}={format_attr(node.attrs[k])}"
                                for k in sorted(node.attrs)) + ">"
    inputs = ", ".join(format_name(i) if i else "_" for i in node.inputs)
    line = f"{outputs} = {node.qualified_op}{attrs}({inputs})"
    if node.outputs[0].name != node.name:
        line += f"  # {format_name(node.name)}"
    return line


def format_graph(graph: Graph) -> str:
    """The whole graph as text."""
    inputs = ", ".join(_value(v) for v in graph.inputs)
    outputs = ", ".join(_value(v) for v in graph.outputs)
    lines = [f"graph {format_name(graph.name or 'graph')}({inputs}) -> ({outputs}) {{"]
    for name, array in graph.constants.items():
        lines.append(f"  const {format_name(name)} = {format_tensor(array)}")
    lines.extend(f"  {format_node(node)}" for node in graph.nodes)
    lines.append("}")
    return "\n".join(lines)
