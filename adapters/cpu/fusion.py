"""Elementwise fusion: chains of float elementwise nodes become one numba ufunc.

A fusion group is a tree of elementwise nodes in one float dtype, joined by
values that have exactly one consumer (so no intermediate is needed
elsewhere). Each group is compiled once per expression and dtype into a
``numba.vectorize`` ufunc — which broadcasts its inputs like numpy — from a
generated module cached on disk, so later processes load it without
compiling. Scalar constants are inlined; other inputs become ufunc arguments.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from polyhal.ir.graph import Graph, Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op

FUSABLE_DTYPES = ("float32", "float64")

_ONE = {
    "Neg": "-{0}", "Abs": "abs({0})", "Exp": "math.exp({0})", "Log": "_log({0})",
    "Sqrt": "_sqrt({0})", "Tanh": "math.tanh({0})",
    "Sigmoid": "1.0 / (1.0 + math.exp(-{0}))", "Relu": "_relu({0})",
    "Reciprocal": "1.0 / {0}", "Sin": "math.sin({0})", "Cos": "math.cos({0})",
    "Floor": "np.floor({0})", "Ceil": "np.ceil({0})", "Erf": "math.erf({0})",
    "Softplus": "(_relu({0}) + math.log1p(math.exp(-abs({0}))))", "Identity": "{0}",
}
_TWO = {"Add": "({0} + {1})", "Sub": "({0} - {1})", "Mul": "({0} * {1})",
        "Div": "({0} / {1})", "Pow": "_pow({0}, {1})", "Max": "_max({0}, {1})",
        "Min": "_min({0}, {1})"}

_PRELUDE = '''\
import math

import numba
import numpy as np


@numba.njit(inline="always")
def _relu(x):
    return x if x > 0 or x != x else 0.0


@numba.njit(inline="always")
def _max(a, b):
    return a if a > b or a != a else b


@numba.njit(inline="always")
def _min(a, b):
    return a if a < b or a != a else b


@numba.njit(inline="always")
def _log(x):
    if x > 0:
        return math.log(x)
    if x == 0:
        return -math.inf
    return math.nan


@numba.njit(inline="always")
def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


@numba.njit(inline="always")
def _pow(a, b):
    return float(a) ** float(b)
'''


def fusable(node: Node, graph: Graph) -> bool:
    """True when ``node`` can join a fusion group."""
    if node.domain != "core" or len(node.outputs) != 1:
        return False
    if node.op not in _ONE and node.op not in _TWO and node.op not in (
            "LeakyRelu", "Elu", "Gelu"):
        return False
    if node.op in ("Max", "Min") and len(node.inputs) != 2:
        return False
    dtype = node.outputs[0].type.dtype.value
    return dtype in FUSABLE_DTYPES and all(
        graph.value_type(i).dtype.value == dtype for i in node.inputs if i)


def _expression(node: Node, args: Sequence[str]) -> str:
    op = get_op(node.op, node.domain)
    attrs = resolve_attrs(op, node.attrs, node.name)
    if node.op in _ONE:
        return _ONE[node.op].format(*args)
    if node.op in _TWO:
        return _TWO[node.op].format(*args)
    x = args[0]
    if node.op == "LeakyRelu":
        return f"({x} if {x} >= 0 or {x} != {x} else {attrs['alpha']!r} * {x})"
    if node.op == "Elu":
        return f"({x} if {x} >= 0 or {x} != {x} else {attrs['alpha']!r} * math.expm1({x}))"
    if attrs["approximate"] == "tanh":
        return (f"(0.5 * {x} * (1.0 + math.tanh(0.7978845608028654 * ({x} + 0.044715 * {x} "
                f"* {x} * {x}))))")
    return f"(0.5 * {x} * (1.0 + math.erf({x} * 0.7071067811865476)))"


@dataclass
class FusionGroup:
    """Nodes fused into one ufunc: ``inputs`` are the values it reads."""

    nodes: list[Node]
    output: str
    inputs: list[str] = field(default_factory=list)
    source: str = ""


def find_groups(graph: Graph) -> list[FusionGroup]:
    """Fusion groups of two or more nodes, in topological order of their outputs."""
    outputs = {v.name for v in graph.outputs}
    members: dict[str, str] = {}  # node name -> root node name
    for node in graph.nodes:
        if not fusable(node, graph):
            continue
        members[node.name] = node.name
    # A node joins its consumer's group when its output has one consumer, also fusable.
    groups: dict[str, list[Node]] = {}
    for node in reversed(graph.nodes):
        if node.name not in members:
            continue
        out = node.outputs[0].name
        users = graph.consumers.get(out, ())
        if (out not in outputs and len(users) == 1 and users[0].name in members
                and users[0].outputs[0].type.dtype == node.outputs[0].type.dtype
                and users[0].inputs.count(out) == 1):
            members[node.name] = members[users[0].name]
        groups.setdefault(members[node.name], []).insert(0, node)
    result = []
    for root, nodes in groups.items():
        if len(nodes) < 2:
            continue
        root_node = next(n for n in nodes if n.name == root)
        result.append(_codegen(graph, FusionGroup(nodes, root_node.outputs[0].name)))
    return result


def _codegen(graph: Graph, group: FusionGroup) -> FusionGroup:
    inside = {n.outputs[0].name for n in group.nodes}
    names: dict[str, str] = {}
    lines = []
    for index, node in enumerate(group.nodes):
        args = []
        for value in node.inputs:
            if value in inside:
                args.append(names[value])
            elif value in graph.constants and graph.constants[value].size == 1:
                args.append(repr(float(graph.constants[value].reshape(-1)[0])))
            else:
                if value not in group.inputs:
                    group.inputs.append(value)
                args.append(f"a{group.inputs.index(value)}")
        names[node.outputs[0].name] = f"t{index}"
        lines.append(f"    t{index} = {_expression(node, args)}")
    dtype = graph.value_type(group.output).dtype.value
    signature = f"{dtype}({', '.join([dtype] * len(group.inputs))})"
    params = ", ".join(f"a{i}" for i in range(len(group.inputs)))
    body = "\n".join(lines)
    group.source = (f"@numba.vectorize([{signature!r}], nopython=True, cache=True)\n"
                    f"def fused({params}):\n{body}\n    return {dtype}_cast(t{len(lines) - 1})\n")
    return group


_lock = threading.Lock()
_loaded: dict[str, Callable[..., Any]] = {}


def cache_dir() -> Path:
    """Where generated kernels live: ``$POLYHAL_CACHE_DIR`` or ``~/.cache/polyhal``."""
    root = os.environ.get("POLYHAL_CACHE_DIR") or Path.home() / ".cache" / "polyhal"
    path = Path(root) / "cpu-kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_group(group: FusionGroup) -> Callable[..., Any]:
    """The ufunc of ``group``: loaded from the disk cache, compiled on first use."""
    source = (_PRELUDE + "\nfloat32_cast = numba.float32\nfloat64_cast = numba.float64\n\n\n"
              + group.source)
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    with _lock:
        if digest in _loaded:
            return _loaded[digest]
        path = cache_dir() / f"fused_{digest}.py"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        name = f"polyhal_fused_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        _loaded[digest] = module.fused
        return module.fused


def fused_step(group: FusionGroup) -> Callable[..., np.ndarray]:
    """A function of the group's input arrays that returns its output (``out=`` honoured)."""
    ufunc = compile_group(group)

    def run(*arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(all="ignore"):
            return ufunc(*arrays, out=out) if out is not None else ufunc(*arrays)

    return run
