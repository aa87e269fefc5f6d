"""Lowering a concrete graph to an execution plan with static memory planning.

Each node becomes a step: a fused numba ufunc (see :mod:`fusion`), a numpy
ufunc or BLAS call writing into a preallocated buffer, or a kernel that
allocates its own result (the fast kernels where they exist, else the
reference kernel). Buffers come from an arena planned once per plan:

- a value's buffer is reused by later values of the same shape and dtype once
  every value that may alias it (views made by reshapes, slices, ...) is dead;
- a numpy ufunc step may write into the buffer of an input that dies at that
  step (in place; fused numba steps never do, see :meth:`PlanBuilder._fused`);
- graph inputs and constants are never written; graph outputs that live in
  the arena are copied out, so callers never see a buffer that is reused;
- a lowered 2-D Conv writes a **channels-last** buffer (``[N, H, W, C]`` memory
  seen as ``[N, C, H, W]``, see :class:`~.kernels.conv.Conv2dLowering`), and an
  elementwise step over a channels-last input of its output's shape writes one
  too, so chains of Conv, bias, residual adds and activations stay channels-last
  without a transpose; every other step sees an ordinary (strided) array, and
  outputs are returned C-contiguous; a Relu, a residual Add, or an Add and a
  Relu that are a lowered Conv's only consumer are applied by the Conv as it
  writes its output, and a Relu that is a Gemm's only consumer by the Gemm (an
  :class:`Epilogue`, no step of its own);
- scratch buffers a step asks for (im2col columns, a zero-bordered padded
  input) live in the arena too, shared by every step that asks for the same
  one.
"""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from polyhal.adapters.cpu.fusion import FusionGroup, find_groups, fused_step
from polyhal.adapters.cpu.kernels import FAST_KERNELS, linalg
from polyhal.adapters.cpu.kernels.conv import Conv2dLowering
from polyhal.errors import ExecutionError, PolyhalError
from polyhal.hal.derived import DerivedConstants
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ir.types import TensorType
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op

if TYPE_CHECKING:
    from polyhal.adapters.cpu.kernels.packed_gemm import PackedWeights

UFUNCS: dict[str, Callable[..., Any]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Neg": np.negative, "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Tanh": np.tanh, "Sin": np.sin, "Cos": np.cos, "Floor": np.floor, "Ceil": np.ceil,
    "Reciprocal": np.reciprocal, "Identity": np.copyto,
}
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

Env = list[Any]
Arena = list[np.ndarray]
StepFn = Callable[[Env, Arena], None]
Scratch = dict[str, tuple[tuple[int, ...], bool]]
"""Scratch buffers a step needs, by name: ``(shape, zeroed)``."""


@dataclass(frozen=True)
class BufferSpec:
    """One arena buffer: its logical shape, dtype and memory layout."""

    shape: tuple[int, ...]
    dtype: np.dtype
    channels_last: bool = False
    """``[N, C, *S]`` stored as ``[N, *S, C]``."""
    zeroed: bool = False
    """Allocated filled with zeros (a padded input's border)."""

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def allocate(self) -> np.ndarray:
        if self.channels_last:
            n, c, *spatial = self.shape
            return np.moveaxis(np.empty((n, *spatial, c), self.dtype), -1, 1)
        return (np.zeros if self.zeroed else np.empty)(self.shape, self.dtype)


@dataclass
class Step:
    """One unit of work: read ``inputs`` slots, write ``output`` slots."""

    name: str
    inputs: list[int]
    outputs: list[int]
    elementwise: bool
    """True when the output may share its buffer with an input that dies here."""
    preallocated: bool
    """True when the step writes into an arena buffer given to it."""
    make: Callable[[list[int | None], dict[str, int]], StepFn]
    """Builds the step function once its output and scratch buffers are assigned."""
    out_types: list[TensorType]
    follows_layout: bool = False
    """True when the output may take a channels-last input's layout (elementwise)."""
    channels_last: bool = False
    """True when the output buffer must be channels-last."""
    scratch: Scratch = field(default_factory=dict)
    quiet: bool = False
    """True when the step cannot raise numpy's floating-point warnings (a numba kernel
    on arrays it is given): a plan of quiet steps runs without ``np.errstate``."""


