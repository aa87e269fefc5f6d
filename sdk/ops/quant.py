"""Quantization (ONNX semantics, core domain): QuantizeLinear, DequantizeLinear,
MatMulInteger and QLinearMatMul.

Quantized values are int8, uint8 or int16 (int32 may also be dequantized).
Rounding is half to even and results saturate to the quantized type's range.
Scales and zero points of Quantize/DequantizeLinear are per-tensor (a
scalar), per-axis (a 1-D tensor along ``axis``) or blocked (``x``'s rank,
``ceil(D_axis / block_size)`` along ``axis``). Those of the integer MatMuls
are per-tensor, per-row of A (``[M]`` or ``[..., M, 1]``) or per-column of B
(``[N]`` or ``[..., 1, N]``).
"""

from __future__ import annotations

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.linalg import matmul_shape
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register

# ONNX type constraints intersected with the polyhal dtypes.
_QUANTIZED = frozenset({DType.INT8, DType.UINT8, DType.INT16})
_DEQUANT_INPUT = _QUANTIZED | {DType.INT32}
_SCALES = frozenset({DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16})
_QUANT_INPUT = _SCALES | {DType.INT32}
_INT8S = frozenset({DType.INT8, DType.UINT8})


def _static_mismatch(a: D.Dim, b: D.Dim) -> bool:
    """True when two dims are provably different (both known and unequal)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


# ------------------------------------------- Quantize/DequantizeLinear: shapes


def _check_same_shape(ctx: InferContext, first: TensorType, second: TensorType,
                      names: tuple[str, str]) -> None:
    if first.rank != second.rank or any(
            _static_mismatch(a, b) for a, b in zip(first.shape, second.shape, strict=True)):
        raise ctx.error(f"input {names[1]} {second} must have the shape of input "
                        f"{names[0]} {first}")


def _check_per_axis(ctx: InferContext, x: TensorType, scale: TensorType, name: str) -> None:
    if scale.rank == 0:
        return
    if scale.rank != 1:
        raise ctx.error(f"input {name} {scale} must be a scalar (per-tensor) or 1-D "
                        "(per-axis); a scale of x's rank is blocked quantization and needs "
                        "attribute block_size > 0")
    if x.rank == 0:
        raise ctx.error(f"input {name} is 1-D (per-axis) but x is a scalar")
    axis = 0 if x.rank == 1 else ctx.axis(ctx.attrs["axis"], x.rank)
    length, dim = scale.shape[0], x.shape[axis]
    if length != 1 and _static_mismatch(length, dim):
        raise ctx.error(f"input {name} has length {length} but x {x} has {dim} along "
                        f"attribute axis={ctx.attrs['axis']}")


def _check_blocked(ctx: InferContext, x: TensorType, scale: TensorType, name: str) -> None:
    block = ctx.attrs["block_size"]
    if scale.rank != x.rank:
        raise ctx.error(f"attribute block_size={block} (blocked quantization) needs input "
                        f"{name} of x's rank {x.rank}, got {scale}")
    axis = ctx.axis(ctx.attrs["axis"], x.rank)
    for i, (s, d) in enumerate(zip(scale.shape, x.shape, strict=True)):
        if i != axis and _static_mismatch(s, d):
            raise ctx.error(f"input {name} {scale} must match x {x} except along attribute "
                            f"axis={ctx.attrs['axis']}")
        if i == axis and isinstance(s, int) and isinstance(d, int) and -(-d // block) != s:
            raise ctx.error(f"attribute block_size={block}: x has {d} along axis {axis}, so "
                            f"input {name} needs ceil({d}/{block}) = {-(-d // block)} there, "
                            f"got {s}")


def _check_granularity(ctx: InferContext, scale_name: str, zero_name: str) -> None:
    """Scale and zero point (inputs 1 and 2) against x (input 0) and the attributes."""
    x, scale = ctx.input(0), ctx.input(1)
    if ctx.has_input(2):
        _check_same_shape(ctx, scale, ctx.input(2), (scale_name, zero_name))
    block = ctx.attrs["block_size"]
    if block < 0:
        raise ctx.error(f"attribute block_size={block} must be >= 0")
    if block == 0:
        _check_per_axis(ctx, x, scale, scale_name)
    else:
        _check_blocked(ctx, x, scale, scale_name)


def _infer_quantize(ctx: InferContext) -> TensorType:
    _check_granularity(ctx, "y_scale", "y_zero_point")
    ctx.flag("saturate")
    precision = ctx.attrs["precision"]
    if precision is not None and precision not in _QUANT_INPUT:
        raise ctx.error(f"attribute precision={precision} must be one of "
                        f"{_names(_QUANT_INPUT)}")
    out = ctx.attrs["output_dtype"]
    if out is not None and out not in _QUANTIZED:
        raise ctx.error(f"attribute output_dtype={out} must be one of {_names(_QUANTIZED)}")
    if ctx.has_input(2):
        zero = ctx.input(2).dtype
        if out is not None and out != zero:
            raise ctx.error(f"attribute output_dtype={out} differs from the dtype {zero} of "
                            "input y_zero_point")
        out = zero
    return TensorType(out or DType.UINT8, ctx.input(0).shape)


def _infer_dequantize(ctx: InferContext) -> TensorType:
    _check_granularity(ctx, "x_scale", "x_zero_point")
    out = ctx.attrs["output_dtype"]
    if out is not None and out not in _SCALES:
        raise ctx.error(f"attribute output_dtype={out} must be one of {_names(_SCALES)}")
    return TensorType(out or ctx.input(1).dtype, ctx.input(0).shape)


def _names(dtypes: frozenset[DType]) -> str:
    return ", ".join(sorted(d.value for d in dtypes))


# ------------------------------------------ Quantize/DequantizeLinear: kernels


def _broadcast_param(param: np.ndarray, shape: tuple[int, ...], axis: int, block: int,
                     name: str) -> np.ndarray:
    """A scale or zero point shaped to broadcast against an ``x`` of ``shape``."""
    rank = len(shape)
    if param.ndim == 0:
        return param
    if block == 0:
        if param.ndim != 1 or rank == 0:
            raise ValueError(f"{name} of shape {list(param.shape)} is neither per-tensor nor "
                             f"per-axis for x of shape {list(shape)}")
        ax = 0 if rank == 1 else _axis(axis, rank)
        if param.shape[0] not in (1, shape[ax]):
            raise ValueError(f"{name} has length {param.shape[0]}, x has {shape[ax]} along "
                             f"axis {ax}")
        return param.reshape([-1 if i == ax else 1 for i in range(rank)])
    ax = _axis(axis, rank) if param.ndim == rank else -1
    expected = [-(-d // block) if i == ax else d for i, d in enumerate(shape)]
    if ax < 0 or list(param.shape) != expected:
        raise ValueError(f"{name} of shape {list(param.shape)} does not block x of shape "
                         f"{list(shape)} with block_size={block} along axis {axis}")
    # Index, rather than np.repeat, so a huge block_size never allocates more than x.
    return np.take(param, np.arange(shape[ax]) // block, axis=ax)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis={axis} is out of range for rank {rank}")
    return axis % rank


def _divide(x: np.ndarray, scale: np.ndarray, precision: DType) -> np.ndarray:
    """``x / scale`` in ``precision``, returned as float64."""
    with np.errstate(all="ignore"):  # a zero scale gives inf/NaN, handled by saturation
        if precision is DType.INT32:
            # int32 precision: both operands are exact in float64, so is the quotient's
            # rounding to an integer.
            return x.astype(np.float64) / scale.astype(np.float64)
        # Operands rounded to the precision type; the float32 quotient of 16-bit values
        # rounds once more to that type without double-rounding error.
        xp = x.astype(precision.numpy).astype(np.float32)
        sp = scale.astype(precision.numpy).astype(np.float32)
        return (xp / sp).astype(precision.numpy).astype(np.float64)


def _saturate(rounded: np.ndarray, zero: np.ndarray | int, dtype: np.dtype) -> np.ndarray:
    """``rounded + zero`` clipped to ``dtype``'s range; a NaN counts as 0."""
    info = np.iinfo(dtype)
    total = np.where(np.isnan(rounded), 0.0, rounded) + np.asarray(zero, dtype=np.float64)
    return np.asarray(np.clip(total, info.min, info.max), dtype=dtype)


