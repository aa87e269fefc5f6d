"""Element types: ONNX ``TensorProto.DataType`` codes and polyhal :class:`DType`.

polyhal has ten element types; every other ONNX type (string, complex, the
float8/float6/float4 formats, int4/int2 and the unsigned 16/32/64-bit ints) is
refused with an :class:`~polyhal.errors.UnsupportedError` naming the value.
"""

from __future__ import annotations

from onnx import TensorProto

from polyhal.errors import UnsupportedError
from polyhal.ir.dtypes import DType

TO_ONNX: dict[DType, int] = {
    DType.BOOL: TensorProto.BOOL,
    DType.INT8: TensorProto.INT8,
    DType.UINT8: TensorProto.UINT8,
    DType.INT16: TensorProto.INT16,
    DType.INT32: TensorProto.INT32,
    DType.INT64: TensorProto.INT64,
    DType.FLOAT16: TensorProto.FLOAT16,
    DType.BFLOAT16: TensorProto.BFLOAT16,
    DType.FLOAT32: TensorProto.FLOAT,
    DType.FLOAT64: TensorProto.DOUBLE,
}
"""The ONNX code of every polyhal dtype."""

FROM_ONNX: dict[int, DType] = {code: dtype for dtype, code in TO_ONNX.items()}
"""The polyhal dtype of each ONNX code polyhal supports."""


def onnx_type_name(code: int) -> str:
    """``float``, ``string``, ``float8e4m3fn``... or ``code 99`` for an unknown code."""
    try:
        return TensorProto.DataType.Name(code).lower()
    except ValueError:
        return f"code {code}"


def to_dtype(code: int, where: str) -> DType:
    """The polyhal dtype of ONNX type ``code``; :class:`UnsupportedError` naming ``where``."""
    dtype = FROM_ONNX.get(code)
    if dtype is None:
        if code == TensorProto.UNDEFINED:
            raise UnsupportedError(f"{where}: the element type is undefined")
        supported = ", ".join(onnx_type_name(c) for c in sorted(FROM_ONNX))
        raise UnsupportedError(f"{where}: ONNX element type {onnx_type_name(code)} is not "
                               f"supported by polyhal (supported: {supported})")
    return dtype


def to_code(dtype: DType) -> int:
    """The ONNX code of a polyhal dtype."""
    return TO_ONNX[dtype]