@dataclass(frozen=True)
class Epilogue:
    """Nodes a lowered Conv or a Gemm applies as it writes its output: a residual
    added (Conv only), then a Relu (either may be absent)."""

    nodes: tuple[Node, ...]
    """The absorbed nodes, in order (none: the Conv writes its own output)."""
    residual: str | None
    """The value added (same type as the Conv's output)."""
    relu: bool

    def output(self, conv: Node) -> Value:
        """The value ``conv``'s step writes: the last absorbed node's output."""
        return (self.nodes[-1] if self.nodes else conv).outputs[0]


NO_EPILOGUE = Epilogue((), None, False)
EPILOGUE_CHAINS = {"Conv": (("Relu",), ("Add",), ("Add", "Relu")), "Gemm": (("Relu",),)}
"""The ops of the chains each kind of step can absorb as its epilogue."""


def _low(dtype: np.dtype) -> bool:
    return dtype == np.float16 or dtype.name == "bfloat16"


def _generic(node: Node) -> Callable[..., Any]:
    """The node's kernel with the reference's float16/bfloat16 handling."""
    op = get_op(node.op, node.domain)
    attrs = resolve_attrs(op, node.attrs, node.name)
    kernel = FAST_KERNELS.get(node.qualified_op, op.kernel)
    out_dtypes = [o.type.dtype.numpy for o in node.outputs]
    low = any(_low(d) for d in out_dtypes)

    def call(*args: np.ndarray | None) -> list[np.ndarray]:
        if low or any(a is not None and _low(a.dtype) for a in args):
            args = tuple(a.astype(np.float32) if a is not None and _low(a.dtype) else a
                         for a in args)
            result = kernel(*args, **attrs)  # rounding to 16 bits may overflow to inf
            results = list(result) if isinstance(result, tuple | list) else [result]
            return [np.asarray(r).astype(d, copy=False)
                    for r, d in zip(results, out_dtypes, strict=False)]
        result = kernel(*args, **attrs)
        return [np.asarray(r) for r in (result if isinstance(result, tuple | list)
                                        else (result,))]

    return call