def _quantize(x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None,
              *, axis: int, block_size: int, output_dtype: DType | None,
              precision: DType | None, saturate: int) -> np.ndarray:
    del saturate  # only meaningful for float8 outputs, which polyhal does not have
    out = (y_zero_point.dtype if y_zero_point is not None
           else (output_dtype or DType.UINT8).numpy)
    scale = _broadcast_param(y_scale, x.shape, axis, block_size, "y_scale")
    zero: np.ndarray | int = 0
    if y_zero_point is not None:
        zero = _broadcast_param(y_zero_point, x.shape, axis, block_size, "y_zero_point")
    quotient = _divide(x, scale, precision or DType.from_numpy(y_scale.dtype))
    return _saturate(np.rint(quotient), zero, out)


def _dequantize(x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None,
                *, axis: int, block_size: int, output_dtype: DType | None) -> np.ndarray:
    out = output_dtype or DType.from_numpy(x_scale.dtype)
    scale = _broadcast_param(x_scale, x.shape, axis, block_size, "x_scale")
    diff = x.astype(np.int64)  # x - zero point is exact in int64
    if x_zero_point is not None:
        diff = diff - _broadcast_param(x_zero_point, x.shape, axis, block_size,
                                       "x_zero_point").astype(np.int64)
    # The multiplication runs in the output type: operands rounded to it, and the float32
    # product of two 16-bit values is exact, so rounding it to the output is the only
    # rounding (the executor rounds float32 to a 16-bit output).
    left = diff.astype(out.numpy).astype(np.float32)
    right = scale.astype(out.numpy).astype(np.float32)
    return np.asarray(left * right, dtype=np.float32)


