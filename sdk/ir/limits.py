"""Limits that keep a hostile model file or graph from exhausting memory.

One :class:`Limits` governs loading (tensors in files, node counts, ranks),
verification (statically known tensor sizes) and execution (tensors whose
size is only known at run time). The defaults are safe for a 24 GiB machine;
:func:`use_limits` changes them for a block of code::

    with use_limits(Limits(max_elements=10**6)):
        graph = load("model.json")
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from polyhal.errors import LimitExceededError


@dataclass(frozen=True)
class Limits:
    """Upper bounds enforced on load, on verification and at run time."""

    max_elements: int = 1 << 28
    """Elements in any one tensor (2**28: 1 GiB of float32), and so the size of any
    one dimension, even of a tensor with no elements."""
    max_total_bytes: int = 4 << 30
    """Bytes of all tensors in one model file together."""
    max_rank: int = 32
    """Dimensions of any one tensor."""
    max_nodes: int = 1_000_000
    """Nodes in one graph."""
    max_file_bytes: int = 64 << 20
    """Bytes of a model's JSON document."""
    max_parse_seconds: float = 60.0
    """Seconds a parser that runs in a worker process may take: a NIR file is read
    through libhdf5, which a damaged file can send into a loop (a legitimate file
    of the size limit parses in seconds)."""

    def check_shape(self, shape: Sequence[int], where: str | Callable[[], str]) -> None:
        """Raise :class:`LimitExceededError` if a tensor of ``shape`` is too big; the
        message starts with ``where`` (or what it returns: hot paths pass a function,
        so that a shape within the limits formats nothing)."""
        if len(shape) > self.max_rank:
            raise LimitExceededError(f"{_text(where)}: rank {len(shape)} exceeds the limit "
                                     f"of {self.max_rank}")
        count = 1
        for d in shape:
            if int(d) > self.max_elements:
                raise LimitExceededError(
                    f"{_text(where)}: dimension {int(d)} (shape {list(shape)}) exceeds the "
                    f"limit of {self.max_elements} elements per tensor (see polyhal.ir.Limits)")
            count *= int(d)
        if count > self.max_elements:
            raise LimitExceededError(
                f"{_text(where)}: {count} elements (shape {list(shape)}) exceed the limit of "
                f"{self.max_elements} elements per tensor (see polyhal.ir.Limits)")


def _text(where: str | Callable[[], str]) -> str:
    return where if isinstance(where, str) else where()


DEFAULT_LIMITS = Limits()
_CURRENT: contextvars.ContextVar[Limits] = contextvars.ContextVar("polyhal_limits",
                                                                  default=DEFAULT_LIMITS)


def current_limits() -> Limits:
    """The limits in force in this context."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_limits(limits: Limits) -> Iterator[Limits]:
    """Put ``limits`` in force for the duration of a ``with`` block."""
    token = _CURRENT.set(limits)
    try:
        yield limits
    finally:
        _CURRENT.reset(token)


def ensure_allocatable(shape: Sequence[int], where: str) -> None:
    """Check a tensor of ``shape`` against the current limits before allocating it.

    Kernels whose output size depends on data (Expand, Tile, Range,
    ConstantOfShape, Pad) call this before they allocate.
    """
    current_limits().check_shape(shape, where)
