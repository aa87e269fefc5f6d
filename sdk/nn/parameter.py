"""``Parameter``: a named trainable tensor of a module."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyhal.errors import InputBindingError, IRError, LimitExceededError
from polyhal.ir.dtypes import DType
from polyhal.ir.limits import ensure_allocatable
from polyhal.ir.types import TensorType
from polyhal.nn.init import Fans, default_fans

InitFunction = Callable[["Parameter", np.random.Generator], Any]


class Parameter:
    """A tensor a module learns: shape, dtype, initializer, value and ``trainable``.

    Assigning a ``Parameter`` to an attribute of a :class:`~polyhal.nn.Module`
    registers it under that attribute's name. Its value (``data``, a numpy
    array) is drawn by ``init`` when the model is initialized; until then it has
    none. ``trainable=False`` freezes it: it stays a graph input of the
    training graph but is left out of :meth:`~polyhal.nn.Module.trainable_names`.

    >>> from polyhal import nn
    >>> scale = nn.Parameter((4,), nn.init.ones(), dtype="float64")
    >>> scale
    Parameter(float64[4], init=ones(), trainable)

    A ``Parameter`` is not an array: pass it to ops through its module's
    attribute inside ``forward`` (a graph value then), or read ``.data``.
    """

    def __init__(self, shape: Sequence[int], init: InitFunction, *,
                 dtype: DType | str = "float32", trainable: bool = True,
                 fans: Fans | None = None) -> None:
        if not isinstance(shape, Sequence) or isinstance(shape, str) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise IRError(f"Parameter: shape must be a sequence of ints >= 0, got {shape!r}")
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: DType = DType.parse(dtype, "Parameter: dtype")
        if not self.dtype.is_float:
            raise IRError(f"Parameter: dtype must be a floating-point type, got "
                          f"{self.dtype.value}")
        if getattr(init, "is_initializer_factory", False):
            raise IRError(f"Parameter: init={init.__name__} is an initializer factory; call it "
                          f"(init={init.__name__}())")
        if not callable(init):
            raise IRError(f"Parameter: init must be an initializer (see polyhal.nn.init), "
                          f"got {init!r}")
        self.init = init
        self.trainable = bool(trainable)
        if fans is not None and not (isinstance(fans, tuple | list) and len(fans) == 2 and all(
                isinstance(f, int) and not isinstance(f, bool) and f >= 0 for f in fans)):
            raise IRError(f"Parameter: fans must be (fan_in, fan_out), two ints >= 0, got "
                          f"{fans!r}")
        self.fans: Fans = (fans[0], fans[1]) if fans is not None else default_fans(self.shape)
        self.name: str | None = None  # the attribute name it was first registered under
        self._data: np.ndarray | None = None

    @property
    def type(self) -> TensorType:
        """The tensor type ``dtype[shape]``."""
        return TensorType(self.dtype, self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_initialized(self) -> bool:
        """True once a value has been drawn or set."""
        return self._data is not None

    @property
    def data(self) -> np.ndarray:
        """The value (the array itself: in-place updates change the parameter)."""
        if self._data is None:
            raise IRError(f"{self._describe()} has no value yet: call initialize(seed) on the "
                          "model (graph, bind, feeds, predict, state_dict and named_parameters "
                          "of a model draw missing values with seed 0)")
        return self._data

    @data.setter
    def data(self, value: Any) -> None:
        problem = self._mismatch(value)
        if problem:
            raise InputBindingError(f"{self._describe()}: {problem}")
        self._data = np.array(value, copy=True)

    def initialize(self, rng: np.random.Generator) -> None:
        """Draw a value from ``rng`` with ``init``; a parameter larger than
        :class:`polyhal.ir.Limits` allows, or than memory holds, is a
        :class:`~polyhal.errors.LimitExceededError` naming it."""
        where = f"{self._describe()} ({self.type})"
        ensure_allocatable(self.shape, where)
        try:
            drawn = np.asarray(self.init(self, rng))
        except MemoryError:
            raise LimitExceededError(f"{where}: not enough memory to draw its "
                                     f"{self.type.num_elements} values") from None
        if drawn.shape != self.shape:
            raise IRError(f"{self._describe()}: initializer {self.init!r} returned shape "
                          f"{drawn.shape}, expected {self.shape}")
        self._data = drawn.astype(self.dtype.numpy)

    def _mismatch(self, value: Any) -> str | None:
        """Why ``value`` cannot be this parameter's value, or ``None``: it must be an
        array of exactly this shape and dtype (polyhal never casts implicitly)."""
        if not isinstance(value, np.ndarray | np.generic):
            return f"expected a numpy array, got {type(value).__name__}"
        if value.shape != self.shape:
            return f"shape {value.shape} does not match the parameter's {self.shape}"
        if value.dtype != self.dtype.numpy:
            return f"dtype {value.dtype} does not match the parameter's {self.dtype.value}"
        return None

    def _describe(self) -> str:
        return f"parameter {self.name!r}" if self.name else "parameter"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise IRError(f"{self._describe()} ({self.type}) was used as an array: inside forward "
                      "use the module attribute (self.weight is a graph value while building); "
                      "to read its value use .data")

    def __repr__(self) -> str:
        return (f"Parameter({self.type}, init={self.init!r}, "
                f"{'trainable' if self.trainable else 'frozen'})")
