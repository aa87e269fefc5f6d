"""Linear algebra (ONNX semantics): MatMul, Gemm, and the integer MatMuls."""

from __future__ import annotations

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import NUMERIC_TYPES
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext, broadcast_shapes
from polyhal.ops.registry import Input, OpDef, Output, register


def _infer_matmul(ctx: InferContext) -> TensorType:
    a, b = ctx.input(0), ctx.input(1)
    if a.rank == 0 or b.rank == 0:
        raise ctx.error("MatMul inputs must have rank >= 1")
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    if not D.dims_equal(k_a, k_b) and isinstance(k_a, int) and isinstance(k_b, int):
        raise ctx.error(f"inner dimensions differ: A is {a}, B is {b}")
    batch = broadcast_shapes(ctx, a_shape[:-2], b_shape[:-2])
    shape = (*batch, a_shape[-2], b_shape[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return TensorType(a.dtype, shape)


register(OpDef(
    name="MatMul", inputs=(Input("A", "T"), Input("B", "T")), outputs=(Output("Y", "T"),),
    type_vars={"T": NUMERIC_TYPES}, infer=_infer_matmul,
    kernel=lambda a, b: np.matmul(a, b), onnx_since=13, differentiable=True,
    doc="Matrix product with numpy.matmul semantics (batched, 1-D promotion)."))
