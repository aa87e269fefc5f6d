"""Helpers shared by the op tests: run one op, or its decomposition, on arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from polyhal.ir import DType, GraphBuilder, TensorType
from polyhal.ir.graph import freeze_attr
from polyhal.ir.verify import resolve_attrs
from polyhal.ops import get_op
from polyhal.reference import run


def _build(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any],
           num_outputs: int | None, domain: str, decomposed: bool,
           const_inputs: Sequence[int]):
    g = GraphBuilder(f"test_{op}")
    args = []
    feeds = {}
    for index, array in enumerate(inputs):
        if array is None:
            args.append(None)
        elif index in const_inputs:
            args.append(g.constant(array, name=f"c{index}"))
        else:
            name = f"in{index}"
            args.append(g.input(name, TensorType.of(array)))
            feeds[name] = array
    if decomposed:
        opdef = get_op(op, domain)
        assert opdef.decompose is not None, f"{op} has no decomposition"
        frozen = {k: freeze_attr(v, k) for k, v in attrs.items() if v is not None}
        outs = opdef.decompose(*args, **resolve_attrs(opdef, frozen, f"decompose {op}"))
    else:
        outs = g.op(op, *args, domain=domain, num_outputs=num_outputs, **attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    g.output(*outs)
    return g.build(), feeds


def run_op(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
           *, num_outputs: int | None = None, domain: str = "core",
           const_inputs: Sequence[int] = ()) -> list[np.ndarray]:
    """Run ``op`` on ``inputs`` (graph inputs; ``const_inputs`` become constants)."""
    graph, feeds = _build(op, inputs, attrs or {}, num_outputs, domain, False, const_inputs)
    return list(run(graph, **feeds).values())


def run_decomposed(op: str, inputs: Sequence[np.ndarray | None],
                   attrs: dict[str, Any] | None = None, *, domain: str = "core",
                   const_inputs: Sequence[int] = ()) -> list[np.ndarray]:
    """Run ``op``'s decomposition into primitives on ``inputs``."""
    graph, feeds = _build(op, inputs, attrs or {}, None, domain, True, const_inputs)
    for node in graph.nodes:
        assert get_op(node.op, node.domain).decompose is None or node.op == op, (
            f"decomposition of {op} uses composite {node.op}")
    return list(run(graph, **feeds).values())


def infer_type(op: str, input_types: Sequence[TensorType | None],
               attrs: dict[str, Any] | None = None, *, num_outputs: int | None = None,
               consts: dict[int, np.ndarray] | None = None, domain: str = "core"):
    """The inferred output type(s) of ``op`` on typed (possibly symbolic) inputs."""
    g = GraphBuilder(f"infer_{op}")
    args = []
    for index, t in enumerate(input_types):
        if consts and index in consts:
            args.append(g.constant(consts[index], name=f"c{index}"))
        elif t is None:
            args.append(None)
        else:
            args.append(g.input(f"in{index}", t))
    outs = g.op(op, *args, domain=domain, num_outputs=num_outputs, **(attrs or {}))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [o.type for o in outs] if len(outs) > 1 else outs[0].type


def random_array(dtype: DType, shape: tuple[int, ...], seed: int = 0,
                 low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Seeded random data of any polyhal dtype."""
    rng = np.random.default_rng(seed)
    if dtype is DType.BOOL:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        lo, hi = max(int(low), info.min), min(int(high), info.max)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype.numpy)
    return rng.uniform(low, high, size=shape).astype(dtype.numpy)
