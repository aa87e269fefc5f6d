"""Mixed precision: the compute dtype of a precision name, and dynamic loss
scaling.

With ``precision="fp16"`` or ``"bf16"`` the model's forward graph goes through
:func:`polyhal.passes.autocast` (matrix products and convolutions in the low
dtype), while parameters stay float32 (master weights) and the loss is
computed in float32. The loss is multiplied by a scale before
differentiation, so small float16 gradients do not flush to zero, and the
gradients are divided by it again. A step whose gradients are not all finite
is skipped (parameters and optimizer state unchanged) and the scale halved;
after ``growth_interval`` finite steps in a row it doubles. bfloat16 has
float32's exponent range and needs no scaling: its scale stays 1, but
non-finite steps are still skipped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from polyhal.errors import TrainingError, shown
from polyhal.ir.dtypes import DType

PRECISIONS: dict[str, DType | None] = {"fp32": None, "fp16": DType.FLOAT16,
                                       "bf16": DType.BFLOAT16}
"""Training precisions and their compute dtype (``None``: float32 throughout)."""


def compute_dtype(precision: str) -> DType | None:
    """The low-precision dtype of ``precision``, ``None`` for fp32; a
    :class:`~polyhal.errors.TrainingError` for anything but one of the names (a list or
    another unhashable value included)."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise TrainingError(f"precision={shown(precision)} must be one of the names "
                            f"{', '.join(map(repr, PRECISIONS))}")
    return PRECISIONS[precision]


@dataclass
class LossScaler:
    """Dynamic loss scaling state, updated on the host after every step."""

    scale: float = 2.0 ** 15
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 200
    dynamic: bool = True
    good_steps: int = 0
    skipped: int = 0

    @classmethod
    def for_precision(cls, precision: str) -> LossScaler:
        """Dynamic scaling from 2**15 for fp16; a fixed scale of 1 otherwise."""
        if compute_dtype(precision) is DType.FLOAT16:
            return cls()
        return cls(scale=1.0, dynamic=False)

    def update(self, finite: bool) -> None:
        """Record one step: back off (and count a skip) on overflow, grow after a run of
        finite steps."""
        if not finite:
            self.skipped += 1
            self.good_steps = 0
            if self.dynamic:
                self.scale = max(self.scale * self.backoff_factor, 1.0)
            return
        self.good_steps += 1
        if self.dynamic and self.good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0

    def state(self) -> dict[str, float | int | bool]:
        """Everything needed to resume."""
        return asdict(self)