class PlanBuilder:
    """Turns a concrete, optimized graph into a :class:`Plan`."""

    def __init__(self, graph: Graph, derived: DerivedConstants | None = None) -> None:
        self.graph = graph
        self.derived = DerivedConstants(graph) if derived is None else derived
        """Packed weights, shared by the plans of one executable."""
        self.slots: dict[str, int] = {}
        for name in [v.name for v in graph.inputs] + list(graph.constants) + [
                o.name for n in graph.nodes for o in n.outputs]:
            self.slots.setdefault(name, len(self.slots))
        self.steps: list[Step] = []
        self.epilogues: dict[str, Epilogue] = {}
        """Conv or Gemm name -> what its step applies as it writes."""
        self._lowerings: dict[str, Conv2dLowering | None] = {}

    def slot(self, name: str) -> int:
        return self.slots[name]

    def build(self) -> Plan:
        groups = {g.nodes[-1].name: g for g in find_groups(self.graph)}
        self.epilogues = self._epilogues(list(groups.values()))
        absorbed = {n.name for e in self.epilogues.values() for n in e.nodes}
        members = {n.name for g in groups.values() for n in g.nodes[:-1]}
        for node in self.graph.nodes:
            if node.name in members or node.name in absorbed:
                continue
            if node.name in groups:
                self.steps.append(self._fused(groups[node.name]))
            else:
                self.steps.append(self._node(node))
        return self._plan()

    def _epilogues(self, groups: list[FusionGroup]) -> dict[str, Epilogue]:
        """Conv or Gemm name -> the nodes its step applies as it writes: the only
        consumer of its output (not a graph output) when that is a Relu, or for a
        lowered Conv an Add of a tensor of the same type made before the Conv (a
        residual), or a fusion group of just such an Add and a Relu of it."""
        consumers: dict[str, list[Node]] = {}
        for node in self.graph.nodes:
            for name in dict.fromkeys(i for i in node.inputs if i):
                consumers.setdefault(name, []).append(node)
        grouped = {n.name: g for g in groups for n in g.nodes}
        graph_outputs = {v.name for v in self.graph.outputs}
        made_at = {o.name: index for index, n in enumerate(self.graph.nodes) for o in n.outputs}
        epilogues: dict[str, Epilogue] = {}
        taken: set[str] = set()
        for index, node in enumerate(self.graph.nodes):
            produced = node.outputs[0].name
            after = consumers.get(produced, [])
            if (node.op not in EPILOGUE_CHAINS or len(after) != 1
                    or produced in graph_outputs or not self._lowers(node)):
                continue
            first = after[0]
            if first.name in taken:
                continue
            group = grouped.get(first.name)
            chain = tuple(group.nodes) if group is not None else (first,)
            if group is not None and group.nodes[0] is not first:
                continue
            ops = tuple(n.op for n in chain)
            if ops not in EPILOGUE_CHAINS[node.op] or any(n.domain != "core" for n in chain):
                continue
            residual = None
            if ops[0] == "Add":
                other = [i for i in first.inputs if i != produced]
                # The residual must exist when the Conv runs: made before it (when two
                # Convs meet in one Add, the later one adds the earlier one's output).
                if (len(other) != 1 or made_at.get(other[0], -1) > index
                        or self.graph.value_type(other[0]) != self.graph.value_type(produced)):
                    continue
                residual = other[0]
            epilogues[node.name] = Epilogue(chain, residual, ops[-1] == "Relu")
            taken.update(n.name for n in chain)
        return epilogues

    def _lowers(self, node: Node) -> bool:
        """True where :meth:`_node` may give ``node`` a step of its own rather than its
        kernel: a core op of one float dtype with one output (a Conv: one that
        :class:`Conv2dLowering` accepts)."""
        out_type = node.outputs[0].type
        dtype = out_type.dtype.numpy
        inputs_given = [i for i in node.inputs if i]
        same = all(self.graph.value_type(i).dtype.numpy == dtype for i in inputs_given)
        return (node.domain == "core" and dtype in FLOATS and same and len(node.outputs) == 1
                and (node.op != "Conv" or self._conv_lowering(node) is not None))

    # ----------------------------------------------------------- step kinds

    def _fused(self, group: FusionGroup) -> Step:
        run = fused_step(group)
        ins = [self.slot(v) for v in group.inputs]
        out = self.slot(group.output)

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else None
                env[out] = run(*[env[i] for i in ins], out=target)

            return step

        # Not in place: a numba loop whose output overlaps an input fails LLVM's alias
        # check and runs scalar, at half the speed or less.
        # The ops say what the loop computes; the last node's name makes the step's
        # name unique (per-step times are reported by name).
        name = f"fused[{','.join(n.op for n in group.nodes)}] {group.nodes[-1].name}"
        return Step(name, ins, [out], False, True,
                    make, [self.graph.value_type(group.output)], follows_layout=True)

    def _node(self, node: Node) -> Step:
        dtype = node.outputs[0].type.dtype.numpy
        inputs_given = [i for i in node.inputs if i]
        if self._lowers(node):
            if node.op in UFUNCS and node.op != "Identity" and len(inputs_given) in (1, 2):
                return self._ufunc(node, UFUNCS[node.op])
            if node.op == "Relu":
                return self._ufunc(node, lambda x, out: np.maximum(x, dtype.type(0), out=out))
            if node.op in ("Max", "Min") and len(inputs_given) == 2:
                return self._ufunc(node, np.maximum if node.op == "Max" else np.minimum)
            if node.op == "MatMul":
                return self._matmul(node)
            if node.op == "Gemm":
                return self._gemm(node)
            if node.op == "Conv":
                return self._conv(node, self._conv_lowering(node))
        return self._kernel(node)

    def _conv_lowering(self, node: Node) -> Conv2dLowering | None:
        """The lowering of a Conv node (built once: epilogues and steps both ask)."""
        if node.name not in self._lowerings:
            x_type, w_type = (self.graph.value_type(i) for i in node.inputs[:2])
            lowering = None
            if x_type.is_static and w_type.is_static:
                attrs = resolve_attrs(get_op("Conv"), node.attrs, node.name)
                lowering = Conv2dLowering.build(tuple(int(d) for d in x_type.shape),
                                                tuple(int(d) for d in w_type.shape), attrs,
                                                node.outputs[0].type.dtype.numpy)
            self._lowerings[node.name] = lowering
        return self._lowerings[node.name]

    def _epilogue(self, node: Node) -> Epilogue:
        return self.epilogues.get(node.name, NO_EPILOGUE)

    def _conv(self, node: Node, lowering: Conv2dLowering) -> Step:
        x, w = (self.slot(i) for i in node.inputs[:2])
        bias = self.slot(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        epilogue = self._epilogue(node)
        residual = None if epilogue.residual is None else self.slot(epilogue.residual)
        relu = epilogue.relu
        result = epilogue.output(node)
        out = self.slot(result.name)
        weight = self.graph.constants.get(node.inputs[1])
        constant_bias = None if bias is None else self.graph.constants.get(node.inputs[2])
        fixed = (lowering.filters(weight, constant_bias)
                 if weight is not None and (bias is None or constant_bias is not None) else None)
        fresh = BufferSpec(lowering.out_shape, lowering.dtype, channels_last=True)

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else fresh.allocate()
                filters = fixed if fixed is not None else lowering.filters(
                    env[w], None if bias is None else env[bias])
                lowering(env[x], filters, target,
                         {name: arena[index] for name, index in scratch.items()},
                         None if residual is None else env[residual], relu)
                env[out] = target

            return step

        ins = [x, w] + ([bias] if bias is not None else []) + (
            [residual] if residual is not None else [])
        name = "+".join([node.name] + [n.name for n in epilogue.nodes])
        return Step(name, ins, [out], False, True, make, [result.type],
                    channels_last=True, scratch=lowering.scratch)

    def _ufunc(self, node: Node, ufunc: Callable[..., Any]) -> Step:
        ins = [self.slot(i) for i in node.inputs]
        out = self.slot(node.outputs[0].name)

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else None
                env[out] = ufunc(*[env[i] for i in ins], out=target)

            return step

        return Step(node.name, ins, [out], True, True, make, [node.outputs[0].type],
                    follows_layout=True)

    def _matmul(self, node: Node) -> Step:
        packed = self._packed(node)
        if packed is not None:
            return self._packed_step(node.name, self.slot(node.inputs[0]), node.outputs[0],
                                     packed, relu=False)
        a, b = (self.slot(i) for i in node.inputs)
        out = self.slot(node.outputs[0].name)

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else None
                env[out] = linalg.matmul(env[a], env[b], out=target)

            return step

        return Step(node.name, [a, b], [out], False, True, make, [node.outputs[0].type])

    def _gemm(self, node: Node) -> Step:
        attrs = resolve_attrs(get_op("Gemm"), node.attrs, node.name)
        alpha, beta = attrs["alpha"], attrs["beta"]
        trans_a, trans_b = attrs["transA"], attrs["transB"]
        ins = [self.slot(i) for i in node.inputs if i]
        epilogue = self._epilogue(node)
        result = epilogue.output(node)
        name = "+".join([node.name] + [n.name for n in epilogue.nodes])
        if not trans_a and alpha == 1.0 and (len(ins) == 2 or beta == 1.0):
            packed = self._packed(node, transposed=bool(trans_b))
            if packed is not None:
                return self._packed_step(name, ins[0], result, packed, epilogue.relu)
        from polyhal.adapters.cpu.kernels import epilogue as epilogue_kernel  # numba: lazily

        out = self.slot(result.name)
        relu = epilogue.relu

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                a, b = env[ins[0]], env[ins[1]]
                target = arena[buffer] if buffer is not None else None
                y = np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=target)
                if alpha != 1.0:
                    y *= y.dtype.type(alpha)
                c = env[ins[2]] if len(ins) == 3 else None
                if c is not None and beta != 1.0:
                    c = c * c.dtype.type(beta)
                # the bias and the Relu in one pass, in place while y is in cache
                epilogue_kernel.apply(y, c, relu)
                env[out] = y

            return step

        return Step(name, ins, [out], False, True, make, [result.type])

    def _packed(self, node: Node, transposed: bool = False) -> PackedWeights | None:
        """``node``'s B (and a Gemm's C) packed for :func:`.packed_gemm.multiply`: when B
        is a 2-D constant that packs with little padding, C is absent or a constant
        with one value per column, and A has at most :data:`.packed_gemm.MAX_ROWS`
        rows; else None."""
        from polyhal.adapters.cpu.kernels import packed_gemm  # numba: only once plans build

        a_type = self.graph.value_type(node.inputs[0])
        b = self.graph.constants.get(node.inputs[1])
        c_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        c = None if c_name is None else self.graph.constants.get(c_name)
        if (b is None or b.ndim != 2 or not a_type.is_static or a_type.rank == 0
                or math.prod(int(d) for d in a_type.shape[:-1]) > packed_gemm.MAX_ROWS):
            return None
        depth, columns = b.shape[::-1] if transposed else b.shape
        if not packed_gemm.packs_compactly(depth, columns, b.dtype):
            return None
        if c_name is not None and (c is None or c.size not in (1, columns)
                                   or (c.ndim == 2 and c.shape[0] != 1)):
            return None  # C varies by row, or is computed
        return self.derived.get((b, c), ("packed", transposed), lambda: packed_gemm.pack(
            b, None if c is None else c.reshape(-1), transposed))

    def _packed_step(self, name: str, a: int, result: Value, packed: PackedWeights,
                     relu: bool) -> Step:
        """A product of A (slot ``a``) by packed constant weights (:mod:`.packed_gemm`)."""
        from polyhal.adapters.cpu.kernels import packed_gemm

        out = self.slot(result.name)
        shape = tuple(int(d) for d in result.type.shape)
        flat = (math.prod(shape[:-1]), packed.columns)  # rows, columns
        a_flat = (flat[0], packed.depth)
        reshaped = shape != flat  # a batched MatMul: rows over several axes
        if 0 in flat:  # no rows or no columns (no depth still writes the bias)
            def multiply(a: np.ndarray, out: np.ndarray) -> None:
                pass
        else:
            multiply = packed_gemm.multiplier(flat[0], packed, relu)

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else np.empty(shape,
                                                                            packed.bias.dtype)
                a_value = np.ascontiguousarray(env[a])
                if a_value.shape != a_flat:
                    a_value = a_value.reshape(a_flat)
                if not reshaped:
                    multiply(a_value, target)
                elif target.flags.c_contiguous:  # a reshape would copy: never here
                    multiply(a_value, target.reshape(flat))
                else:
                    raise ValueError(f"{name}: packed GEMM output buffer is strided")
                env[out] = target

            return step

        return Step(name, [a], [out], False, True, make, [result.type], quiet=True)

    def _kernel(self, node: Node) -> Step:
        call = _generic(node)
        ins = [self.slot(i) if i else None for i in node.inputs]
        outs = [self.slot(o.name) for o in node.outputs]

        def make(buffers: list[int | None], scratch: dict[str, int]) -> StepFn:
            def step(env: Env, arena: Arena) -> None:
                results = call(*[env[i] if i is not None else None for i in ins])
                for slot, array in zip(outs, results, strict=False):
                    env[slot] = array

            return step

        return Step(node.name, [i for i in ins if i is not None], outs, False, False, make,
                    [o.type for o in node.outputs])

    # ------------------------------------------------------ memory planning

    def _plan(self) -> Plan:
        graph = self.graph
        n_steps = len(self.steps)
        last_use: dict[int, int] = {}
        for index, step in enumerate(self.steps):
            for slot in step.inputs:
                last_use[slot] = index
        for value in graph.outputs:
            last_use[self.slot(value.name)] = n_steps  # alive to the end
        # Logical storages: an arena-backed value owns one; a kernel's outputs may alias
        # (view) any storage its inputs hold.
        graph_outputs = {self.slot(v.name) for v in graph.outputs}
        holds: dict[int, set[int]] = {}
        # Values that are, or may be views of, graph inputs or constants.
        external = {self.slot(v.name) for v in graph.inputs} | {
            self.slot(name) for name in graph.constants}
        for step in self.steps:
            if step.preallocated:
                fresh = step.outputs[0] in graph_outputs  # given its own new array
                holds[step.outputs[0]] = set() if fresh else {step.outputs[0]}
            else:
                aliased = set().union(*(holds.get(i, set()) for i in step.inputs))
                for slot in step.outputs:
                    holds[slot] = set(aliased)
                if external & set(step.inputs):
                    external.update(step.outputs)
        end: dict[int, int] = {}
        for slot, storages in holds.items():
            for storage in storages:
                end[storage] = max(end.get(storage, -1), last_use.get(slot, -1))
        buffers: list[BufferSpec] = []
        free: dict[BufferSpec, list[int]] = {}
        owner: dict[int, int] = {}  # storage -> buffer
        channels_last: set[int] = set()  # slots whose value is a channels-last buffer
        scratch_buffers: dict[tuple[str, str], int] = {}
        functions: list[StepFn] = []
        for index, step in enumerate(self.steps):
            dying = [s for s in {st for i in step.inputs for st in holds.get(i, ())}
                     if end.get(s) == index]
            if step.elementwise:
                self._release(dying, owner, buffers, free)
            assigned: list[int | None] = [None]
            out_type = step.out_types[0]
            if step.preallocated and out_type.is_static:
                shape = tuple(int(d) for d in out_type.shape)
                last = step.channels_last or (step.follows_layout and len(shape) >= 3 and any(
                    i in channels_last and self.graph.value_type(self._name(i)).shape
                    == out_type.shape for i in step.inputs))
                if last:
                    channels_last.add(step.outputs[0])
                if step.outputs[0] not in graph_outputs:
                    spec = BufferSpec(shape, out_type.dtype.numpy, channels_last=last)
                    pool = free.get(spec)
                    if pool:
                        buffer = pool.pop()
                    else:
                        buffer = len(buffers)
                        buffers.append(spec)
                    owner[step.outputs[0]] = buffer
                    assigned = [buffer]
            if not step.elementwise:
                self._release(dying, owner, buffers, free)
            functions.append(step.make(assigned, self._scratch(step, buffers, scratch_buffers)))
        input_slots = [self.slot(v.name) for v in graph.inputs]
        output_slots = [self.slot(v.name) for v in graph.outputs]
        copies = [bool(holds.get(s)) or s in external for s in output_slots]
        # Only the constants that steps read or that are outputs: a Gemm's packed
        # weights replace its B, which the plan then does not keep.
        read = {slot for step in self.steps for slot in step.inputs} | set(output_slots)
        template: list[Any] = [None] * len(self.slots)
        for name, array in graph.constants.items():
            if self.slot(name) in read:
                template[self.slot(name)] = array
        return Plan(functions, input_slots, output_slots, copies, template, buffers,
                    [s.name for s in self.steps], quiet=all(s.quiet for s in self.steps))

    def _name(self, slot: int) -> str:
        if not hasattr(self, "_names"):
            self._names = {index: name for name, index in self.slots.items()}
        return self._names[slot]

    @staticmethod
    def _scratch(step: Step, buffers: list[BufferSpec],
                 shared: dict[tuple[str, str], int]) -> dict[str, int]:
        """Arena buffers for ``step``'s scratch: one per name and dtype, as large as its
        largest use (a zeroed one has a single exact shape, named by it)."""
        dtype = step.out_types[0].dtype.numpy
        assigned = {}
        for name, (shape, zeroed) in step.scratch.items():
            key = (name, str(dtype))
            if key not in shared:
                shared[key] = len(buffers)
                buffers.append(BufferSpec(shape, dtype, zeroed=zeroed))
            index = shared[key]
            if not zeroed and math.prod(shape) > math.prod(buffers[index].shape):
                buffers[index] = BufferSpec(shape, dtype)
            assigned[name] = index
        return assigned

    @staticmethod
    def _release(storages: Sequence[int], owner: dict[int, int], buffers: list[BufferSpec],
                 free: dict[BufferSpec, list[int]]) -> None:
        for storage in storages:
            buffer = owner.pop(storage, None)
            if buffer is not None:
                free.setdefault(buffers[buffer], []).append(buffer)


