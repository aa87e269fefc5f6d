"""Whether each output row of a graph comes from its own input row alone.

Shapes cannot show it (``softmax(x, axis=0)`` keeps the shape of ``x`` but
mixes its rows), so :func:`mixing_reason` follows the batch through the nodes:
for every value it tracks the axis that carries the batch symbol (checked
against the value's symbolic type), and it accepts a node only when its op is
known to act row by row along that axis (``_RULES``): elementwise ops;
MatMul/Gemm over batched rows; Conv, pooling and inference-mode normalizations
per sample; Softmax, reductions, LayerNormalization, Concat, Split, Gather,
Slice, Pad and the like along other axes; Transpose, and Reshape-like ops that
keep the batch a whole axis. A value computed from the batch *size* (``Shape``)
may only shape other values. Anything else (an unknown op included) mixes rows
as far as this module can tell, and the reason names the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.graph import Graph, Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op
from polyhal.ops.shape import shape_bounds
from polyhal.passes.elementwise import ELEMENTWISE_OPS


def symbol_axes(shape: Sequence[D.Dim], symbol: str) -> list[int]:
    """The axes of ``shape`` whose dimension mentions ``symbol``."""
    return [axis for axis, dim in enumerate(shape) if symbol in D.free_symbols(dim)]


def carries(shape: Sequence[D.Dim], symbol: str, axis: int) -> bool:
    """True when ``symbol`` is dimension ``axis`` of ``shape``, and in no other."""
    return axis < len(shape) and shape[axis] == symbol and symbol_axes(shape, symbol) == [axis]


SIZE = -1
"""The flow of a value computed from the batch *size* (``Shape``), not from its rows."""

Flow = int | None
"""Where a value carries the batch: the axis its rows run along, ``None`` when it does not
depend on the batch (weights, constants), or :data:`SIZE`."""


class _Mixes(Exception):
    """A node does not act row by row; the message says how (after the node's name)."""


@dataclass
class _Site:
    """One node under analysis, with where each of its inputs carries the batch."""

    graph: Graph
    node: Node
    symbol: str
    flows: tuple[Flow, ...]

    @cached_property
    def attrs(self) -> dict[str, Any]:
        """The node's attributes, defaults filled in."""
        op = get_op(self.node.op, self.node.domain)
        return resolve_attrs(op, self.node.attrs, f"node {self.node.name!r}")

    @property
    def batched(self) -> dict[int, int]:
        """Input position -> the axis its rows run along, for the inputs with the batch."""
        return {i: f for i, f in enumerate(self.flows) if f is not None and f >= 0}

    @property
    def out_rank(self) -> int:
        return self.node.outputs[0].type.rank

    def has(self, index: int) -> bool:
        return index < len(self.node.inputs) and bool(self.node.inputs[index])

    def shape(self, index: int) -> tuple[D.Dim, ...]:
        return self.graph.value_type(self.node.inputs[index]).shape

    def rank(self, index: int) -> int:
        return len(self.shape(index))

    def axis(self, rank: int, name: str = "axis") -> int:
        return int(self.attrs[name]) % rank

    def ints(self, index: int, what: str) -> list[int] | None:
        """Constant input ``index`` as ints (``None`` when absent)."""
        if not self.has(index):
            return None
        value = self.graph.constants.get(self.node.inputs[index])
        self.require(value is not None, f"takes its {what} from a computed value")
        return [int(v) for v in np.asarray(value).reshape(-1)]

    def data_axis(self) -> int:
        """The batch axis of input 0, when it is the only input with the batch."""
        self.require(set(self.batched) == {0}, "takes the batch in an input it does not "
                     f"treat row by row ({self.node.inputs[max(self.batched)]!r})")
        return self.batched[0]

    @staticmethod
    def require(condition: bool, why: str) -> None:
        if not condition:
            raise _Mixes(why)


Rule = Callable[[_Site], list[Flow]]
"""A row-wise op: the flow of each output, given the node; raises ``_Mixes`` otherwise."""


def _elementwise(site: _Site) -> list[Flow]:
    axes = {site.out_rank - site.rank(i) + axis for i, axis in site.batched.items()}
    site.require(len(axes) == 1, "broadcasts batched inputs along different axes")
    return [axes.pop()] * len(site.node.outputs)


def _per_sample(site: _Site) -> list[Flow]:
    """Ops over ``[N, ...]`` that treat each sample alone; the other inputs are weights."""
    site.require(site.data_axis() == 0, "takes the batch other than as axis 0 (N)")
    return [0] * len(site.node.outputs)


def _batch_norm(site: _Site) -> list[Flow]:
    site.require(not site.attrs["training_mode"],
                 "computes its statistics over the batch (training_mode=1)")
    return _per_sample(site)


def _expectation(site: _Site) -> list[Flow]:
    site.require(site.attrs["shots"] is None,
                 "samples shots from one seed stream for the whole batch")
    return _per_sample(site)


def _softmax(site: _Site) -> list[Flow]:
    b = site.data_axis()
    site.require(site.axis(site.rank(0)) != b, f"normalizes along axis {b}, the batch axis")
    return [b]


def _layer_norm(site: _Site) -> list[Flow]:
    b = site.data_axis()
    axis = site.axis(site.rank(0))
    site.require(b < axis, f"normalizes over axes {axis}.., the batch axis {b} among them")
    return [b] * len(site.node.outputs)


def _reduced(site: _Site, b: int, axes: set[int]) -> int:
    site.require(b not in axes, f"reduces over axis {b}, the batch axis")
    return b if site.attrs["keepdims"] else b - sum(a < b for a in axes)


def _reduce(site: _Site) -> list[Flow]:
    b, rank = site.data_axis(), site.rank(0)
    axes = {a % rank for a in site.ints(1, "axes") or []}
    if not axes:
        site.require(bool(site.attrs["noop_with_empty_axes"]),
                     "reduces over every axis, the batch axis included")
        return [b]
    return [_reduced(site, b, axes)]


def _arg_reduce(site: _Site) -> list[Flow]:
    b = site.data_axis()
    return [_reduced(site, b, {site.axis(site.rank(0))})]


def _concat(site: _Site) -> list[Flow]:
    present = [i for i, name in enumerate(site.node.inputs) if name]
    axes = set(site.batched.values())
    site.require(len(site.batched) == len(present) and len(axes) == 1,
                 "concatenates values that do not all carry the batch along one axis")
    b = axes.pop()
    site.require(site.axis(site.out_rank) != b, f"concatenates along axis {b}, the batch axis")
    return [b]


def _split(site: _Site) -> list[Flow]:
    b = site.data_axis()
    site.require(site.axis(site.rank(0)) != b, f"splits along axis {b}, the batch axis")
    return [b] * len(site.node.outputs)


def _gather(site: _Site) -> list[Flow]:
    axis, batched = site.axis(site.rank(0)), site.batched
    if set(batched) == {1}:  # an unbatched table looked up by batched indices (embeddings)
        return [axis + batched[1]]
    site.require(1 not in batched, "takes both its data and its indices from the batch")
    b = site.data_axis()
    site.require(b != axis, f"gathers along axis {b}, the batch axis: its indices name rows "
                 "of the whole batch")
    return [b if b < axis else b + site.rank(1) - 1]


def _gather_elements(site: _Site) -> list[Flow]:
    batched = site.batched
    site.require(set(batched) == {0, 1} and batched[0] == batched[1],
                 "needs its data and indices batched along the same axis")
    b = batched[0]
    site.require(site.axis(site.rank(0)) != b, f"gathers along axis {b}, the batch axis")
    return [b]


def _one_hot(site: _Site) -> list[Flow]:
    b = site.data_axis()
    return [b if b < site.axis(site.out_rank) else b + 1]


def _transpose(site: _Site) -> list[Flow]:
    b = site.data_axis()
    perm = list(site.attrs["perm"] or reversed(range(site.rank(0))))
    return [perm.index(b)]


def _reshape(site: _Site) -> list[Flow]:
    """Reshape, Flatten, Squeeze, Unsqueeze keep row-major order: rows stay whole when the
    batch is an axis of the result with as many elements before it as before."""
    b = site.data_axis()
    out = site.node.outputs[0].type.shape
    site.require(site.symbol in out, f"gives {site.node.outputs[0].type}, without "
                 f"{site.symbol!r} as an axis of its own")
    k = out.index(site.symbol)
    site.require(D.dims_equal(D.dim_prod(site.shape(0)[:b]), D.dim_prod(out[:k])),
                 "moves elements between rows of the batch")
    return [k]


def _slice(site: _Site) -> list[Flow]:
    b, rank = site.data_axis(), site.rank(0)
    axes = site.ints(3, "axes")
    if axes is None:
        count = site.shape(1)[0] if site.rank(1) else 1
        site.require(isinstance(count, int), "slices a computed number of axes")
        axes = list(range(int(count)))
    site.require(b not in {a % rank for a in axes}, f"slices axis {b}, the batch axis")
    return [b]


def _pad(site: _Site) -> list[Flow]:
    b, rank = site.data_axis(), site.rank(0)
    pads = site.ints(1, "pads") or []
    axes = [a % rank for a in site.ints(3, "axes") or range(rank)]
    if b in axes:
        at = axes.index(b)
        site.require(pads[at] == pads[at + len(axes)] == 0, f"pads axis {b}, the batch axis")
    return [b]


def _tile(site: _Site) -> list[Flow]:
    b = site.data_axis()
    repeats = site.ints(1, "repeats") or []
    site.require(repeats[b] == 1, f"repeats axis {b}, the batch axis")
    return [b]


def _expand(site: _Site) -> list[Flow]:
    return [site.out_rank - site.rank(0) + site.data_axis()]


def _shape(site: _Site) -> list[Flow]:
    b = site.data_axis()
    lo, hi = shape_bounds(site.rank(0), site.attrs["start"], site.attrs["end"])
    return [SIZE if lo <= b < hi else None]


def _through(site: _Site, maps: Mapping[int, Sequence[int | None]]) -> int:
    """The output axis of the batch, given where each input's axes go (``None``: summed)."""
    targets = set()
    for index, axis in site.batched.items():
        site.require(index in maps, f"takes the batch in {site.node.inputs[index]!r}, an "
                     "input it does not treat row by row")
        target = maps[index][axis]
        site.require(target is not None, f"sums over the batch axis of "
                     f"{site.node.inputs[index]!r}")
        targets.add(target)
    site.require(len(targets) == 1, "pairs batched inputs along different axes")
    return targets.pop()


def _matmul_maps(ra: int, rb: int, ro: int) -> tuple[list[int | None], list[int | None]]:
    """Where each axis of A and of B goes in ``numpy.matmul(A, B)`` (``None``: summed)."""
    lead = ro - (ra > 1) - (rb > 1)  # the broadcast leading axes of the result
    a: list[int | None] = [lead - ra + 2 + i for i in range(ra - 2)]
    a += [lead, None] if ra > 1 else [None]
    b: list[int | None] = [lead - rb + 2 + i for i in range(rb - 2)]
    b += [None, ro - 1] if rb > 1 else [None]
    return a, b


def _matmul_on(a: int, b: int, row_params: tuple[int, ...] = ()) -> Rule:
    """MatMul-like ops with A and B at inputs ``a`` and ``b``; ``row_params``: inputs with one
    value per row of A (zero points, scales), which must be per-tensor when A is batched."""
    def rule(site: _Site) -> list[Flow]:
        if a in site.batched:
            site.require(all(int(np.prod(site.shape(i))) == 1 for i in row_params
                             if site.has(i) and all(isinstance(d, int) for d in site.shape(i))),
                         "has per-row parameters for batched rows")
        maps = _matmul_maps(site.rank(a), site.rank(b), site.out_rank)
        return [_through(site, {a: maps[0], b: maps[1]})]
    return rule


def _gemm(site: _Site) -> list[Flow]:
    maps: dict[int, list[int | None]] = {
        0: [None, 0] if site.attrs["transA"] else [0, None],
        1: [1, None] if site.attrs["transB"] else [None, 1]}
    if site.has(2):
        maps[2] = [2 - site.rank(2) + i for i in range(site.rank(2))]
    return [_through(site, maps)]


def _quantize(site: _Site) -> list[Flow]:
    b = site.data_axis()
    per_tensor = all(site.rank(i) == 0 for i in (1, 2) if site.has(i))
    site.require(per_tensor or site.axis(site.rank(0)) != b,
                 f"quantizes per channel along axis {b}, the batch axis")
    return [b]


_ELEMENTWISE = ELEMENTWISE_OPS | {
    "And", "Or", "Xor", "Not", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
    "IsNaN", "Round", "Sign", "Mod", "Where", "Clip", "Cast", "Sum", "Mean", "Dropout"}
"""Core ops that compute each element from the same element of their (broadcast) inputs:
the fusable ones of :mod:`polyhal.passes.elementwise` and the rest."""

_RULES: dict[str, Rule] = {
    **dict.fromkeys((f"core.{op}" for op in _ELEMENTWISE), _elementwise),
    "quant.Requantize": _elementwise,
    **dict.fromkeys(("core.Conv", "core.ConvTranspose", "core.AveragePool", "core.MaxPool",
                     "core.GlobalAveragePool", "core.GlobalMaxPool", "core.LRN"), _per_sample),
    "core.BatchNormalization": _batch_norm,
    "quantum.Expectation": _expectation,
    "core.Softmax": _softmax, "core.LogSoftmax": _softmax,
    "core.LayerNormalization": _layer_norm,
    **dict.fromkeys(("core.ReduceMax", "core.ReduceMean", "core.ReduceMin", "core.ReduceProd",
                     "core.ReduceSum"), _reduce),
    "core.ArgMax": _arg_reduce, "core.ArgMin": _arg_reduce,
    "core.Concat": _concat, "core.Split": _split,
    "core.Gather": _gather, "core.GatherElements": _gather_elements, "core.OneHot": _one_hot,
    "core.Transpose": _transpose,
    **dict.fromkeys(("core.Reshape", "core.Flatten", "core.Squeeze", "core.Unsqueeze"),
                    _reshape),
    "core.Slice": _slice, "core.Pad": _pad, "core.Tile": _tile, "core.Expand": _expand,
    "core.Shape": _shape,
    "core.MatMul": _matmul_on(0, 1), "core.Gemm": _gemm,
    "core.MatMulInteger": _matmul_on(0, 1, row_params=(2,)),
    "core.QLinearMatMul": _matmul_on(0, 3, row_params=(1, 2)),
    "core.QuantizeLinear": _quantize, "core.DequantizeLinear": _quantize,
}
"""The ops known to act row by row, each with how the batch flows through it."""

_SHAPE_INPUTS = {"core.Reshape": 1, "core.Expand": 1}
"""The inputs that may take a value computed from the batch size: the target shape."""


def _node_flows(site: _Site) -> list[Flow]:
    """The flow of each output of ``site``'s node; raises ``_Mixes`` when it mixes rows."""
    node = site.node
    if not site.batched:  # weights and sizes only: the same for every micro-batch's rows
        return [SIZE if SIZE in site.flows else None] * len(node.outputs)
    rule = _RULES.get(node.qualified_op)
    if rule is None:
        raise _Mixes("is not known to act row by row (splitting refuses what it cannot check)")
    for index, flow in enumerate(site.flows):
        site.require(flow != SIZE or _SHAPE_INPUTS.get(node.qualified_op) == index,
                     f"uses the batch size as data ({node.inputs[index]!r} comes from a Shape)")
    flows = rule(site)
    for value, flow in zip(node.outputs, flows, strict=True):
        site.require(flow is None or flow < 0 or carries(value.type.shape, site.symbol, flow),
                     f"gives {value.name!r} the type {value.type}, without {site.symbol!r} "
                     f"at axis {flow} alone")
    return flows


def mixing_reason(graph: Graph, symbol: str, batched: Sequence[str]) -> str:
    """Why some output row of ``graph`` may depend on other rows than its own ("" when none
    can): the first node that is not known to act row by row along the batch."""
    flows: dict[str, Flow] = dict.fromkeys(batched, 0)
    for node in graph.nodes:
        site = _Site(graph, node, symbol,
                     tuple(flows.get(name) if name else None for name in node.inputs))
        try:
            flows.update(zip(node.output_names, _node_flows(site), strict=True))
        except _Mixes as exc:
            return f"node {node.name!r} ({node.qualified_op}) {exc}"
    for value in graph.outputs:
        if flows.get(value.name) != 0:
            return f"output {value.name!r} does not come row by row from the batched inputs"
    return ""
