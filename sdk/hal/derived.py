"""Data an adapter derives from a graph's constants, kept across the graph's shapes."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from polyhal.ir.graph import Graph

T = TypeVar("T")


class DerivedConstants:
    """What an executable derives from its graph's constants (packed weights, device
    copies), built once for all the graphs it specializes from that graph.

    Passes share constant arrays with the graph they derive from (read-only arrays
    are never copied), so a constant of a specialized graph is recognized by
    identity. Data derived from other arrays (a constant folded anew for one
    shape) is built each time and not kept, so what is kept is bounded by the
    source graph's constants.
    """

    def __init__(self, graph: Graph) -> None:
        self._sources = {id(a): a for a in graph.constants.values()}
        self._kept: dict[tuple[Hashable, ...], tuple[tuple[np.ndarray, ...], Any]] = {}

    def get(self, arrays: tuple[np.ndarray | None, ...], variant: Hashable,
            derive: Callable[[], T]) -> T:
        """``derive()`` for ``arrays`` (``None`` where absent) in ``variant``: built
        once when every array is one of the source graph's constants."""
        present = tuple(a for a in arrays if a is not None)
        if any(self._sources.get(id(a)) is not a for a in present):
            return derive()
        key = (*(None if a is None else id(a) for a in arrays), variant)
        if key not in self._kept:
            self._kept[key] = (present, derive())
        return self._kept[key][1]

    def kept(self) -> list[Any]:
        """Everything derived and kept so far."""
        return [value for _, value in self._kept.values()]
