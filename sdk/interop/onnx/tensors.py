"""ONNX ``TensorProto`` <-> numpy, with every size checked before data is touched.

:class:`TensorReader` decodes initializers and tensor attributes: the element
type must be one polyhal has, the dims are checked against
:class:`~polyhal.ir.Limits` (rank, elements per tensor, bytes in total)
*before* the data is decoded or read from an external file, and the amount
of data must match the dims exactly. :func:`encode` writes an array as raw
little-endian bytes (bfloat16 as its 16-bit pattern, bool as one byte).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto

from polyhal.errors import LimitExceededError, SerializationError
from polyhal.interop.onnx.dtypes import to_code, to_dtype
from polyhal.interop.onnx.external import read_external
from polyhal.ir.dtypes import DType
from polyhal.ir.limits import Limits

_INT32_STORED = frozenset({DType.BOOL, DType.INT8, DType.UINT8, DType.INT16, DType.INT32,
                           DType.FLOAT16, DType.BFLOAT16})


def _storage(dtype: DType) -> np.dtype:
    """The numpy type of the raw bytes: bfloat16 as uint16, bool as uint8."""
    if dtype is DType.BFLOAT16:
        return np.dtype(np.uint16)
    if dtype is DType.BOOL:
        return np.dtype(np.uint8)
    return dtype.numpy


def _from_storage(raw: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype is DType.BFLOAT16:
        return raw.view(DType.BFLOAT16.numpy)
    if dtype is DType.BOOL:
        return raw.astype(np.bool_)
    return raw


class TensorReader:
    """Decodes the tensors of one model, counting their bytes against the limits."""

    def __init__(self, limits: Limits, folder: Path | None) -> None:
        self.limits = limits
        self.folder = folder
        self.total = 0

    def check_dims(self, dims: list[int], where: str) -> int:
        """Validate ``dims`` against the limits; the element count."""
        if len(dims) > self.limits.max_rank:
            raise LimitExceededError(f"{where}: rank {len(dims)} exceeds the limit of "
                                     f"{self.limits.max_rank}")
        if any(d < 0 for d in dims):
            raise SerializationError(f"{where}: dims {dims} hold a negative size")
        self.limits.check_shape(dims, where)
        return math.prod(dims)

    def read(self, tensor: TensorProto, where: str) -> np.ndarray:
        """The array ``tensor`` holds."""
        dtype = to_dtype(tensor.data_type, where)
        dims = [int(d) for d in tensor.dims]
        count = self.check_dims(dims, where)
        if tensor.HasField("segment"):
            raise SerializationError(f"{where}: segmented tensors are not supported")
        nbytes = count * dtype.itemsize
        self.total += nbytes
        if self.total > self.limits.max_total_bytes:
            raise LimitExceededError(f"{where}: tensors exceed the limit of "
                                     f"{self.limits.max_total_bytes} bytes in total "
                                     "(see polyhal.ir.Limits)")
        storage = _storage(dtype)
        if tensor.data_location == TensorProto.EXTERNAL:
            if tensor.HasField("raw_data"):
                raise SerializationError(f"{where}: external tensor also holds raw_data")
            raw = self._from_bytes(read_external(tensor, nbytes, self.folder, where), storage)
        elif tensor.data_location != TensorProto.DEFAULT:
            raise SerializationError(f"{where}: unknown data_location {tensor.data_location}")
        elif tensor.HasField("raw_data"):
            if len(tensor.raw_data) != nbytes:
                raise SerializationError(f"{where}: raw_data has {len(tensor.raw_data)} bytes, "
                                         f"its dims {dims} and type {dtype} need {nbytes}")
            raw = self._from_bytes(tensor.raw_data, storage)
        else:
            raw = self._typed(tensor, dtype, count, where)
        return _from_storage(raw.reshape(dims), dtype)

    @staticmethod
    def _from_bytes(data: bytes, storage: np.dtype) -> np.ndarray:
        array = np.frombuffer(data, dtype=storage.newbyteorder("<"))
        return array if sys.byteorder == "little" else array.astype(storage)

    @staticmethod
    def _typed(tensor: TensorProto, dtype: DType, count: int, where: str) -> np.ndarray:
        if dtype is DType.FLOAT32:
            field, values = "float_data", tensor.float_data
        elif dtype is DType.FLOAT64:
            field, values = "double_data", tensor.double_data
        elif dtype is DType.INT64:
            field, values = "int64_data", tensor.int64_data
        else:
            field, values = "int32_data", tensor.int32_data
        if len(values) != count:
            raise SerializationError(f"{where}: {field} has {len(values)} values, its dims "
                                     f"{list(tensor.dims)} need {count}")
        if dtype not in _INT32_STORED or dtype is DType.INT32:
            return np.array(values, dtype=dtype.numpy)
        wide = np.array(values, dtype=np.int64)
        storage = _storage(dtype)
        # float16 is stored as its bit pattern (ONNX's TensorProto), as bfloat16 is.
        bits = np.dtype(np.uint16) if dtype is DType.FLOAT16 else storage
        info = np.iinfo(bits)
        low = 0 if dtype is DType.BOOL else info.min
        high = 1 if dtype is DType.BOOL else info.max
        if wide.size and (wide.min() < low or wide.max() > high):
            raise SerializationError(f"{where}: int32_data holds values outside the range of "
                                     f"{dtype}")
        return wide.astype(bits).view(storage)


def encode(array: np.ndarray, name: str) -> TensorProto:
    """A ``TensorProto`` holding ``array`` as raw little-endian bytes."""
    dtype = DType.from_numpy(array.dtype, f"tensor {name!r}")
    storage = _storage(dtype)
    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = to_code(dtype)
    tensor.dims.extend(int(d) for d in array.shape)
    raw = np.ascontiguousarray(array).view(storage) if dtype is not DType.BOOL else (
        np.ascontiguousarray(array).astype(np.uint8))
    tensor.raw_data = raw.astype(storage.newbyteorder("<"), copy=False).tobytes()
    return tensor
