"""Element types of the IR.

A :class:`DType` names an element type and maps it to a numpy dtype
(bfloat16 comes from ``ml_dtypes``). Indexing a dtype makes a tensor type::

    >>> from polyhal.ir import f32
    >>> f32["batch", 784]
    TensorType(float32[batch, 784])
"""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING

import numpy as np

from polyhal.errors import IRError

if TYPE_CHECKING:
    from polyhal.ir.types import TensorType


class DType(enum.Enum):
    """An element type: its value is the canonical name used in files and text."""

    BOOL = "bool"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that stores this element type."""
        return _NUMPY.get(self) or _bfloat16()

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        """True for float16, bfloat16, float32 and float64."""
        return self in FLOAT_TYPES

    @property
    def is_int(self) -> bool:
        """True for the signed and unsigned integer types (not bool)."""
        return self in INT_TYPES

    @property
    def is_low_precision(self) -> bool:
        """True for 16-bit floats, which the reference computes in float32."""
        return self in (DType.FLOAT16, DType.BFLOAT16)

    @classmethod
    def parse(cls, name: object, where: str = "dtype") -> DType:
        """The dtype named ``name``; an :class:`IRError` naming ``where`` otherwise."""
        if isinstance(name, DType):
            return name
        try:
            return cls(name)
        except (ValueError, TypeError):
            known = ", ".join(d.value for d in cls)
            raise IRError(f"{where}: unknown dtype {name!r} (known: {known})") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type, where: str = "array") -> DType:
        """The IR dtype of a numpy dtype; an :class:`IRError` if it has none."""
        dt = np.dtype(dtype)
        for d, npd in _NUMPY.items():
            if npd == dt:
                return d
        if dt.name == "bfloat16" and dt == _bfloat16():
            return DType.BFLOAT16
        raise IRError(f"{where}: numpy dtype {dt} has no polyhal dtype")

    def __getitem__(self, dims: object) -> TensorType:
        from polyhal.ir.types import TensorType

        if not isinstance(dims, tuple):
            dims = (dims,)
        if dims == ((),):
            dims = ()
        return TensorType(self, dims)

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    def __str__(self) -> str:
        return self.value


@functools.cache
def _bfloat16() -> np.dtype:
    # ml_dtypes takes most of a second to import: load it only when bfloat16 is used.
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


_NUMPY: dict[DType, np.dtype] = {
    DType.BOOL: np.dtype(np.bool_),
    DType.INT8: np.dtype(np.int8),
    DType.UINT8: np.dtype(np.uint8),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.FLOAT16: np.dtype(np.float16),
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT64: np.dtype(np.float64),
}

FLOAT_TYPES = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
SIGNED_INT_TYPES = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
INT_TYPES = SIGNED_INT_TYPES | {DType.UINT8}
NUMERIC_TYPES = FLOAT_TYPES | INT_TYPES
SIGNED_NUMERIC_TYPES = FLOAT_TYPES | SIGNED_INT_TYPES
ALL_TYPES = frozenset(DType)

# Short aliases for writing graphs: ``f32["batch", 10]``.
b8 = DType.BOOL
i8 = DType.INT8
u8 = DType.UINT8
i16 = DType.INT16
i32 = DType.INT32
i64 = DType.INT64
f16 = DType.FLOAT16
bf16 = DType.BFLOAT16
f32 = DType.FLOAT32
f64 = DType.FLOAT64
