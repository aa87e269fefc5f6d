"""Tensor types: an element type and a shape of static or symbolic dims."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from polyhal.errors import IRError
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType


@dataclass(frozen=True)
class TensorType:
    """The type of a tensor value: ``dtype`` plus ``shape``.

    Each dimension is an ``int`` or a symbolic expression (see
    :mod:`polyhal.ir.dims`); dims are stored in canonical form so equal types
    compare equal.

    >>> from polyhal.ir import f32
    >>> f32["batch", 3].rank
    2
    """

    dtype: DType
    shape: tuple[D.Dim, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType):
            object.__setattr__(self, "dtype", DType.parse(self.dtype))
        if not isinstance(self.shape, tuple | list):
            raise IRError(f"tensor type: shape must be a sequence of dims, got {self.shape!r}")
        shape = tuple(
            d if type(d) is int and d >= 0  # already canonical: no message to format
            else D.canonical(d, f"dimension {i} of {self.dtype.value}{list(self.shape)}")
            for i, d in enumerate(self.shape)
        )
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def num_elements(self) -> int | None:
        """Element count when static, else ``None``."""
        if not self.is_static:
            return None
        return int(np.prod(self.shape, dtype=object)) if self.shape else 1

    def symbols(self) -> set[str]:
        """Every symbol the shape mentions."""
        return {s for d in self.shape for s in D.free_symbols(d)}

    def with_shape(self, shape: tuple[D.Dim, ...]) -> TensorType:
        """The same dtype with another shape."""
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> TensorType:
        """The same shape with another dtype."""
        return TensorType(dtype, self.shape)

    @classmethod
    def of(cls, array: np.ndarray, where: str = "array") -> TensorType:
        """The static type of a numpy array (types are immutable: one object per dtype
        and shape is shared, since every run of a compiled graph asks for them)."""
        try:
            return _static_type(cls, array.dtype, array.shape)
        except IRError:  # again, uncached, to name ``where``
            return cls(DType.from_numpy(array.dtype, where), tuple(int(d) for d in array.shape))

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"TensorType({self})"


@functools.lru_cache(maxsize=1024)
def _static_type(cls: type[TensorType], dtype: np.dtype, shape: tuple[int, ...]) -> TensorType:
    return cls(DType.from_numpy(dtype, "array"), tuple(int(d) for d in shape))
