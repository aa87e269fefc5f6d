"""Type and shape inference: the context an op's ``infer`` function sees, and
the helpers most ops share (broadcasting, axis normalization)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.errors import VerificationError
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.registry import OpDef


@dataclass
class InferContext:
    """What an op's ``infer`` function may look at.

    ``inputs`` has ``None`` for an omitted optional input; ``attrs`` has every
    schema attribute, defaults filled in (``None`` when absent);
    ``const(i)`` is the value of input ``i`` when it is known before run time.
    """

    node: str
    op: OpDef
    inputs: list[TensorType | None]
    attrs: dict[str, Any]
    num_outputs: int
    consts: list[np.ndarray | None] = field(default_factory=list)

    def input(self, index: int) -> TensorType:
        """The type of input ``index``; an error if it was omitted."""
        if index >= len(self.inputs) or self.inputs[index] is None:
            name = self.op.input_spec(index).name
            raise self.error(f"input {index} ({name}) is required here")
        return self.inputs[index]  # type: ignore[return-value]

    def has_input(self, index: int) -> bool:
        """True when input ``index`` was given."""
        return index < len(self.inputs) and self.inputs[index] is not None

    def const(self, index: int) -> np.ndarray | None:
        """The value of input ``index`` if known before run time, else ``None``."""
        if index < len(self.consts):
            return self.consts[index]
        return None

    def fresh(self, tag: str | int) -> str:
        """A new symbol for a dimension inference cannot express."""
        safe = "".join(c if c.isalnum() else "_" for c in self.node)
        return f"_{safe}_{tag}"

    def flag(self, name: str) -> bool:
        """The 0/1 attribute ``name`` as a bool; any other value is an error naming it."""
        value = self.attrs[name]
        if value not in (0, 1):
            raise self.error(f"attribute {name}={value} must be 0 or 1")
        return bool(value)

    def choice(self, name: str, allowed: Sequence[Any]) -> Any:
        """The attribute ``name``, an error naming it unless it is one of ``allowed``."""
        value = self.attrs[name]
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            raise self.error(f"attribute {name}={value!r} is invalid; expected one of {choices}")
        return value

    def error(self, message: str) -> VerificationError:
        """An error naming this node and op; ``raise ctx.error(...)``."""
        return VerificationError(f"node {self.node!r} ({self.op.qualified_name}): {message}")

    def axis(self, axis: int, rank: int, attr: str = "axis") -> int:
        """``axis`` normalized into ``[0, rank)``; an error naming ``attr`` otherwise."""
        if not -rank <= axis < rank:
            raise self.error(f"attribute {attr}={axis} is out of range for rank {rank}")
        return axis % rank

    def axes(self, axes: Sequence[int], rank: int, attr: str = "axes") -> list[int]:
        """Normalized, duplicate-free ``axes``."""
        result = [self.axis(int(a), rank, attr) for a in axes]
        if len(set(result)) != len(result):
            raise self.error(f"{attr}={list(axes)} repeats an axis")
        return result


def broadcast_dim(ctx: InferContext, a: D.Dim, b: D.Dim, axis: int) -> D.Dim:
    """One dimension of a multidirectional (numpy-style) broadcast."""
    if D.dims_equal(a, b) or b == 1:
        return a
    if a == 1:
        return b
    if isinstance(a, int) and isinstance(b, int):
        raise ctx.error(f"cannot broadcast dimension {axis} (from the right): {a} vs {b}")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return ctx.fresh(f"bcast{axis}")


def broadcast_shapes(ctx: InferContext, *shapes: tuple[D.Dim, ...]) -> tuple[D.Dim, ...]:
    """The broadcast of ``shapes`` (numpy/ONNX multidirectional rules)."""
    rank = max((len(s) for s in shapes), default=0)
    result: list[D.Dim] = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        result = [broadcast_dim(ctx, r, s, rank - i)
                  for i, (r, s) in enumerate(zip(result, padded, strict=True))]
    return tuple(result)


def broadcast_types(ctx: InferContext, *types: TensorType,
                    dtype: DType | None = None) -> TensorType:
    """A tensor type whose shape is the broadcast of ``types``."""
    shape = broadcast_shapes(ctx, *(t.shape for t in types))
    return TensorType(dtype or types[0].dtype, shape)


def same_as_input(index: int = 0) -> Callable[[InferContext], TensorType]:
    """Inference for ops whose output has the type of input ``index``."""

    def infer(ctx: InferContext) -> TensorType:
        return ctx.input(index)

    return infer


def broadcast_all(dtype: DType | None = None) -> Callable[[InferContext], TensorType]:
    """Inference for elementwise ops: the broadcast of every given input.

    The result dtype is that of the first input unless ``dtype`` is given.
    """

    def infer(ctx: InferContext) -> TensorType:
        types = [t for t in ctx.inputs if t is not None]
        return broadcast_types(ctx, *types, dtype=dtype)

    return infer


def const_ints(ctx: InferContext, index: int, what: str) -> list[int] | None:
    """Input ``index`` as a list of ints when it is a known constant, else ``None``."""
    value = ctx.const(index)
    if value is None:
        return None
    if value.ndim > 1:
        raise ctx.error(f"{what} must be a 1-D tensor, got rank {value.ndim}")
    return [int(v) for v in np.asarray(value).reshape(-1)]
