"""Compile every GPU kernel to PTX for a real device, with no GPU present.

The CUDA simulator runs kernels as Python, so it accepts code that a GPU
cannot compile (a Python ``math`` call numba.cuda lacks, an untyped
literal, a dtype with no device type). :func:`compile_all` compiles each
kernel in each variant the adapter builds (every storage, precision, read
mode and reduction) through NVVM with ``numba.cuda.compile_ptx``; it needs
numba's real CUDA target (not the simulator) and NVVM, which
``pip install 'numba-cuda[cu12]'`` brings. Run it as
``python -m polyhal.adapters.gpu.ptx``.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numba
import numpy as np
from numba import cuda, types

from polyhal import ops
from polyhal.adapters.gpu.kernels import elementwise, movement, rows
from polyhal.adapters.gpu.kernels.gemm import gemm_kernel
from polyhal.adapters.gpu.plan import FLOAT_NAMES
from polyhal.adapters.gpu.storage import BF16, F16, F32, F64
from polyhal.adapters.gpu.target import SIMULATED
from polyhal.ir import GraphBuilder, f32
from polyhal.passes.elementwise import find_groups, group_body

STORAGES = (F32, F64, F16, BF16)
INT = types.int64


def _array(dtype: Any) -> Any:
    return numba.typeof(np.zeros(1, dtype))


def _every_elementwise_op() -> Any:
    """A graph that chains every op a fusion group can hold."""
    g = GraphBuilder("every-elementwise-op")
    x, y, z = (g.input(n, f32["n"]) for n in "xyz")
    h = x
    for unary in (ops.neg, ops.abs, ops.exp, ops.log, ops.sqrt, ops.tanh, ops.sigmoid,
                  ops.relu, ops.reciprocal, ops.sin, ops.cos, ops.floor, ops.ceil,
                  ops.softplus, ops.identity, ops.erf, ops.gelu):
        h = unary(h)
    h = ops.gelu(h, approximate="tanh")
    h = ops.leaky_relu(ops.elu(h, alpha=0.5), alpha=0.1)
    h = ops.pow(ops.div(ops.mul(ops.sub(ops.add(h, y), z), y), z), y)
    g.output(ops.max(ops.min(h, y, z), y, z), name="out")
    return g.build()


def kernels() -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    """``(name, python function, argument types)`` of every kernel variant."""
    graph = _every_elementwise_op()
    for group in find_groups(graph, FLOAT_NAMES, min_size=1):
        body = group_body(graph, group)
        for storage in STORAGES:
            modes = itertools.cycle((elementwise.DIRECT, elementwise.SCALAR, elementwise.MAPPED))
            inputs = [(storage, next(modes)) for _ in group.inputs]
            source = elementwise.group_source(body, inputs, storage)
            kernel = elementwise.compile_source(source, "fused")
            args = [_array(storage.device_dtype), INT]
            for _ in inputs:
                args += [_array(storage.device_dtype), _array(np.int64)]
            yield f"fused[{storage.name}]", kernel.py_func, tuple(args)
    for src, dst in itertools.permutations(STORAGES, 2):
        kernel = elementwise.compile_source(elementwise.cast_source(src, dst), "cast")
        yield (f"cast[{src.name}->{dst.name}]", kernel.py_func,
               (_array(dst.device_dtype), INT, _array(src.device_dtype)))
    yield from _gemms()
    yield from _rows()
    yield from _movement()


def _gemms() -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    for storage, tf32, bias in itertools.product(STORAGES, (False, True), (False, True)):
        if tf32 and storage is not F32:
            continue
        kernel = gemm_kernel(storage, storage, storage if bias else None, storage, tf32)
        data, index = _array(storage.device_dtype), _array(np.int64)
        scalar = numba.typeof(storage.compute(0))
        yield (f"gemm[{storage.name}{',tf32' if tf32 else ''}{',C' if bias else ''}]",
               kernel.py_func, (data, data, data, index, data, INT, INT, INT, INT, INT, INT,
                                INT, index, index, scalar, scalar))


def _rows() -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    index = _array(np.int64)
    for storage, mapped in itertools.product(STORAGES, (False, True)):
        data = _array(storage.device_dtype)
        for kind in rows.REDUCTIONS:
            yield (f"reduce[{kind},{storage.name}]", rows.reduce_kernel(
                storage, storage, kind, mapped).py_func, (data, index, data, INT, INT))
        for log in (False, True):
            yield (f"softmax[{storage.name},log={log}]", rows.softmax_kernel(
                storage, log, mapped).py_func, (data, index, data, INT, INT))
        for bias in (False, True):
            kernel = rows.layer_norm_kernel(storage, F32, mapped, bias, mapped)
            yield (f"layer_norm[{storage.name}]", kernel.py_func,
                   (data, data, index, data, index, data, _array(np.float32),
                    _array(np.float32), INT, INT, types.float32))
        for with_indices in (False, True):
            yield (f"max_pool[{storage.name}]", movement.max_pool_kernel(
                storage, with_indices).py_func, (data, index, index, data, index, INT, INT))


def _movement() -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    index = _array(np.int64)
    for dtype in (np.float32, np.float64, np.float16, np.uint16, np.int8, np.int32, np.int64,
                  np.bool_):
        data = _array(dtype)
        for name in ("gather_map", "gather_map_or_zero", "scatter_map"):
            yield (f"{name}[{np.dtype(dtype).name}]", getattr(movement, name).py_func,
                   (data, index, data, INT))
        for index_dtype in (np.int32, np.int64):
            yield (f"gather_indices[{np.dtype(dtype).name}]", movement.gather_indices.py_func,
                   (data, _array(index_dtype), data, INT, INT, INT, INT, index))


@contextlib.contextmanager
def _target_device(cc: tuple[int, int]) -> Iterator[None]:
    """Let device functions compile for ``cc`` with no GPU: numba compiles a device
    function called from a kernel for the *current* device's compute capability,
    which it asks the driver for."""
    from numba.cuda import dispatcher

    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def compile_all(cc: tuple[int, int] = (8, 0)) -> list[str]:
    """Compile every kernel variant to PTX for compute capability ``cc``; their names."""
    if SIMULATED:
        raise RuntimeError("PTX compilation needs numba's real CUDA target, not the simulator")
    compiled = []
    with _target_device(cc):
        for name, function, signature in kernels():
            cuda.compile_ptx(function, signature, cc=cc)
            compiled.append(name)
    return compiled


if __name__ == "__main__":
    names = compile_all()
    print(f"compiled {len(names)} kernels to PTX")
