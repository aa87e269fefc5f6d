"""What the fault-injecting device does: a :class:`FaultPlan`, read from its open options.

Run faults (one draw per ``Executable.run``): ``crash_rate`` (the worker process
exits), ``hang_rate`` (the run never returns), ``error_rate`` (the run raises
``DeviceError``; so do the runs numbered in ``error_at``); otherwise the run
succeeds, stretched ``slowdown`` times.
Transfer faults (one draw per ``Device.download``): ``corrupt_rate`` flips one
bit of the data; with ``checksum=True`` the device also records each output's
CRC-32 (``Buffer.checksum``), so the runtime detects the corruption.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from polyhal.errors import PolyhalError

RATES = ("crash_rate", "hang_rate", "error_rate", "corrupt_rate")


@dataclass(frozen=True)
class FaultPlan:
    """The faults a ``faulty`` device injects, and the device it wraps."""

    inner: str = "reference"
    """Address of the wrapped device, opened in the same worker process."""
    inner_options: Mapping[str, Any] = field(default_factory=dict)
    """``Adapter.open`` options of the wrapped device (``{"threads": 1}`` for ``cpu``)."""
    inner_adapter: str | None = None
    """``module:qualname`` of the wrapped device's adapter class, imported and registered
    in the worker first: for an adapter that is not an installed entry point."""
    error_rate: float = 0.0
    """Probability that a run raises ``DeviceError``."""
    hang_rate: float = 0.0
    """Probability that a run never returns (the caller's timeout ends it)."""
    crash_rate: float = 0.0
    """Probability that a run kills the worker process."""
    corrupt_rate: float = 0.0
    """Probability that a download flips one bit of the data."""
    slowdown: float = 1.0
    """Each successful run takes this many times as long as the wrapped device's."""
    checksum: bool = False
    """Record a CRC-32 of every output, so corrupted downloads are detected."""
    error_at: tuple[int, ...] = ()
    """Runs (counted from 0 in each worker process) that raise ``DeviceError`` whatever
    the rates: deterministic faults, for tests."""
    seed: int = 0
    """Seeds the draws (together with the device index and the worker's pid, so a
    restarted worker does not replay the faults that ended the last one)."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], where: str) -> FaultPlan:
        """The plan of ``Adapter.open`` options; ``PolyhalError`` names a bad option."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise PolyhalError(f"{where}: unknown option(s) {', '.join(unknown)} (known: "
                               f"{', '.join(sorted(known))})")
        plan = cls(**options)
        plan._check(where)
        return plan

    def _check(self, where: str) -> None:
        from polyhal.hal.registry import parse_address

        if not isinstance(self.inner, str) or parse_address(self.inner)[0] == "faulty":
            raise PolyhalError(f"{where}: inner={self.inner!r} must be the address of another "
                               "device (e.g. 'cpu')")
        if self.inner_adapter is not None and (not isinstance(self.inner_adapter, str)
                                               or ":" not in self.inner_adapter):
            raise PolyhalError(f"{where}: inner_adapter={self.inner_adapter!r} must be "
                               "'module:qualname' of an adapter class")
        if not isinstance(self.inner_options, Mapping):
            raise PolyhalError(f"{where}: inner_options={self.inner_options!r} must be a "
                               "mapping of option names to values")
        for name in RATES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not 0.0 <= value <= 1.0:
                raise PolyhalError(f"{where}: {name}={value!r} must be a probability in [0, 1]")
        if self.crash_rate + self.hang_rate + self.error_rate > 1.0:
            raise PolyhalError(f"{where}: crash_rate + hang_rate + error_rate = "
                               f"{self.crash_rate + self.hang_rate + self.error_rate:g} "
                               "exceeds 1")
        if isinstance(self.slowdown, bool) or not isinstance(self.slowdown, int | float) \
                or not 1.0 <= self.slowdown < float("inf"):
            raise PolyhalError(f"{where}: slowdown={self.slowdown!r} must be a number >= 1")
        if not isinstance(self.checksum, bool):
            raise PolyhalError(f"{where}: checksum={self.checksum!r} must be True or False")
        if not isinstance(self.error_at, tuple | list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in self.error_at):
            raise PolyhalError(f"{where}: error_at={self.error_at!r} must be a list of run "
                               "numbers (non-negative integers)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise PolyhalError(f"{where}: seed={self.seed!r} must be a non-negative integer")

    def run_fault(self, run: int, rng: np.random.Generator) -> str | None:
        """The fault of run number ``run``: ``"crash"``, ``"hang"``, ``"error"`` or ``None``."""
        draw = rng.random()
        if run in self.error_at:
            return "error"
        for fault, rate in (("crash", self.crash_rate), ("hang", self.hang_rate),
                            ("error", self.error_rate)):
            if draw < rate:
                return fault
            draw -= rate
        return None


def flip_one_bit(array: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``array`` with one random bit flipped (an empty array is returned as is)."""
    corrupted = np.array(array, copy=True)
    raw = corrupted.reshape(-1).view(np.uint8)
    if raw.size:
        raw[rng.integers(raw.size)] ^= np.uint8(1 << int(rng.integers(8)))
    return corrupted
