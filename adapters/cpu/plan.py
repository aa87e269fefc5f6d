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
  the arena are copied out, so callers never see a buffer that is reused.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.adapters.cpu.fusion import FusionGroup, find_groups, fused_step
from polyhal.adapters.cpu.kernels import FAST_KERNELS, linalg
from polyhal.ir.graph import Graph, Node
from polyhal.ir.types import TensorType
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.registry import get_op

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
    make: Callable[[list[int | None]], StepFn]
    """Builds the step function once output buffers are assigned."""
    out_types: list[TensorType]


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
            with np.errstate(all="ignore"):  # rounding to 16 bits may overflow to inf
                result = kernel(*args, **attrs)
                results = list(result) if isinstance(result, tuple | list) else [result]
                return [np.asarray(r).astype(d, copy=False)
                        for r, d in zip(results, out_dtypes, strict=False)]
        with np.errstate(all="ignore"):
            result = kernel(*args, **attrs)
        return [np.asarray(r) for r in (result if isinstance(result, tuple | list)
                                        else (result,))]

    return call


class PlanBuilder:
    """Turns a concrete, optimized graph into a :class:`Plan`."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.slots: dict[str, int] = {}
        for name in [v.name for v in graph.inputs] + list(graph.constants) + [
                o.name for n in graph.nodes for o in n.outputs]:
            self.slots.setdefault(name, len(self.slots))
        self.steps: list[Step] = []

    def slot(self, name: str) -> int:
        return self.slots[name]

    def build(self) -> Plan:
        groups = {g.nodes[-1].name: g for g in find_groups(self.graph)}
        members = {n.name for g in groups.values() for n in g.nodes[:-1]}
        for node in self.graph.nodes:
            if node.name in members:
                continue
            if node.name in groups:
                self.steps.append(self._fused(groups[node.name]))
            else:
                self.steps.append(self._node(node))
        return self._plan()

    # ----------------------------------------------------------- step kinds

    def _fused(self, group: FusionGroup) -> Step:
        run = fused_step(group)
        ins = [self.slot(v) for v in group.inputs]
        out = self.slot(group.output)

        def make(buffers: list[int | None]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else None
                env[out] = run(*[env[i] for i in ins], out=target)

            return step

        # Not in place: a numba loop whose output overlaps an input fails LLVM's alias
        # check and runs scalar, at half the speed or less.
        return Step(f"fused[{','.join(n.op for n in group.nodes)}]", ins, [out], False, True,
                    make, [self.graph.value_type(group.output)])

    def _node(self, node: Node) -> Step:
        out_type = node.outputs[0].type
        dtype = out_type.dtype.numpy
        inputs_given = [i for i in node.inputs if i]
        same = all(self.graph.value_type(i).dtype.numpy == dtype for i in inputs_given)
        if node.domain == "core" and dtype in FLOATS and same and len(node.outputs) == 1:
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
        return self._kernel(node)

    def _ufunc(self, node: Node, ufunc: Callable[..., Any]) -> Step:
        ins = [self.slot(i) for i in node.inputs]
        out = self.slot(node.outputs[0].name)

        def make(buffers: list[int | None]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else None
                with np.errstate(all="ignore"):
                    env[out] = ufunc(*[env[i] for i in ins], out=target)

            return step

        return Step(node.name, ins, [out], True, True, make, [node.outputs[0].type])

    def _matmul(self, node: Node) -> Step:
        a, b = (self.slot(i) for i in node.inputs)
        out = self.slot(node.outputs[0].name)

        def make(buffers: list[int | None]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                target = arena[buffer] if buffer is not None else None
                with np.errstate(all="ignore"):
                    env[out] = linalg.matmul(env[a], env[b], out=target)

            return step

        return Step(node.name, [a, b], [out], False, True, make, [node.outputs[0].type])

    def _gemm(self, node: Node) -> Step:
        attrs = resolve_attrs(get_op("Gemm"), node.attrs, node.name)
        alpha, beta = attrs["alpha"], attrs["beta"]
        trans_a, trans_b = attrs["transA"], attrs["transB"]
        ins = [self.slot(i) for i in node.inputs if i]
        out = self.slot(node.outputs[0].name)

        def make(buffers: list[int | None]) -> StepFn:
            buffer = buffers[0]

            def step(env: Env, arena: Arena) -> None:
                a, b = env[ins[0]], env[ins[1]]
                target = arena[buffer] if buffer is not None else None
                with np.errstate(all="ignore"):
                    y = np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=target)
                    if alpha != 1.0:
                        y *= y.dtype.type(alpha)
                    if len(ins) == 3:
                        c = env[ins[2]]
                        y += c if beta == 1.0 else c * c.dtype.type(beta)
                env[out] = y

            return step

        return Step(node.name, ins, [out], False, True, make, [node.outputs[0].type])

    def _kernel(self, node: Node) -> Step:
        call = _generic(node)
        ins = [self.slot(i) if i else None for i in node.inputs]
        outs = [self.slot(o.name) for o in node.outputs]

        def make(buffers: list[int | None]) -> StepFn:
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
        buffers: list[tuple[tuple[int, ...], np.dtype]] = []
        free: dict[tuple[tuple[int, ...], str], list[int]] = {}
        owner: dict[int, int] = {}  # storage -> buffer
        functions: list[StepFn] = []
        for index, step in enumerate(self.steps):
            dying = [s for s in {st for i in step.inputs for st in holds.get(i, ())}
                     if end.get(s) == index]
            if step.elementwise:
                self._release(dying, owner, buffers, free)
            assigned: list[int | None] = [None]
            if (step.preallocated and step.out_types[0].is_static
                    and step.outputs[0] not in graph_outputs):
                key = (tuple(int(d) for d in step.out_types[0].shape),
                       str(step.out_types[0].dtype.numpy))
                pool = free.get(key)
                if pool:
                    buffer = pool.pop()
                else:
                    buffer = len(buffers)
                    buffers.append((key[0], step.out_types[0].dtype.numpy))
                owner[step.outputs[0]] = buffer
                assigned = [buffer]
            if not step.elementwise:
                self._release(dying, owner, buffers, free)
            functions.append(step.make(assigned))
        input_slots = [self.slot(v.name) for v in graph.inputs]
        output_slots = [self.slot(v.name) for v in graph.outputs]
        copies = [bool(holds.get(s)) or s in external for s in output_slots]
        template: list[Any] = [None] * len(self.slots)
        for name, array in graph.constants.items():
            template[self.slot(name)] = array
        return Plan(functions, input_slots, output_slots, copies, template, buffers,
                    [s.name for s in self.steps])

    @staticmethod
    def _release(storages: Sequence[int], owner: dict[int, int],
                 buffers: list[tuple[tuple[int, ...], np.dtype]],
                 free: dict[tuple[tuple[int, ...], str], list[int]]) -> None:
        for storage in storages:
            buffer = owner.pop(storage, None)
            if buffer is not None:
                shape, dtype = buffers[buffer]
                free.setdefault((shape, str(dtype)), []).append(buffer)


class Plan:
    """An executable sequence of steps over preallocated arenas (one per concurrent run)."""

    def __init__(self, functions: list[StepFn], input_slots: list[int], output_slots: list[int],
                 copies: list[bool], template: list[Any],
                 buffers: list[tuple[tuple[int, ...], np.dtype]], step_names: list[str]) -> None:
        self.functions = functions
        self.input_slots = input_slots
        self.output_slots = output_slots
        self.copies = copies
        self.template = template
        self.buffers = buffers
        self.step_names = step_names
        self._arenas: queue.SimpleQueue[Arena] = queue.SimpleQueue()

    @property
    def arena_bytes(self) -> int:
        """Bytes of one arena."""
        return sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in self.buffers)

    def execute(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the plan on input arrays (never modified); returns fresh output arrays."""
        try:
            arena = self._arenas.get_nowait()
        except queue.Empty:
            arena = [np.empty(shape, dtype) for shape, dtype in self.buffers]
        try:
            env = list(self.template)
            for slot, array in zip(self.input_slots, arrays, strict=True):
                env[slot] = array
            for function in self.functions:
                function(env, arena)
            return [np.array(env[s], copy=True) if copy else env[s]
                    for s, copy in zip(self.output_slots, self.copies, strict=True)]
        finally:
            self._arenas.put(arena)
