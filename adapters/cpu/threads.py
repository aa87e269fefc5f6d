"""How many threads the CPU adapter's own kernels split their work between.

BLAS and numba keep thread counts of their own (set together with this one by
:func:`polyhal.adapters.cpu.set_threads`); this module holds the count for the
kernels polyhal runs on its own worker threads (the direct Conv), without
importing them.
"""

from __future__ import annotations

from polyhal.hal.host import host_cores as available

_count = available()


def count() -> int:
    """Threads a kernel may use (the caller's included)."""
    return _count


def set_count(threads: int) -> None:
    """Use ``threads`` threads (at least one)."""
    global _count
    _count = max(1, threads)
