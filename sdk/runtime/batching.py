"""Data-parallel splitting: which inputs and outputs of a graph carry the batch axis.

A graph can be split into micro-batches along a symbolic dimension (``batch``)
when that symbol is the leading axis of every output and appears nowhere but
in the leading axis of the inputs that carry it, **and** row ``i`` of every
output depends on row ``i`` of the batched inputs only (checked node by node by
:mod:`polyhal.runtime.rowwise`). The other inputs (weights) go whole to every
micro-batch; the outputs of the micro-batches, concatenated in order, are the
outputs of the whole batch. A graph that cannot be split runs whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polyhal.errors import PolyhalError, UnsupportedError
from polyhal.ir import dims as D
from polyhal.ir.graph import Graph
from polyhal.runtime.rowwise import carries, mixing_reason, symbol_axes


@dataclass(frozen=True)
class BatchLayout:
    """How a graph splits along its batch symbol (``symbol=None``: it does not)."""

    symbol: str | None
    batched: tuple[str, ...] = ()
    """Names of the inputs whose leading axis is the batch."""
    reason: str = ""
    """Why the graph cannot be split (empty when it can)."""

    @classmethod
    def of(cls, graph: Graph, symbol: str | None = None) -> BatchLayout:
        """The layout of ``graph`` along ``symbol`` (default: the leading dimension of its
        first input, when that is a plain symbol)."""
        if symbol is not None and not isinstance(symbol, str):
            raise PolyhalError(f"batch dimension {symbol!r} must be a dimension symbol (a "
                               "str such as 'batch') or None")
        if symbol is None:
            leading = [v.type.shape[0] for v in graph.inputs if v.type.rank]
            if not leading or not D.is_symbol(leading[0]):
                return cls(None, reason=f"graph {graph.name!r}: its first input has no "
                                        "symbolic leading dimension to split along")
            symbol = str(leading[0])
        batched = []
        for value in graph.inputs:
            axes = symbol_axes(value.type.shape, symbol)
            if axes and (axes != [0] or not D.is_symbol(value.type.shape[0])):
                return cls(None, reason=f"input {value.name!r} ({value.type}) uses {symbol!r} "
                                        "other than as its leading dimension")
            if axes:
                batched.append(value.name)
        for value in graph.outputs:
            if not carries(value.type.shape, symbol, 0):
                return cls(None, reason=f"output {value.name!r} ({value.type}) does not have "
                                        f"{symbol!r} as its leading dimension only")
        if not batched:
            return cls(None, reason=f"no input of graph {graph.name!r} has {symbol!r}")
        reason = mixing_reason(graph, symbol, batched)
        if reason:
            return cls(None, reason=reason)
        return cls(symbol, tuple(batched))

    @property
    def splittable(self) -> bool:
        """True when the graph can be split into micro-batches."""
        return self.symbol is not None

    def rows(self, arrays: Mapping[str, np.ndarray]) -> int:
        """The batch size of bound inputs."""
        return int(arrays[self.batched[0]].shape[0]) if self.batched else 0

    def split(self, arrays: Mapping[str, np.ndarray], size: int
              ) -> list[dict[str, np.ndarray]]:
        """``arrays`` as consecutive micro-batches of ``size`` rows (the last may be
        smaller); a batch of zero rows is one empty micro-batch."""
        if not self.splittable:
            raise UnsupportedError(f"cannot split: {self.reason}")
        total = self.rows(arrays)
        starts = range(0, total, size) if total else [0]
        return [{name: (array[start:start + size] if name in self.batched else array)
                 for name, array in arrays.items()} for start in starts]

    @staticmethod
    def join(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The outputs of consecutive micro-batches, concatenated in order."""
        return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}