_GRANULARITY_ATTRS = (
    Attr("axis", AttrKind.INT, 1, doc="The quantized axis (per-axis and blocked)."),
    Attr("block_size", AttrKind.INT, 0, doc="Block length along axis; 0 = not blocked."),
)

register(OpDef(
    name="QuantizeLinear",
    inputs=(Input("x", "T1"), Input("y_scale", "T2"),
            Input("y_zero_point", "T3", optional=True)),
    outputs=(Output("y", "T3"),),
    type_vars={"T1": _QUANT_INPUT, "T2": _QUANT_INPUT, "T3": _QUANTIZED},
    attrs=(*_GRANULARITY_ATTRS,
           Attr("output_dtype", AttrKind.DTYPE, None,
                doc="The quantized dtype; else that of y_zero_point, else uint8."),
           Attr("precision", AttrKind.DTYPE, None,
                doc="The dtype of the division x / y_scale; default: y_scale's dtype."),
           Attr("saturate", AttrKind.INT, 1,
                doc="Only for float8 outputs in ONNX; integer outputs always saturate.")),
    infer=_infer_quantize, kernel=_quantize, onnx_since=28,
    doc=("y = saturate(round_half_even(x / y_scale) + y_zero_point), per-tensor, per-axis "
         "or blocked. The division runs in `precision` (default: y_scale's dtype): operands "
         "are rounded to it and so is the quotient; int32 precision divides in float64. "
         "Choices where ONNX is silent: a NaN quotient gives y_zero_point, +-inf saturate; "
         "a 1-D scale of length 1 acts per-tensor; for 1-D x a 1-D scale runs along axis 0 "
         "whatever `axis` says. Like every op, the reference executor computes 16-bit "
         "float inputs in float32, so an implicit 16-bit precision (taken from a 16-bit "
         "y_scale) divides in float32; an explicit precision attribute is honoured.")))

register(OpDef(
    name="DequantizeLinear",
    inputs=(Input("x", "T1"), Input("x_scale", "T2"),
            Input("x_zero_point", "T1", optional=True)),
    outputs=(Output("y", "T3"),),
    type_vars={"T1": _DEQUANT_INPUT, "T2": _SCALES, "T3": _SCALES},
    attrs=(*_GRANULARITY_ATTRS,
           Attr("output_dtype", AttrKind.DTYPE, None,
                doc="The float output dtype; default: x_scale's dtype.")),
    infer=_infer_dequantize, kernel=_dequantize, onnx_since=28,
    doc=("y = (x - x_zero_point) * x_scale, per-tensor, per-axis or blocked; x - "
         "x_zero_point is exact and the product is rounded once to the output dtype. "
         "Choices where ONNX is silent: int32 x may have a zero point; a 1-D scale of "
         "length 1 acts per-tensor; for 1-D x a 1-D scale runs along axis 0. Like every "
         "op, the reference executor computes 16-bit float inputs in float32, so without "
         "output_dtype a 16-bit x_scale multiplies in float32 and rounds once at the end.")))


