"""Lowering a concrete, optimized graph to a list of kernel launches.

A :class:`Plan` is built once per shape binding. Every value is a flat
device array (its shape is the graph's); constants are uploaded once, with
the index maps (:mod:`.maps`) the launches need. Each node becomes one step:

- a fusion group (:mod:`polyhal.passes.elementwise`, one node or many, every
  float dtype) -> one generated kernel;
- MatMul, Gemm -> the tiled GEMM (Gemm's C through its epilogue); Conv ->
  an im2col gather and a batched GEMM with the bias in the epilogue;
- movement ops -> an index-map gather (or nothing, when the map is the
  identity: a view), Concat -> one scatter per input, Gather with run-time
  indices -> a bounds-checked kernel;
- reductions, global pools, Softmax/LogSoftmax, LayerNormalization -> a row
  kernel; MaxPool -> a window kernel.

In a 16-bit precision mode float32 graph inputs are converted on entry and
outputs back on exit (:mod:`.storage`). Errors raised on the device (a
Gather index out of range) are checked after the last launch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda

from polyhal.adapters.gpu import maps
from polyhal.adapters.gpu.kernels import elementwise, movement, rows
from polyhal.adapters.gpu.kernels.gemm import gemm_kernel, launch_shape
from polyhal.adapters.gpu.storage import F32, Storage, storage_for, to_device_layout
from polyhal.adapters.gpu.target import grid_1d
from polyhal.errors import ExecutionError, UnsupportedError
from polyhal.hal.derived import DerivedConstants
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.movement import check_indices
from polyhal.ops.registry import get_op
from polyhal.passes.elementwise import find_groups, group_body

Env = dict[str, Any]
Step = Callable[[Env, list[Callable[[], None]]], None]
"""A launch: reads and writes the environment, may append checks to run after the last."""
FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
REDUCE_KINDS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max",
                "ReduceMin": "min", "ReduceProd": "prod", "GlobalAveragePool": "mean",
                "GlobalMaxPool": "max"}
LOWERINGS = {"MatMul": "_matmul", "Gemm": "_gemm", "Conv": "_conv", "MaxPool": "_max_pool",
             "Softmax": "_softmax", "LogSoftmax": "_softmax", "LayerNormalization": "_layer_norm"}
"""The :class:`Plan` method that lowers each of the other ops."""


class Plan:
    """The launches of one concrete graph on one stream."""

    def __init__(self, graph: Graph, precision: str, stream: Any,
                 derived: DerivedConstants | None = None) -> None:
        self.graph = graph
        self.precision = precision
        self.stream = stream
        self.launches = 0
        self._dummy = cuda.to_device(np.zeros(1, np.int64), stream=stream)
        self._derived = DerivedConstants(graph) if derived is None else derived
        self.constants: Env = {name: self._constant(name, array)
                               for name, array in graph.constants.items()}
        self.steps: list[Step] = []
        groups = {g.nodes[-1].name: g for g in find_groups(graph, FLOAT_NAMES, min_size=1)}
        grouped = {n.name for g in groups.values() for n in g.nodes}
        for node in graph.nodes:
            if node.name in groups:
                self.steps.append(self._elementwise(groups[node.name]))
            elif node.name not in grouped:
                self.steps.append(self._lower(node))

    # ------------------------------------------------------------------ helpers

    def storage(self, name: str) -> Storage:
        """Where value ``name`` lives in this plan."""
        return storage_for(self.graph.value_type(name).dtype, self.precision)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self.graph.value_type(name).shape)

    def size(self, name: str) -> int:
        return math.prod(self.shape(name))

    def upload(self, array: np.ndarray) -> Any:
        return cuda.to_device(np.ascontiguousarray(array), stream=self.stream)

    def _constant(self, name: str, array: np.ndarray) -> Any:
        """Constant ``name`` on the device: uploaded once for all the plans of an
        executable when it is one of the executable's graph's constants."""
        storage = self.storage(name)
        return self._derived.get((array,), ("device", storage.name),
                                 lambda: self.upload(to_device_layout(array, storage)))

    def alloc(self, count: int, dtype: np.dtype) -> Any:
        return cuda.device_array(count, dtype, stream=self.stream)

    def empty(self, name: str, count: int | None = None) -> Any:
        """A new array for value ``name`` (``count`` elements, default: its size)."""
        return self.alloc(self.size(name) if count is None else count,
                          self.storage(name).device_dtype)

    def launch(self, kernel: Any, count: int, *args: Any) -> None:
        """A grid-stride kernel over ``count`` items (nothing when there are none)."""
        if count:
            blocks, threads = grid_1d(count)
            kernel[blocks, threads, self.stream](*args)
            self.launches += 1

    def _map(self, index_map: np.ndarray | None) -> Any:
        return self._dummy if index_map is None else self.upload(index_map)

    def _const(self, node: Node, index: int) -> np.ndarray | None:
        name = node.inputs[index] if index < len(node.inputs) else ""
        return self.graph.constants.get(name) if name else None

    # ------------------------------------------------------------------ running

    def execute(self, arrays: list[Any]) -> list[Any]:
        """Run on device arrays of the graph inputs, as buffers hold them (fp32-mode
        storage); returns the outputs held the same way."""
        env: Env = dict(self.constants)
        for value, array in zip(self.graph.inputs, arrays, strict=True):
            env[value.name] = self._convert(array, storage_for(value.type.dtype),
                                            self.storage(value.name))
        checks: list[Callable[[], None]] = []
        for step in self.steps:
            step(env, checks)
        outputs = [self._convert(env[v.name], self.storage(v.name),
                                 storage_for(v.type.dtype)) for v in self.graph.outputs]
        if checks:
            self.stream.synchronize()
            for check in checks:
                check()
        return outputs

    def _convert(self, array: Any, src: Storage, dst: Storage) -> Any:
        if src == dst:
            return array
        kernel = elementwise.compile_source(elementwise.cast_source(src, dst), "cast")
        out = self.alloc(array.size, dst.device_dtype)
        self.launch(kernel, array.size, out, array.size, array)
        return out

    # ------------------------------------------------------------------ lowering

    def _lower(self, node: Node) -> Step:
        if node.domain != "core":
            raise UnsupportedError(f"gpu has no kernel for {node.qualified_op} "
                                   f"(node {node.name!r})")
        attrs = resolve_attrs(get_op(node.op, node.domain), node.attrs, node.name)
        if node.op == "Gather" and self._const(node, 1) is None:
            return self._gather(node, attrs)
        if node.op in maps.MOVEMENT_OPS:
            return self._movement(node, attrs)
        if node.op in REDUCE_KINDS:
            return self._reduce(node, attrs)
        lower = LOWERINGS.get(node.op)
        if lower is None:
            raise UnsupportedError(f"gpu has no kernel for {node.qualified_op} "
                                   f"(node {node.name!r})")
        return getattr(self, lower)(node, attrs)

    def _elementwise(self, group: Any) -> Step:
        body = group_body(self.graph, group)
        out_name, out_shape = group.output, self.shape(group.output)
        modes, index_maps = [], []
        for value in group.inputs:
            shape = self.shape(value)
            if shape == out_shape:
                modes.append(elementwise.DIRECT)
                index_maps.append(self._dummy)
            elif math.prod(shape) == 1:
                modes.append(elementwise.SCALAR)
                index_maps.append(self._dummy)
            else:
                modes.append(elementwise.MAPPED)
                index_maps.append(self.upload(maps.broadcast_map(shape, out_shape)))
        source = elementwise.group_source(
            body, [(self.storage(v), m) for v, m in zip(group.inputs, modes, strict=True)],
            self.storage(out_name))
        kernel = elementwise.compile_source(source, "fused")
        count = self.size(out_name)

        def step(env: Env, checks: list) -> None:
            out = self.empty(out_name)
            args = [a for v, m in zip(group.inputs, index_maps, strict=True) for a in (env[v], m)]
            self.launch(kernel, count, out, count, *args)
            env[out_name] = out

        return step

    def _movement(self, node: Node, attrs: dict[str, Any]) -> Step:
        shapes = [self.shape(i) if i else () for i in node.inputs]
        constants = [self._const(node, i) for i in range(len(node.inputs))]
        index_maps = maps.movement_maps(node, attrs, shapes, constants)
        outputs = [o.name for o in node.outputs]
        if node.op == "Concat":
            sizes = [math.prod(s) for s in shapes]
            targets = [self.upload(t) for t in maps.scatter_targets(index_maps[0], sizes)]

            def concat(env: Env, checks: list) -> None:
                out = self.empty(outputs[0])
                for value, target, size in zip(node.inputs, targets, sizes, strict=True):
                    self.launch(movement.scatter_map, size, env[value], target, out, size)
                env[outputs[0]] = out

            return concat
        data = node.inputs[0]
        views = [maps.is_identity(m) and m.size == self.size(data) for m in index_maps]
        uploaded = [None if view else self.upload(m) for m, view in zip(index_maps, views,
                                                                         strict=True)]

        def move(env: Env, checks: list) -> None:
            for name, index_map in zip(outputs, uploaded, strict=True):
                if not name:
                    continue
                if index_map is None:
                    env[name] = env[data]
                else:
                    out = self.empty(name)
                    self.launch(movement.gather_map, out.size, env[data], index_map, out,
                                out.size)
                    env[name] = out

        return move

    def _gather(self, node: Node, attrs: dict[str, Any]) -> Step:
        data, indices = node.inputs
        shape = self.shape(data)
        axis = attrs["axis"] % len(shape)
        size, inner = shape[axis], math.prod(shape[axis + 1:])
        count, out_name = self.size(indices), node.outputs[0].name

        def step(env: Env, checks: list) -> None:
            out = self.empty(out_name)
            error = cuda.to_device(np.zeros(1, np.int64), stream=self.stream)
            self.launch(movement.gather_indices, out.size, env[data], env[indices], out,
                        out.size, count, size, inner, error)
            env[out_name] = out
            index_array = env[indices]

            def check() -> None:
                if error.copy_to_host()[0]:
                    try:
                        check_indices(index_array.copy_to_host(), size, axis)
                    except IndexError as exc:
                        raise ExecutionError(f"node {node.name!r} (Gather): {exc}") from None

            checks.append(check)

        return step

    def _gemm_step(self, name: str, a: str, b: str, c: str | None, cmap: np.ndarray | None,
                   m: int, n: int, k: int, strides: tuple[int, int, int, int],
                   aoff: np.ndarray, boff: np.ndarray, alpha: float = 1.0, beta: float = 0.0,
                   before: Step | None = None, b_storage: Storage | None = None) -> Step:
        out = self.storage(name)
        a_storage, b_storage = self.storage(a), b_storage or self.storage(b)
        tf32 = self.precision == "tf32" and a_storage == b_storage == F32  # float32 operands
        kernel = gemm_kernel(a_storage, b_storage, self.storage(c) if c else None, out, tf32)
        batches = len(aoff)
        grid, threads = launch_shape(m, n, batches)
        aoff_d, boff_d, cmap_d = self.upload(aoff), self.upload(boff), self._map(cmap)
        alpha_c, beta_c = out.compute(alpha), out.compute(beta)

        def step(env: Env, checks: list) -> None:
            if before is not None:
                before(env, checks)
            result = self.empty(name, batches * m * n)
            if batches * m * n:
                kernel[grid, threads, self.stream](
                    env[a], env[b], env[c] if c else self._dummy, cmap_d, result, m, n, k,
                    *strides, aoff_d, boff_d, alpha_c, beta_c)
                self.launches += 1
            env[name] = result

        return step

    def _matmul(self, node: Node, attrs: dict[str, Any]) -> Step:
        a, b = node.inputs
        a_shape, b_shape = self.shape(a), self.shape(b)
        a2 = a_shape if len(a_shape) >= 2 else (1, *a_shape)
        b2 = b_shape if len(b_shape) >= 2 else (*b_shape, 1)
        (m, k), n = a2[-2:], b2[-1]
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        aoff = maps.broadcast_map(a2[:-2], batch) * (m * k)
        boff = maps.broadcast_map(b2[:-2], batch) * (k * n)
        return self._gemm_step(node.outputs[0].name, a, b, None, None, m, n, k, (k, 1, n, 1),
                               aoff, boff)

    def _gemm(self, node: Node, attrs: dict[str, Any]) -> Step:
        a, b, *rest = node.inputs
        c = rest[0] if rest and rest[0] else None
        (ar, ac), (br, bc) = self.shape(a), self.shape(b)
        m, k = (ac, ar) if attrs["transA"] else (ar, ac)
        n = br if attrs["transB"] else bc
        strides = ((1, ac) if attrs["transA"] else (ac, 1)) + (
            (1, bc) if attrs["transB"] else (bc, 1))
        cmap = maps.broadcast_map(self.shape(c), (m, n)) if c else None
        zero = np.zeros(1, np.int64)
        return self._gemm_step(node.outputs[0].name, a, b, c, cmap, m, n, k, strides, zero,
                               zero, attrs["alpha"], attrs["beta"])

    def _conv(self, node: Node, attrs: dict[str, Any]) -> Step:
        x, w, *rest = node.inputs
        bias = rest[0] if rest and rest[0] else None
        x_shape, w_shape = self.shape(x), self.shape(w)
        group = attrs["group"]
        cols_map, out_spatial = maps.im2col(x_shape, w_shape, group, attrs)
        n_batch, m = x_shape[0], w_shape[0]
        mg, ck, p = m // group, math.prod(w_shape[1:]), math.prod(out_spatial)
        batches = n_batch * group
        cols_name = f"{node.name}/columns"
        cols_map_d = self.upload(cols_map)
        cols_storage = self.storage(x)

        def columns(env: Env, checks: list) -> None:
            cols = self.alloc(cols_map.size, cols_storage.device_dtype)
            self.launch(movement.gather_map_or_zero, cols.size, env[x], cols_map_d, cols,
                        cols.size)
            env[cols_name] = cols

        aoff = (np.arange(batches, dtype=np.int64) % group) * (mg * ck)
        boff = np.arange(batches, dtype=np.int64) * (ck * p)
        cmap = (maps.broadcast_map((1, m, 1), (n_batch, m, p)) if bias else None)
        return self._gemm_step(node.outputs[0].name, w, cols_name, bias, cmap, mg, p, ck,
                               (ck, 1, p, 1), aoff, boff, 1.0, 1.0, before=columns,
                               b_storage=cols_storage)

    def _max_pool(self, node: Node, attrs: dict[str, Any]) -> Step:
        x = node.inputs[0]
        x_shape = self.shape(x)
        windows, _ = maps.windows(x_shape, attrs["kernel_shape"], attrs, pool=True)
        width = math.prod(attrs["kernel_shape"])
        count = windows.size // max(width, 1)
        table = (np.arange(math.prod(x_shape), dtype=np.int64) if attrs["storage_order"] == 0
                 else maps.column_major_table(x_shape))
        names = [o.name for o in node.outputs] + [""]
        with_indices = bool(names[1])
        kernel = movement.max_pool_kernel(self.storage(x), with_indices)
        windows_d, table_d = self.upload(windows.reshape(-1)), self.upload(table)

        def step(env: Env, checks: list) -> None:
            out = self.empty(names[0])
            indices = self.empty(names[1]) if with_indices else self._dummy
            self.launch(kernel, count, env[x], windows_d, table_d, out, indices, count, width)
            env[names[0]] = out
            if with_indices:
                env[names[1]] = indices

        return step

    def _rows_step(self, name: str, launch: Callable[[Env, Any], None]) -> Step:
        def step(env: Env, checks: list) -> None:
            out = self.empty(name)
            launch(env, out)
            env[name] = out

        return step

    def _reduce(self, node: Node, attrs: dict[str, Any]) -> Step:
        x, out_name = node.inputs[0], node.outputs[0].name
        shape = self.shape(x)
        if node.op.startswith("Global"):
            found = maps.rows_of(shape, list(range(2, len(shape))))
        else:
            axes = self._const(node, 1)
            if len(node.inputs) > 1 and node.inputs[1] and axes is None:
                raise UnsupportedError(f"gpu: node {node.name!r} ({node.op}): axes must be a "
                                       "constant")
            found = maps.reduction_rows(shape, axes, attrs["noop_with_empty_axes"])
        if found is None:  # nothing reduced: the data, unchanged
            return lambda env, checks: env.__setitem__(out_name, env[x])
        index_map, count, width = found
        kernel = rows.reduce_kernel(self.storage(x), self.storage(out_name),
                                    REDUCE_KINDS[node.op], index_map is not None)
        map_d = self._map(index_map)
        return self._rows_step(out_name, lambda env, out: self.launch(
            kernel, count, env[x], map_d, out, count, width))

    def _softmax(self, node: Node, attrs: dict[str, Any]) -> Step:
        x, out_name = node.inputs[0], node.outputs[0].name
        shape = self.shape(x)
        index_map, count, width = maps.rows_of(shape, [attrs["axis"] % max(len(shape), 1)]
                                               if shape else [])
        kernel = rows.softmax_kernel(self.storage(x), node.op == "LogSoftmax",
                                     index_map is not None)
        map_d = self._map(index_map)
        return self._rows_step(out_name, lambda env, out: self.launch(
            kernel, count, env[x], map_d, out, count, width))

    def _layer_norm(self, node: Node, attrs: dict[str, Any]) -> Step:
        x, scale, *rest = node.inputs
        bias = rest[0] if rest and rest[0] else None
        shape = self.shape(x)
        axis = attrs["axis"] % len(shape)
        count, width = math.prod(shape[:axis]), math.prod(shape[axis:])
        tail = shape[axis:]

        def operand(name: str | None) -> tuple[bool, Any]:
            if name is None or self.shape(name) == tail:
                return False, self._dummy
            return True, self.upload(maps.broadcast_map(self.shape(name), shape))

        scale_mapped, smap = operand(scale)
        bias_mapped, bmap = operand(bias)
        names = [o.name for o in node.outputs] + ["", ""]
        stats = storage_for(DType.FLOAT32, self.precision)
        kernel = rows.layer_norm_kernel(self.storage(x), stats, scale_mapped, bias is not None,
                                        bias_mapped)
        eps = np.float32(attrs["epsilon"])

        def step(env: Env, checks: list) -> None:
            out = self.empty(names[0])
            stat = [self.alloc(count, stats.device_dtype) for _ in range(2)]
            self.launch(kernel, count, env[x], env[scale], smap,
                        env[bias] if bias else self._dummy, bmap, out, stat[0], stat[1],
                        count, width, eps)
            env[names[0]] = out
            for name, array in zip(names[1:3], stat, strict=True):
                if name:
                    env[name] = array

        return step
