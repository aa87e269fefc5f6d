"""Linear algebra (ONNX semantics): MatMul and Gemm.

The integer MatMuls (MatMulInteger, QLinearMatMul) live in
:mod:`polyhal.ops.quant`; they share :func:`matmul_shape` from here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext, broadcast_shapes
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register

# ONNX MatMul/Gemm type constraint intersected with the polyhal dtypes.
MATMUL_TYPES = FLOAT_TYPES | {DType.INT32, DType.INT64}


def _static_mismatch(a: D.Dim, b: D.Dim) -> bool:
    """True when two dims are provably different (both known and unequal)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def matmul_shape(ctx: InferContext, a: TensorType, b: TensorType,
                 names: tuple[str, str] = ("A", "B")) -> tuple[D.Dim, ...]:
    """The result shape of ``numpy.matmul(a, b)``: batch dims broadcast, and a
    1-D operand is promoted to a matrix and its added dim removed again."""
    for t, name in zip((a, b), names, strict=True):
        if t.rank == 0:
            raise ctx.error(f"input {name} must have rank >= 1, got a scalar {t}")
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    if _static_mismatch(a_shape[-1], b_shape[-2]):
        raise ctx.error(f"inner dimensions differ: {names[0]} is {a} (K={a_shape[-1]}), "
                        f"{names[1]} is {b} (K={b_shape[-2]})")
    batch = broadcast_shapes(ctx, a_shape[:-2], b_shape[:-2])
    shape = (*batch, a_shape[-2], b_shape[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return shape


def _infer_matmul(ctx: InferContext) -> TensorType:
    a, b = ctx.input(0), ctx.input(1)
    return TensorType(a.dtype, matmul_shape(ctx, a, b))


register(OpDef(
    name="MatMul", inputs=(Input("A", "T"), Input("B", "T")), outputs=(Output("Y", "T"),),
    type_vars={"T": MATMUL_TYPES}, infer=_infer_matmul,
    kernel=lambda a, b: np.matmul(a, b), onnx_since=13, differentiable=True,
    doc=("Matrix product with numpy.matmul semantics (batched with broadcasting, a 1-D "
         "operand is promoted to a matrix). Integers accumulate in their own type and "
         "wrap in two's complement; float16/bfloat16 accumulate in float32.")))


# --------------------------------------------------------------------- Gemm


def _check_gemm_c(ctx: InferContext, c: TensorType, target: tuple[D.Dim, D.Dim]) -> None:
    """C must broadcast unidirectionally to ``(M, N)``."""
    if c.rank > 2:
        raise ctx.error(f"input C must have rank <= 2 (broadcastable to (M, N) = "
                        f"{target}), got {c}")
    for dim, want in zip(c.shape, target[2 - c.rank:], strict=True):
        if dim != 1 and _static_mismatch(dim, want):
            raise ctx.error(f"input C {c} does not broadcast unidirectionally to "
                            f"(M, N) = ({target[0]}, {target[1]})")


def _infer_gemm(ctx: InferContext) -> TensorType:
    a, b = ctx.input(0), ctx.input(1)
    for t, name in ((a, "A"), (b, "B")):
        if t.rank != 2:
            raise ctx.error(f"input {name} must be 2-D, got {t}")
    trans_a, trans_b = ctx.flag("transA"), ctx.flag("transB")
    k_a, m = a.shape if trans_a else a.shape[::-1]
    n, k_b = b.shape if trans_b else b.shape[::-1]
    if _static_mismatch(k_a, k_b):
        raise ctx.error(f"inner dimensions differ: A is {a} (transA={int(trans_a)}) and B is "
                        f"{b} (transB={int(trans_b)}), K = {k_a} vs {k_b}")
    if a.dtype.is_int:
        info = np.iinfo(a.dtype.numpy)
        for name in ("alpha", "beta"):
            value = float(ctx.attrs[name])
            if not (value.is_integer() and info.min <= value <= info.max):
                raise ctx.error(f"attribute {name}={value} must be a whole number in the "
                                f"range of {a.dtype.value} for {a.dtype.value} inputs")
    if ctx.has_input(2):
        _check_gemm_c(ctx, ctx.input(2), (m, n))
    return TensorType(a.dtype, (m, n))


def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *, alpha: float,
          beta: float, transA: int, transB: int) -> np.ndarray:
    scalar = a.dtype.type  # integer alpha/beta are whole numbers (checked by inference)
    y = scalar(alpha) * np.matmul(a.T if transA else a, b.T if transB else b)
    if c is not None:
        # broadcast_to rejects a C that would enlarge (M, N): the broadcast is unidirectional.
        y = y + scalar(beta) * np.broadcast_to(c, y.shape)
    return y


def _gemm_decompose(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 1.0,
                    transA: int = 0, transB: int = 0) -> Any:
    from polyhal import ops

    if transA:
        a = ops.transpose(a, perm=[1, 0])
    if transB:
        b = ops.transpose(b, perm=[1, 0])
    y = ops.matmul(a, b)
    if alpha != 1.0:  # x * 1 == x exactly, so the Mul can be skipped
        y = y * alpha
    if c is not None:
        y = y + (c if beta == 1.0 else c * beta)
    return y


register(OpDef(
    name="Gemm",
    inputs=(Input("A", "T"), Input("B", "T"), Input("C", "T", optional=True)),
    outputs=(Output("Y", "T"),),
    type_vars={"T": MATMUL_TYPES},
    attrs=(
        Attr("alpha", AttrKind.FLOAT, 1.0, doc="Multiplier of A' * B'."),
        Attr("beta", AttrKind.FLOAT, 1.0, doc="Multiplier of C."),
        Attr("transA", AttrKind.INT, 0, doc="1 transposes A (then A is (K, M))."),
        Attr("transB", AttrKind.INT, 0, doc="1 transposes B (then B is (N, K))."),
    ),
    infer=_infer_gemm, kernel=_gemm, decompose=_gemm_decompose, onnx_since=13,
    differentiable=True,
    doc=("Y = alpha * A' @ B' + beta * C for 2-D A and B (A' = A.T if transA, B' = B.T if "
         "transB); the optional C broadcasts unidirectionally to (M, N) and is computed "
         "literally, so beta=0 with an inf/NaN in C gives NaN. Choices where ONNX is "
         "silent: for integer dtypes alpha and beta must be whole numbers in the dtype's "
         "range, and arithmetic wraps in two's complement.")))