# ----------------------------------------------------- integer matrix products


def _param_target(operand: tuple[D.Dim, ...], row: bool) -> tuple[D.Dim, ...]:
    """The shape a per-row (of A) or per-column (of B) parameter broadcasts to."""
    if row:
        full = (1, *operand) if len(operand) == 1 else operand
        return (*full[:-1], 1)
    full = (*operand, 1) if len(operand) == 1 else operand
    return (*full[:-2], 1, full[-1])


def _param_shape(shape: tuple[D.Dim, ...], row: bool) -> tuple[D.Dim, ...]:
    """A 1-D parameter is an M-vector (rows) or an N-vector (columns)."""
    if len(shape) != 1:
        return shape
    return (shape[0], 1) if row else (1, shape[0])


def _check_matmul_param(ctx: InferContext, index: int, operand: TensorType, row: bool,
                        name: str) -> None:
    param = ctx.input(index)
    if operand.rank == 0:
        return  # matmul_shape reports the scalar operand
    target = _param_target(operand.shape, row)
    shape = _param_shape(param.shape, row)
    if len(shape) > len(target) or any(
            d != 1 and _static_mismatch(d, t)
            for d, t in zip(shape[::-1], target[::-1], strict=False)):
        kind = "per-row ([M] or [..., M, 1])" if row else "per-column ([N] or [..., 1, N])"
        raise ctx.error(f"input {name} {param} must be a scalar or {kind}, broadcasting to "
                        f"{list(target)}")


def _matmul_param(param: np.ndarray, operand: np.ndarray, row: bool,
                  name: str) -> np.ndarray:
    """A per-tensor/row/column parameter shaped to broadcast against the promoted operand."""
    target = _param_target(operand.shape, row)
    shaped = param.reshape(_param_shape(param.shape, row))
    try:
        fits = (shaped.ndim <= len(target)
                and np.broadcast_shapes(shaped.shape, target) == tuple(target))
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{name} of shape {list(param.shape)} does not broadcast to "
                         f"{list(target)}")
    return shaped


