"""The order in which a network's brian2 objects run within one time step.

brian2's default schedule runs every group's state update, then every
threshold, then all synapses, then every reset (slots ``groups``,
``thresholds``, ``synapses``, ``resets``), so layer k+1 integrates before
layer k's spikes of the same step reach it: one step of delay per layer. The
snn spec has none: within step t, layer k integrates, spikes, resets and
propagates, and only then does layer k+1 integrate with that input.

A :class:`Schedule` therefore puts every object in one slot and numbers them
in the order they are placed. Order 0 is reserved for the per-step clears of
the accumulated synaptic input, so that every step starts from zero before
any synapse delivers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SLOT = "start"
"""The brian2 ``when`` of every object of a polyhal network."""

CLEAR_ORDER = 0
"""The ``order`` of the per-step clears of accumulated input."""


class Schedule:
    """Hands out ``(when, order)`` so objects run in the order they are placed.

    >>> class Obj:
    ...     when, order = "groups", 0
    >>> a, b = Obj(), Obj()
    >>> s = Schedule()
    >>> s.place(a, b)
    >>> (a.when, a.order, b.order)
    ('start', 1, 2)
    """

    def __init__(self) -> None:
        self._next = CLEAR_ORDER + 1
        self._placed: set[int] = set()

    def place_clear(self, obj: Any) -> None:
        """Run ``obj`` (a clear of accumulated input) before everything else."""
        obj.when, obj.order = SLOT, CLEAR_ORDER
        self._placed.add(id(obj))

    def place(self, *objects: Any) -> None:
        """Run ``objects`` after everything placed so far, in the given order."""
        for obj in objects:
            obj.when, obj.order = SLOT, self._next
            self._next += 1
            self._placed.add(id(obj))

    def place_rest(self, objects: Iterable[Any]) -> None:
        """Place, last, whichever of ``objects`` has no place yet (objects with no work)."""
        for obj in objects:
            if id(obj) not in self._placed:
                self.place(obj)
