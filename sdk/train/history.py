"""What ``fit`` reports: per-epoch metrics, and a progress line."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class History:
    """Metrics per epoch: ``history.epochs[i]["loss"]``, or ``history["loss"]`` for
    the list over epochs."""

    epochs: list[dict[str, float]] = field(default_factory=list)
    skipped_steps: int = 0
    """Steps skipped (parameters and optimizer state unchanged) because the loss or a
    gradient was not finite: a NaN or inf in the data, an fp16 overflow."""
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    """Device faults training resumed from: ``step`` (1-based) that failed, ``error``
    (its message, on one line) and ``seconds`` from the fault until that step was done again."""

    def __getitem__(self, metric: str) -> list[float]:
        return [epoch[metric] for epoch in self.epochs if metric in epoch]

    @property
    def last(self) -> dict[str, float]:
        """The metrics of the last epoch."""
        return self.epochs[-1] if self.epochs else {}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable copy."""
        return {"epochs": [dict(e) for e in self.epochs], "skipped_steps": self.skipped_steps,
                "recoveries": [dict(r) for r in self.recoveries]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> History:
        """The inverse of :meth:`to_dict`."""
        return cls([dict(e) for e in data.get("epochs", [])], int(data.get("skipped_steps", 0)),
                   [dict(r) for r in data.get("recoveries", [])])


def _format(metrics: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())


class Progress:
    """A one-line progress bar per epoch on a terminal; one summary line per epoch
    elsewhere (logs stay readable)."""

    def __init__(self, epochs: int, steps: int | None, enabled: bool = True,
                 stream: TextIO | None = None, width: int = 24) -> None:
        self.epochs, self.steps, self.enabled = epochs, steps, enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.live = enabled and getattr(self.stream, "isatty", lambda: False)()
        self._start = time.perf_counter()

    def begin_epoch(self) -> None:
        """Start timing an epoch."""
        self._start = time.perf_counter()

    def update(self, epoch: int, step: int, loss: float) -> None:
        """After step ``step`` (1-based) of ``epoch`` (0-based)."""
        if not self.live:
            return
        if self.steps:
            filled = int(self.width * step / self.steps)
            bar = "#" * filled + "." * (self.width - filled)
            where = f"[{bar}] {step}/{self.steps}"
        else:
            where = f"step {step}"
        self.stream.write(f"\repoch {epoch + 1}/{self.epochs} {where}  loss {loss:.4f}")
        self.stream.flush()

    def end_epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        """Print the epoch's metrics."""
        if not self.enabled:
            return
        seconds = time.perf_counter() - self._start
        prefix = "\r" if self.live else ""
        self.stream.write(f"{prefix}epoch {epoch + 1}/{self.epochs}  {_format(metrics)}  "
                          f"({seconds:.2f} s)\n")
        self.stream.flush()