class Plan:
    """An executable sequence of steps over preallocated arenas (one per concurrent run)."""

    def __init__(self, functions: list[StepFn], input_slots: list[int], output_slots: list[int],
                 copies: list[bool], template: list[Any], buffers: list[BufferSpec],
                 step_names: list[str], quiet: bool = False) -> None:
        self.functions = functions
        self.input_slots = input_slots
        self.output_slots = output_slots
        self.copies = copies
        self.template = template
        self.buffers = buffers
        self.step_names = step_names
        self.quiet = quiet
        """True when no step can raise numpy's floating-point warnings."""
        self.last_seconds: list[float] = []
        """Seconds each step took in the run that finished last (empty before a run)."""
        self._arenas: queue.SimpleQueue[Arena] = queue.SimpleQueue()

    @property
    def arena_bytes(self) -> int:
        """Bytes of one arena."""
        return sum(spec.nbytes for spec in self.buffers)

    def execute(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the plan on input arrays (never modified); returns fresh output arrays."""
        try:
            arena = self._arenas.get_nowait()
        except queue.Empty:
            arena = [spec.allocate() for spec in self.buffers]
        try:
            env = list(self.template)
            for slot, array in zip(self.input_slots, arrays, strict=True):
                env[slot] = array
            if self.quiet:
                self.last_seconds = self._run_steps(env, arena)
            else:
                # Floating-point warnings are the IR's semantics (inf, NaN), not errors;
                # set once per run rather than once per step.
                with np.errstate(all="ignore"):
                    self.last_seconds = self._run_steps(env, arena)
            return [np.array(env[s], copy=True, order="C") if copy
                    else np.asarray(env[s], order="C")
                    for s, copy in zip(self.output_slots, self.copies, strict=True)]
        finally:
            self._arenas.put(arena)

    def _run_steps(self, env: Env, arena: Arena) -> list[float]:
        """Run every step; returns the seconds each took. An exception other than a
        ``PolyhalError`` (bad data: an index out of range, say) is an
        :class:`ExecutionError` naming the step, not a device fault."""
        seconds = [0.0] * len(self.functions)
        clock = time.perf_counter
        index = 0
        try:
            start = clock()
            for index, function in enumerate(self.functions):
                function(env, arena)
                now = clock()
                seconds[index], start = now - start, now
        except PolyhalError:
            raise
        except Exception as exc:
            raise ExecutionError(f"cpu: step {self.step_names[index]!r} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        return seconds