def _promote(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy.matmul's promotion of 1-D operands to matrices."""
    return (a[None, :] if a.ndim == 1 else a), (b[:, None] if b.ndim == 1 else b)


def _demote(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Drop the dims that :func:`_promote` added."""
    if a.ndim == 1 and b.ndim == 1:
        return y[..., 0, 0]
    if a.ndim == 1:
        return y[..., 0, :]
    if b.ndim == 1:
        return y[..., 0]
    return y


def _accumulate(a: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray,
                b_zero: np.ndarray | None) -> np.ndarray:
    """``(a - a_zero) @ (b - b_zero)`` on promoted operands, wrapped to int32."""
    for operand, name in ((a, "A"), (b, "B")):
        if operand.ndim == 0:
            raise ValueError(f"{name} must have rank >= 1")
    a2, b2 = _promote(a, b)
    left = a2.astype(np.int64)
    right = b2.astype(np.int64)
    if a_zero is not None:
        left = left - _matmul_param(a_zero, a, True, "a_zero_point").astype(np.int64)
    if b_zero is not None:
        right = right - _matmul_param(b_zero, b, False, "b_zero_point").astype(np.int64)
    # Exact in int64; narrowing to int32 wraps exactly as 32-bit accumulation does.
    return np.matmul(left, right).astype(np.int32)


def _infer_matmul_integer(ctx: InferContext) -> TensorType:
    a, b = ctx.input(0), ctx.input(1)
    shape = matmul_shape(ctx, a, b)
    if ctx.has_input(2):
        _check_matmul_param(ctx, 2, a, True, "a_zero_point")
    if ctx.has_input(3):
        _check_matmul_param(ctx, 3, b, False, "b_zero_point")
    return TensorType(DType.INT32, shape)


def _matmul_integer(a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None,
                    b_zero_point: np.ndarray | None = None) -> np.ndarray:
    return _demote(_accumulate(a, a_zero_point, b, b_zero_point), a, b)


register(OpDef(
    name="MatMulInteger",
    inputs=(Input("A", "T1"), Input("B", "T2"), Input("a_zero_point", "T1", optional=True),
            Input("b_zero_point", "T2", optional=True)),
    outputs=(Output("Y", "T3"),),
    type_vars={"T1": _INT8S, "T2": _INT8S, "T3": frozenset({DType.INT32})},
    infer=_infer_matmul_integer, kernel=_matmul_integer, onnx_since=10,
    doc=("(A - a_zero_point) @ (B - b_zero_point) in int32 with numpy.matmul semantics. "
         "Zero points are scalars, per-row of A ([M] or [..., M, 1]) or per-column of B "
         "([N] or [..., 1, N]). Products are exact; the sum wraps in two's complement "
         "int32, as ONNX allows.")))


def _check_one_element(ctx: InferContext, index: int, name: str) -> None:
    param = ctx.input(index)
    if param.rank > 1 or (param.rank == 1 and _static_mismatch(param.shape[0], 1)):
        raise ctx.error(f"input {name} {param} must be a scalar or a 1-element 1-D tensor "
                        "(the output is quantized per tensor)")


def _infer_qlinear_matmul(ctx: InferContext) -> TensorType:
    a, b = ctx.input(0), ctx.input(3)
    shape = matmul_shape(ctx, a, b, ("a", "b"))
    for scale, zero, operand, row, side in ((1, 2, a, True, "a"), (4, 5, b, False, "b")):
        _check_matmul_param(ctx, scale, operand, row, f"{side}_scale")
        _check_same_shape(ctx, ctx.input(scale), ctx.input(zero),
                          (f"{side}_scale", f"{side}_zero_point"))
    _check_one_element(ctx, 6, "y_scale")
    _check_one_element(ctx, 7, "y_zero_point")
    return TensorType(ctx.input(7).dtype, shape)


def _qlinear_matmul(a: np.ndarray, a_scale: np.ndarray, a_zero_point: np.ndarray,
                    b: np.ndarray, b_scale: np.ndarray, b_zero_point: np.ndarray,
                    y_scale: np.ndarray, y_zero_point: np.ndarray) -> np.ndarray:
    for scale, zero, side in ((a_scale, a_zero_point, "a"), (b_scale, b_zero_point, "b")):
        if scale.shape != zero.shape:
            raise ValueError(f"{side}_scale has shape {list(scale.shape)} but "
                             f"{side}_zero_point has {list(zero.shape)}")
    for param, name in ((y_scale, "y_scale"), (y_zero_point, "y_zero_point")):
        if param.ndim > 1 or param.size != 1:
            raise ValueError(f"{name} must have one element, got shape {list(param.shape)}")
    acc = _accumulate(a, a_zero_point, b, b_zero_point)
    row = _matmul_param(a_scale, a, True, "a_scale").astype(np.float64)
    col = _matmul_param(b_scale, b, False, "b_scale").astype(np.float64)
    with np.errstate(all="ignore"):  # a zero y_scale gives inf/NaN, handled by saturation
        real = acc.astype(np.float64) * row * col / np.float64(y_scale.reshape(()))
    y = _saturate(np.rint(real), y_zero_point.reshape(()), y_zero_point.dtype)
    return _demote(y, a, b)


register(OpDef(
    name="QLinearMatMul",
    inputs=(Input("a", "T1"), Input("a_scale", "TS"), Input("a_zero_point", "T1"),
            Input("b", "T2"), Input("b_scale", "TS"), Input("b_zero_point", "T2"),
            Input("y_scale", "TS"), Input("y_zero_point", "T3")),
    outputs=(Output("y", "T3"),),
    type_vars={"TS": _SCALES, "T1": _INT8S, "T2": _INT8S, "T3": _INT8S},
    infer=_infer_qlinear_matmul, kernel=_qlinear_matmul, onnx_since=21,
    doc=("y = saturate(round_half_even(acc * a_scale * b_scale / y_scale) + y_zero_point) "
         "where acc = (a - a_zero_point) @ (b - b_zero_point) accumulates exactly and wraps "
         "in int32 (numpy.matmul semantics). Choices where ONNX is silent: the rescale is "
         "evaluated left to right in float64; a NaN gives y_zero_point and +-inf saturate; "
         "a/b scales and zero points are scalars, per-row of a or per-column of b (as for "
         "MatMulInteger), y_scale and y_zero_point have one element.")))
