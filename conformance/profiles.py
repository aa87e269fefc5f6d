"""Profiles: how much of the case space a run covers."""

from __future__ import annotations

from dataclasses import dataclass

from polyhal.errors import ConformanceError

LEVELS = ("L0", "L1", "L2", "L3", "L4-snn", "L4-quantum", "L4-quant", "L4-sparse", "L5",
          "onnx")
"""Every conformance level, in run order."""


@dataclass(frozen=True)
class Profile:
    """One setting of case-space size."""

    name: str
    shape_classes: tuple[str, ...]
    """L1 shape classes generated."""
    seeds: tuple[int, ...]
    """One L1 variant per seed and shape class."""
    large_elements: int
    """Elements of the 'large' L0 buffer."""
    cycles: int
    """Compile/run cycles of the L5 leak check."""
    threads: int
    """Threads calling one executable at once in L5."""
    case_timeout_s: float
    """Per-call timeout of a device under test."""
    gradient_dtypes: int = 0
    """L3: float dtypes per op (float32 first, then float64, float16, bfloat16); 0: all."""
    gradient_shape_classes: tuple[str, ...] = ()
    """L3: the shape classes of op gradients, in order of preference (empty: the L1 ones)."""
    gradient_classes_per_op: int = 0
    """L3: op gradients in the first this many of those classes that have a sample; 0: all."""
    training_steps: int = 4
    """L3: optimizer steps of the training case."""


PROFILES = {
    "ci": Profile("ci", ("scalar", "rank1", "rank2", "rank4", "broadcast", "empty", "symbolic",
                         "special"), (0,), 1 << 16, 1000, 4, 60.0, gradient_dtypes=1,
                 gradient_shape_classes=("rank2", "broadcast", "rank4", "rank1", "scalar"),
                 gradient_classes_per_op=2),
    "full": Profile("full", ("scalar", "rank1", "rank2", "rank3", "rank4", "rank5", "broadcast",
                             "empty", "symbolic", "special"), (0, 1, 2), 1 << 22, 1000, 8,
                    120.0),
}


def get_profile(name: str) -> Profile:
    """The profile called ``name``."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConformanceError(f"unknown profile {name!r} (known: "
                               f"{', '.join(PROFILES)})") from None


def parse_levels(levels: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Validated levels in run order (all levels when none are given)."""
    if not levels:
        return LEVELS
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise ConformanceError(f"unknown level(s) {', '.join(unknown)} (levels: "
                               f"{', '.join(LEVELS)})")
    return tuple(lv for lv in LEVELS if lv in levels)
