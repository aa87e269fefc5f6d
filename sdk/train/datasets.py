"""Small synthetic datasets for examples and tests."""

from __future__ import annotations

import numpy as np

from polyhal.errors import TrainingError


def spirals(samples: int, *, seed: int = 0, noise: float = 0.2, turns: float = 1.75
            ) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals in the plane: inputs ``float32 [samples, 2]`` and
    labels ``int64 [samples]`` (0 or 1, alternating), from ``default_rng(seed)``.

    Point ``i`` of class ``c`` lies at angle ``t = turns * 2 pi * r`` and radius
    ``r`` (uniform in [0.1, 1]), rotated by ``pi * c``, plus Gaussian noise of
    standard deviation ``noise * 0.1``; inputs are scaled to about [-1, 1].
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise TrainingError(f"spirals: samples={samples!r} must be a positive integer")
    rng = np.random.default_rng(seed)
    labels = np.arange(samples, dtype=np.int64) % 2
    radius = rng.uniform(0.1, 1.0, samples)
    angle = turns * 2 * np.pi * radius + np.pi * labels
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    points += rng.normal(0.0, noise * 0.1, points.shape)
    return points.astype(np.float32), labels
