"""Elementwise fusion: chains of float elementwise nodes become one numba ufunc.

A fusion group is a tree of elementwise nodes in one float dtype, joined by
values that have exactly one consumer (so no intermediate is needed
elsewhere). Each group is compiled once per expression and dtype into a
``numba.vectorize`` ufunc — which broadcasts its inputs like numpy — from a
generated module cached on disk, so later processes load it without
compiling. Scalar constants are inlined as literals of the group's dtype (a
float32 group computes in float32); other inputs become ufunc arguments.
float32 Erf and Gelu use a vectorizable rational erf (max abs error 3.4e-7).
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
ALONE = frozenset({"Erf", "Gelu"})
"""Ops compiled even when nothing fuses with them: numpy has no ufunc for them, and
the reference's per-element ``math.erf`` is slow."""

_ONE = {
    "Neg": "-{0}", "Abs": "abs({0})", "Exp": "math.exp({0})", "Log": "_log({0})",
    "Sqrt": "_sqrt({0})", "Tanh": "math.tanh({0})",
    "Sigmoid": "K(1.0) / (K(1.0) + math.exp(-{0}))", "Relu": "_relu({0}, K(0.0))",
    "Reciprocal": "K(1.0) / {0}", "Sin": "math.sin({0})", "Cos": "math.cos({0})",
    "Floor": "np.floor({0})", "Ceil": "np.ceil({0})",
    "Softplus": "(_relu({0}, K(0.0)) + math.log1p(math.exp(-abs({0}))))", "Identity": "{0}",
}
_TWO = {"Add": "({0} + {1})", "Sub": "({0} - {1})", "Mul": "({0} * {1})",
        "Div": "({0} / {1})", "Pow": "_pow({0}, {1})", "Max": "_max({0}, {1})",
        "Min": "_min({0}, {1})"}

_PRELUDE = '''\
import math

import numba
import numpy as np


@numba.njit(inline="always")
def _relu(x, zero):
    return x if x > 0 or x != x else zero


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


@numba.njit(inline="always")
def _erf32(x):
    # erf(x) = x * P(x^2) / Q(x^2) on [-4, 4], +-1 beyond (|erf(4)| rounds to 1 in
    # float32); a rational fit with max abs error 3.4e-7 evaluated in float32. Unlike
    # libm's erf it has no branches or calls, so LLVM vectorizes the loop (~20x faster).
    c = min(max(numba.float32(x), numba.float32(-4.0)), numba.float32(4.0))
    y = c * c
    p = numba.float32(1.974595805420869e-06)
    p = p * y + numba.float32(0.0002880826194969423)
    p = p * y + numba.float32(0.0040053062767188684)
    p = p * y + numba.float32(0.05347267313539997)
    p = p * y + numba.float32(0.19628698451634086)
    p = p * y + numba.float32(1.1283789776147115)
    q = numba.float32(3.748057566732227e-05)
    q = q * y + numba.float32(0.001216768439347448)
    q = q * y + numba.float32(0.015447767359585973)
    q = q * y + numba.float32(0.11649227769168904)
    q = q * y + numba.float32(0.5072859688271321)
    q = q * y + numba.float32(1.0)
    r = c * p / q
    return r if x == x else x  # a select, not a branch: the loop stays vectorizable
'''


def fusable(node: Node, graph: Graph) -> bool:
    """True when ``node`` can join a fusion group."""
    if node.domain != "core" or len(node.outputs) != 1:
        return False
    if node.op not in _ONE and node.op not in _TWO and node.op not in (
            "Erf", "LeakyRelu", "Elu", "Gelu"):
        return False
    if node.op in ("Max", "Min") and len(node.inputs) != 2:
        return False
    dtype = node.outputs[0].type.dtype.value
    return dtype in FUSABLE_DTYPES and all(
        graph.value_type(i).dtype.value == dtype for i in node.inputs if i)


def _expression(node: Node, args: Sequence[str]) -> str:
    op = get_op(node.op, node.domain)
    attrs = resolve_attrs(op, node.attrs, node.name)
    erf = "_erf32" if node.outputs[0].type.dtype.value == "float32" else "math.erf"
    if node.op == "Erf":
        return f"{erf}({args[0]})"
    if node.op in _ONE:
        return _ONE[node.op].format(*args)
    if node.op in _TWO:
        return _TWO[node.op].format(*args)
    x = args[0]
    if node.op == "LeakyRelu":
        return f"({x} if {x} >= 0 or {x} != {x} else K({attrs['alpha']!r}) * {x})"
    if node.op == "Elu":
        return (f"({x} if {x} >= 0 or {x} != {x} else K({attrs['alpha']!r}) "
                f"* math.expm1({x}))")
    if attrs["approximate"] == "tanh":
        return (f"(K(0.5) * {x} * (K(1.0) + math.tanh(K(0.7978845608028654) * ({x} "
                f"+ K(0.044715) * {x} * {x} * {x}))))")
    return f"(K(0.5) * {x} * (K(1.0) + {erf}({x} * K(0.7071067811865476))))"


@dataclass
class FusionGroup:
    """Nodes fused into one ufunc: ``inputs`` are the values it reads."""

    nodes: list[Node]
    output: str
    inputs: list[str] = field(default_factory=list)
    source: str = ""


def find_groups(graph: Graph) -> list[FusionGroup]:
    """Fusion groups of two or more nodes (or one node of :data:`ALONE`), in topological
    order of their outputs."""
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
        if len(nodes) < 2 and nodes[0].op not in ALONE:
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
                args.append(f"K({float(graph.constants[value].reshape(-1)[0])!r})")
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
    # K types every literal: a float32 group computes in float32, as numpy does, and
    # stays free of float64 conversions that would halve its vector width.
    group.source = (f"K = numba.{dtype}\n\n\n"
                    f"@numba.vectorize([{signature!r}], nopython=True, cache=True)\n"
                    f"def fused({params}):\n{body}\n    return K(t{len(lines) - 1})\n")
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
    source = _PRELUDE + "\n\n" + group.source
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
