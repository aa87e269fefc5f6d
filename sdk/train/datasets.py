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


def two_moons(samples: int, *, seed: int = 0, noise: float = 0.1
              ) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaving half circles: inputs ``float64 [samples, 2]`` and labels
    ``int64 [samples]``, shuffled, from ``default_rng(seed)``.

    Class 0 lies on the upper unit half circle ``(cos t, sin t)``, class 1 on the
    lower one shifted to ``(1 - cos t, 0.5 - sin t)``, ``t`` evenly spaced in
    ``[0, pi]`` (``samples // 2`` points in class 0, the rest in class 1); then
    Gaussian noise of standard deviation ``noise`` is added to every coordinate.
    The usual benchmark split is the first 200 points for training and the next
    100 for testing: ``x[:200], x[200:]`` of ``two_moons(300)``.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise TrainingError(f"two_moons: samples={samples!r} must be an integer >= 2")
    if not (isinstance(noise, int | float) and np.isfinite(noise) and noise >= 0):
        raise TrainingError(f"two_moons: noise={noise!r} must be a finite number >= 0")
    outer, inner = samples // 2, samples - samples // 2
    t_outer, t_inner = np.linspace(0, np.pi, outer), np.linspace(0, np.pi, inner)
    points = np.concatenate([np.stack([np.cos(t_outer), np.sin(t_outer)], axis=1),
                             np.stack([1 - np.cos(t_inner), 0.5 - np.sin(t_inner)], axis=1)])
    labels = np.concatenate([np.zeros(outer, np.int64), np.ones(inner, np.int64)])
    rng = np.random.default_rng(seed)
    order = rng.permutation(samples)
    points, labels = points[order], labels[order]
    return points + rng.normal(0.0, noise, points.shape), labels


def gaussian_classes(samples: int, *, classes: int = 10, features: int = 16,
                     clusters: int = 2, separation: float = 1.0, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping Gaussian blobs, several per class: inputs ``float32 [samples,
    features]`` and labels ``int64 [samples]`` (each class ``samples // classes`` or one
    more times, shuffled), from ``default_rng(seed)``.

    Each class is a mixture of ``clusters`` blobs whose centres are drawn from
    ``N(0, separation^2)`` per coordinate; a sample is its blob's centre plus
    ``N(0, 1)`` noise. The blobs overlap, so no classifier is perfect, and a class's
    blobs lie apart, so a linear one does worse than an MLP: with the defaults a
    16-64-64-10 ReLU MLP reaches about 90 % on held-out samples. The centres depend
    on ``seed``: split one draw for training and testing, ``x[:5000], x[5000:]`` of
    ``gaussian_classes(7000)``.
    """
    for name, value, low in (("samples", samples, 1), ("classes", classes, 2),
                             ("features", features, 1), ("clusters", clusters, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise TrainingError(f"gaussian_classes: {name}={value!r} must be an integer >= "
                                f"{low}")
    if not (isinstance(separation, int | float) and np.isfinite(separation)
            and separation > 0):
        raise TrainingError(f"gaussian_classes: separation={separation!r} must be a finite "
                            "number > 0")
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, separation, (classes, clusters, features))
    labels = rng.permutation(np.arange(samples, dtype=np.int64) % classes)
    blob = rng.integers(clusters, size=samples)
    points = centres[labels, blob] + rng.normal(0.0, 1.0, (samples, features))
    return points.astype(np.float32), labels
