"""How each dtype lives in device memory, and how kernels read and write it.

Every value is a flat, C-ordered device array. float16 is stored as float16
and bfloat16 as its raw bits (uint16): kernels convert explicitly (float16
through numba's casts, bfloat16 through :func:`~.target.bf16_load` /
:func:`~.target.bf16_store`), compute in float32 and round once when they
store, so the same source compiles for a real GPU, which has no bfloat16
arrays in numba. float64 computes in float64. Integers and bool are only
moved, never computed.

A precision mode (``compile(..., precision=)``) changes where float32 *values* live:
``fp16`` and ``bf16`` store every float32 intermediate in 16 bits (inputs are
converted on entry, outputs back to float32 on exit; accumulation stays
float32); ``tf32`` rounds the operands of MatMul, Gemm and Conv to a 10-bit
mantissa before the float32 multiply-accumulate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.adapters.gpu.target import bf16_load, bf16_store, device_function, f32, f64
from polyhal.ir.dtypes import DType


@device_function
def _to_f32(x):
    return f32(x)


@device_function
def _to_f64(x):
    return f64(x)


@device_function
def _same(x):
    return x


@dataclass(frozen=True)
class Storage:
    """One way of holding a dtype on the device."""

    name: str
    """``f32``, ``f64``, ``f16``, ``bf16`` or the numpy name of a moved-only dtype."""
    device_dtype: np.dtype
    """The dtype of the device array."""
    compute: Any
    """The scalar type kernels compute in, :data:`~.target.f32` or :data:`~.target.f64`
    (None: moved only)."""
    load: Any
    """Device function: stored element -> compute type."""
    store: Any
    """Device function: compute type -> element to assign."""
    load_source: str = "{}"
    """The load as source text, for generated kernels (``{}`` is the element)."""
    store_source: str = "{}"


F32 = Storage("f32", np.dtype(np.float32), f32, _to_f32, _same, "f32({})")
F64 = Storage("f64", np.dtype(np.float64), f64, _to_f64, _same, "f64({})")
F16 = Storage("f16", np.dtype(np.float16), f32, _to_f32, _same, "f32({})")
BF16 = Storage("bf16", np.dtype(np.uint16), f32, bf16_load, bf16_store,
               "bf16_load({})", "bf16_store({})")
_FLOATS = {DType.FLOAT32: F32, DType.FLOAT64: F64, DType.FLOAT16: F16, DType.BFLOAT16: BF16}
_IN_MODE = {"fp32": F32, "tf32": F32, "fp16": F16, "bf16": BF16}


def storage_for(dtype: DType, precision: str = "fp32") -> Storage:
    """Where a value of ``dtype`` lives under ``precision``."""
    if dtype is DType.FLOAT32:
        return _IN_MODE[precision]
    if dtype in _FLOATS:
        return _FLOATS[dtype]
    np_dtype = np.dtype(dtype.numpy)
    return Storage(np_dtype.name, np_dtype, None, _same, _same)


def to_device_layout(array: np.ndarray, storage: Storage) -> np.ndarray:
    """A flat C-ordered host array with the device array's dtype (bfloat16 as bits)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if storage is BF16:
        return flat.astype(DType.BFLOAT16.numpy, copy=False).view(np.uint16)
    return flat.astype(storage.device_dtype, copy=False)


def from_device_layout(flat: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """The host array of ``dtype`` and ``shape`` whose bytes a device array held."""
    if dtype is DType.BFLOAT16:
        flat = flat.view(DType.BFLOAT16.numpy)
    return flat.reshape(shape)
