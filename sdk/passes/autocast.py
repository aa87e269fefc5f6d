"""Automatic mixed precision: run compute-heavy ops in float16 or bfloat16.

``autocast(graph, DType.FLOAT16)`` returns a graph with the same interface
(input and output names and types) whose inside computes in two precisions.
Each node is rewritten by its op's *category*; only floating-point values
are ever cast, and integer and boolean values are left exactly as they are:

- **low precision** (``low``, default :data:`LOW_PRECISION_OPS`: ``MatMul``,
  ``Gemm``, ``Conv``, ``ConvTranspose``): float32 inputs are cast down to
  ``dtype`` (a bias given to ``Gemm`` or ``Conv`` too), so the op and its
  outputs are low precision. These ops do most of the arithmetic and are the
  ones fast 16-bit hardware units accelerate.
- **float32** (``keep``, default :data:`FLOAT32_OPS`): float16 and bfloat16
  inputs are cast up to float32, so the op and its outputs are float32.
- **follow** (every other op: ``Add``, ``Mul``, ``Relu``, ``Tanh``,
  ``Where``, ``Concat``, reshapes, gathers, ...): the float inputs tied by one
  type variable of the op's schema (both operands of ``Add``, the branches of
  ``Where``, every input of ``Concat``) take their **widest** dtype, and the
  narrower ones are cast up to it. float16 and bfloat16 together give float32
  (neither holds the other). ``Add(low-precision MatMul, float32 bias)``
  therefore computes in float32, as the same expression does under
  ``torch.autocast``; write ``Gemm`` (or apply
  :data:`~polyhal.passes.FUSION_RULES` first) to keep the bias in low
  precision. One exception, also torch's: a **rank-0 constant** (a number
  written in the builder, ``h * 0.5``) does not widen a tensor operand; it is
  cast to the tensor's dtype, unless its value would overflow there.
- ``Cast`` nodes already in the graph are kept as written (through the rules
  below, so they are reused and cancelled like the pass's own).
- An op whose schema does not admit the chosen dtype (the snn ops admit
  float32 and float64 only) gets float32 instead.

float64 values are never cast down: a low-precision op with a float64 input
computes in float64 (its type variable's widest dtype). Graph outputs are cast
back to their declared dtype where the computation changed it; the value
computed in low precision keeps the output's name with the dtype appended
(``logits_float16``).

Casts:

- **one Cast per (value, dtype)**: every consumer that needs a value in a
  dtype reads the same Cast node, named ``<value>_<dtype>``;
- **round trips cancel**: casting back to ``d`` a value that is an exact
  widening cast of a ``d`` value (float16 -> float32 -> float16,
  bfloat16 -> float32, float32 -> float64) reads the original. A narrowing cast
  followed by a widening one rounds, and stays.
- Casts of constants stay Cast nodes; :func:`~polyhal.passes.fold_constants`
  (which every ``compile`` to ``cpu`` runs) folds them.

Why these lists. Every polyhal op on float16/bfloat16 computes in float32 and
rounds its result once (the reference semantics every adapter follows), so an
op does not lose accuracy by accumulating in 16 bits; what float32 protects is
the **range** of results (float16 overflows above 65504 and loses precision
below 6.1e-5) and results that **amplify** the rounding of their inputs. The
float32 list holds, after ``torch.autocast``'s own float32 list:

- sums and products over many elements, which leave float16's range:
  ``ReduceSum``, ``ReduceMean`` (losses), ``ReduceProd``;
- exponentials, logarithms and powers, whose results leave the range or whose
  inputs' rounding they amplify: ``Exp``, ``Log``, ``Pow``, ``Softplus``,
  ``Softmax``, ``LogSoftmax``;
- quotients and reciprocals, unbounded for small divisors, and the
  reciprocal square roots of normalization statistics: ``Div``,
  ``Reciprocal``, ``Sqrt``;
- normalizations, whose statistics need float32: ``LayerNormalization``,
  ``BatchNormalization``, ``LRN``.

Ops left to follow on purpose: selections, exact in every dtype
(``ReduceMax``, ``ReduceMin``, ``ArgMax``, ``MaxPool``, ``GlobalMaxPool``,
``Max``, ``Min``, ``Relu``); bounded, well-conditioned functions (``Tanh``,
``Sigmoid``, ``Erf``, ``Gelu``, ``Elu``, ``Sin``, ``Cos``); window means,
bounded by their inputs (``AveragePool``, ``GlobalAveragePool``).

Gradients: autodiff's ``Cast`` rule casts a cotangent back to its input's
dtype, so ``autodiff.grad(autocast(loss, DType.FLOAT16), wrt=["w"])`` gives a
float32 ``grad_w`` for a float32 weight (master weights in float32, products
in float16).

>>> from polyhal import ops
>>> from polyhal.ir import DType, GraphBuilder, f32
>>> g = GraphBuilder("layer")
>>> x, w = g.input("x", f32["batch", 4]), g.input("w", f32[4, 2])
>>> g.output(ops.softmax(x @ w), name="probs")
>>> for node in autocast(g.build(), DType.FLOAT16).nodes:
...     print(node.op, node.outputs[0])
Cast x_float16: float16[batch, 4]
Cast w_float16: float16[4, 2]
MatMul matmul_1: float16[batch, 2]
Cast matmul_1_float32: float32[batch, 2]
Softmax probs: float32[batch, 2]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from polyhal.errors import IRError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ops.registry import get_op
from polyhal.passes.cleanup import eliminate_dead_code
from polyhal.passes.rebuild import replay

LOW_PRECISION_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
"""Ops that compute in the low-precision dtype (core op names; ``domain.Op`` for
other domains)."""

FLOAT32_OPS = frozenset({
    "ReduceSum", "ReduceMean", "ReduceProd",
    "Exp", "Log", "Pow", "Softplus", "Softmax", "LogSoftmax",
    "Div", "Reciprocal", "Sqrt",
    "LayerNormalization", "BatchNormalization", "LRN",
})
"""Ops that compute in float32 (see the module docstring for why each)."""

LOW_DTYPES = (DType.FLOAT16, DType.BFLOAT16)
_WIDTH = {DType.FLOAT16: 1, DType.BFLOAT16: 1, DType.FLOAT32: 2, DType.FLOAT64: 3}


def holds_exactly(wide: DType, narrow: DType) -> bool:
    """True when every ``narrow`` float value is a ``wide`` value (float16 and
    bfloat16 in float32 and float64, float32 in float64)."""
    return wide == narrow or _WIDTH[wide] > _WIDTH[narrow]


def widest(dtypes: Iterable[DType]) -> DType:
    """The narrowest float dtype that holds every one of ``dtypes`` exactly."""
    result: DType | None = None
    for dtype in dtypes:
        if result is None or holds_exactly(dtype, result):
            result = dtype
        elif not holds_exactly(result, dtype):
            result = DType.FLOAT32  # float16 with bfloat16
    if result is None:
        raise IRError("widest: no dtypes given")
    return result


def autocast(graph: Graph, dtype: DType | str, *, low: Iterable[str] = LOW_PRECISION_OPS,
             keep: Iterable[str] = FLOAT32_OPS) -> Graph:
    """``graph`` with the ``low`` ops in ``dtype`` (float16 or bfloat16) and the
    ``keep`` ops in float32; every other op follows its inputs' widest dtype.

    The interface is unchanged. Rules: see :mod:`polyhal.passes.autocast`. A
    ``dtype`` other than float16/bfloat16, or an op in both ``low`` and ``keep``,
    is an :class:`~polyhal.errors.IRError`.
    """
    where = f"autocast of graph {graph.name!r}"
    parsed = DType.parse(dtype, f"{where}: dtype")
    if parsed not in LOW_DTYPES:
        raise IRError(f"{where}: dtype must be DType.FLOAT16 or DType.BFLOAT16, got {parsed!r}")
    low, keep = frozenset(low), frozenset(keep)
    if low & keep:
        raise IRError(f"{where}: ops in both low and keep: {', '.join(sorted(low & keep))}")
    return _Autocast(graph, parsed, low, keep).run()


class _Autocast:
    """One run of the pass: the builder, the values built and the casts made."""

    def __init__(self, graph: Graph, dtype: DType, low: frozenset[str],
                 keep: frozenset[str]) -> None:
        self.graph, self.dtype, self.low, self.keep = graph, dtype, low, keep
        self.taken = {n.name for n in graph.nodes} | set(graph.value_types)
        # A node's output that is a graph output is built under another name, so that
        # the cast back to the declared dtype can take the output's name.
        self.emit_names = {v.name: self._fresh(f"{v.name}_{dtype.value}")
                           for v in graph.outputs if not self._is_source(v.name)}
        self.builder = GraphBuilder(graph.name, reserved=sorted(self.taken))
        self.env: dict[str, Var] = {}
        self.casts: dict[tuple[str, DType], Var] = {}
        self.cast_from: dict[str, Var] = {}  # value made by a float -> float Cast: its input

    def _is_source(self, name: str) -> bool:
        return name in self.graph.constants or any(v.name == name for v in self.graph.inputs)

    def _fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def run(self) -> Graph:
        g = self.builder
        for value in self.graph.inputs:
            self.env[value.name] = g.input(value.name, value.type)
        for name, array in self.graph.constants.items():
            self.env[name] = g.constant(array, name=name)
        for node in self.graph.nodes:
            outs = self._rewrite(node, [self.env[i] if i else None for i in node.inputs])
            for value, var in zip(node.outputs, outs, strict=True):
                self.env[value.name] = var
        for value in self.graph.outputs:
            var = self.env[value.name]
            if var.dtype != value.type.dtype and var.dtype.is_float:
                var = self.cast(var, value.type.dtype)
            g.output(var, name=value.name)
        built = eliminate_dead_code(g.build())
        return Graph(built.name, built.inputs, built.outputs, built.nodes, built.constants,
                     self.graph.doc)

    # ---------------------------------------------------------------- casts

    def cast(self, var: Var, dtype: DType, node: Node | None = None) -> Var:
        """``var`` in ``dtype``: itself, the original of a round trip, an earlier cast,
        or a new Cast node (named after ``node`` when it stands for that node)."""
        if var.dtype == dtype:
            return var
        source = self.cast_from.get(var.name)
        if source is not None and source.dtype == dtype and holds_exactly(var.dtype, dtype):
            return source
        made = self.casts.get((var.name, dtype))
        if made is None:
            if node is None:
                name = self._fresh(f"{var.name}_{dtype.value}")
                made = self.builder.op("Cast", var, to=dtype, name=name, output_names=[name])
            else:
                made = replay(self.builder, self._renamed(node), [var])[0]
            self.casts[(var.name, dtype)] = made
            self.cast_from[made.name] = var
        return made

    def _renamed(self, node: Node) -> Node:
        """``node`` with its graph outputs under their emit names."""
        if not any(v.name in self.emit_names for v in node.outputs):
            return node
        return dataclasses.replace(node, outputs=tuple(
            Value(self.emit_names.get(v.name, v.name), v.type) for v in node.outputs))

    # ---------------------------------------------------------------- nodes

    def _category(self, node: Node) -> str:
        key = node.op if node.domain == "core" else node.qualified_op
        return "low" if key in self.low else "keep" if key in self.keep else "follow"

    def _rewrite(self, node: Node, args: list[Var | None]) -> tuple[Var, ...]:
        if node.qualified_op == "core.Cast":
            to = DType.parse(node.attrs["to"])
            if args[0] is not None and args[0].dtype.is_float and to.is_float:
                return (self.cast(args[0], to, node),)
            return replay(self.builder, self._renamed(node), args)
        opdef = get_op(node.op, node.domain)
        category = self._category(node)
        tied: dict[str, list[int]] = {}
        for index, var in enumerate(args):
            if var is not None and var.dtype.is_float:
                tied.setdefault(opdef.input_spec(index).type_var, []).append(index)
        for type_var, indices in tied.items():
            members = [var for i in indices if (var := args[i]) is not None]
            target = self._target(category, members)
            if target not in opdef.type_vars[type_var]:
                target = widest([target, DType.FLOAT32])
            for index, var in zip(indices, members, strict=True):
                args[index] = self.cast(var, target)
        return replay(self.builder, self._renamed(node), args)

    def _target(self, category: str, members: Sequence[Var]) -> DType:
        """The dtype the float inputs tied by one type variable compute in."""
        dtypes = [v.dtype for v in members]
        if category == "low":
            if all(d in (DType.FLOAT32, self.dtype) for d in dtypes):
                return self.dtype
            return widest(dtypes)
        if category == "keep":
            return widest([DType.FLOAT32 if d in LOW_DTYPES else d for d in dtypes])
        scalars = {v.name: value for v in members
                   if (value := self._scalar_constant(v)) is not None}
        tensors = [v.dtype for v in members if v.name not in scalars]
        if not tensors:
            return widest(dtypes)
        target = widest(tensors)
        for value in scalars.values():
            with np.errstate(over="ignore"):
                if np.isfinite(value) and not np.isfinite(value.astype(target.numpy)):
                    target = widest([target, DType.from_numpy(value.dtype)])
        return target

    def _scalar_constant(self, var: Var) -> np.ndarray | None:
        """The value of ``var`` when it is a rank-0 constant of the graph."""
        array = self.graph.constants.get(var.name)
        return array if array is not None and array.ndim == 0 else None
