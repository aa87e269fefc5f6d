"""What a :class:`~polyhal.runtime.Session` reports: each device's health, and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field

HEALTHY = "healthy"
"""Takes work."""
UNHEALTHY = "unhealthy"
"""Faulted; probed again after a back-off, and readmitted when the probe passes."""
FAILED = "failed"
"""Its thread stopped on an unexpected error (``last_error`` says which): it takes no more
work, and what no other device can take fails instead of waiting."""
CLOSED = "closed"
"""The session is closed."""


@dataclass(frozen=True)
class DeviceHealth:
    """One device of a session, as it stands."""

    address: str
    state: str
    """``healthy``, ``unhealthy``, ``failed`` or ``closed``."""
    completed: int
    """Micro-batches this device ran to completion."""
    faults: int
    """Device faults (errors, crashes, timeouts, corrupted data) it had."""
    probes: int
    """Health probes run after faults (passed or not)."""
    busy_seconds: float
    """Time spent running micro-batches, faulted runs included."""
    last_error: str = ""
    """The last fault's message (or why the device failed)."""


@dataclass
class SessionStats:
    """Counters of a session since it opened."""

    micro_batches: int = 0
    """Micro-batches queued."""
    completed: int = 0
    """Micro-batches with a result."""
    failed: int = 0
    """Micro-batches that ended in an error (their call's future holds it)."""
    faults: int = 0
    """Device faults seen, on every device."""
    retries: int = 0
    """Micro-batches queued again after a fault."""
    fallbacks: int = 0
    """Micro-batches run on the fallback device."""
    recoveries: list[float] = field(default_factory=list)
    """For each micro-batch that faulted and then completed: seconds from its first
    fault to its result (the time to recover)."""

    @property
    def mean_recovery_seconds(self) -> float:
        """The mean time to recover (0 when nothing faulted)."""
        return sum(self.recoveries) / len(self.recoveries) if self.recoveries else 0.0
