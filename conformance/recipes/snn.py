"""Recipes for the snn domain: time-major inputs ``[T, B, *F]`` that make neurons fire.

Shape classes map onto the neuron shape ``F``: ``rank2`` is ``[T, B]`` (one
neuron per item), ``rank3`` ``[T, B, N]``, ``rank4`` ``[T, B, C, N]``;
``broadcast`` gives parameters of shape ``[1]`` or scalars; ``empty`` has
no time steps; ``symbolic`` declares ``time`` and ``batch``; ``special`` mixes
NaN and infinities into the input current. Currents are drawn so that
membranes cross their thresholds within a few steps.
"""

from __future__ import annotations

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe, special_values
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.registry import OpDef

DT = 1e-3
"""The time step of every sample (seconds)."""

_FEATURES = {"rank2": (), "rank3": (5,), "rank4": (2, 3), "broadcast": (4,), "empty": (3,),
             "symbolic": (4,), "special": (4,)}
_STEPS = 12


def _sequence(dtype: DType, shape_class: str, rng: np.random.Generator,
              features: tuple[int, ...] | None = None, high: float = 3.0
              ) -> tuple[np.ndarray, dict[int, TensorType]] | None:
    """A seeded input current, and its declared type for ``symbolic``."""
    features = _FEATURES.get(shape_class) if features is None else features
    if features is None:
        return None
    steps = 0 if shape_class == "empty" else _STEPS
    shape = (steps, 2, *features)
    if shape_class == "special":
        x = special_values(dtype, shape, rng)
    else:
        x = rng.uniform(0, high, shape).astype(dtype.numpy)
    declared = ({0: TensorType(dtype, ("time", "batch", *features))}
                if shape_class == "symbolic" else {})
    return x, declared


def _param(dtype: DType, shape_class: str, features: tuple[int, ...], rng: np.random.Generator,
           low: float, high: float) -> np.ndarray:
    shape = () if shape_class == "broadcast" and rng.integers(2) else (
        (1,) if shape_class == "broadcast" else features)
    return np.asarray(rng.uniform(low, high, shape), dtype.numpy)


_NEURON_PARAMS = {
    # name: (low, high); time constants in seconds, comparable to dt
    "tau": (5e-3, 2e-2), "tau_mem": (5e-3, 2e-2), "tau_syn": (2e-3, 1e-2), "r": (0.5, 1.5),
    "v_leak": (-0.1, 0.1), "v_threshold": (0.3, 0.8), "v_reset": (-0.2, 0.1),
    "w_in": (0.5, 1.5), "threshold": (0.5, 2.5),
}


@recipe("snn.LIF", "snn.CubaLIF", "snn.IF", "snn.LI", "snn.Integrator", "snn.Threshold")
def neuron(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
           ) -> OpSample | None:
    """A neuron population driven by a random current, every optional output asked for;
    the method and reset rule cycle with the seed."""
    made = _sequence(dtype, shape_class, rng)
    if made is None:
        return None
    x, declared = made
    features = x.shape[2:]
    params = [_param(dtype, shape_class, features, rng, *_NEURON_PARAMS[spec.name])
              for spec in op.inputs[1:]]
    attrs: dict = {}
    names = {a.name for a in op.attrs}
    if "dt" in names:
        attrs["dt"] = DT
    if "method" in names:
        attrs["method"] = ("euler", "exact")[int(rng.integers(2))]
    if "reset" in names:
        attrs["reset"] = ("v_reset", "subtract")[int(rng.integers(2))]
    return OpSample([x, *params], attrs, const_inputs=frozenset(range(1, len(params) + 1)),
                    input_types=declared, num_outputs=len(op.outputs))


@recipe("snn.Delay")
def delay(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
          ) -> OpSample | None:
    """Per-neuron delays of 0 to 4 steps."""
    made = _sequence(dtype, shape_class, rng)
    if made is None:
        return None
    x, declared = made
    shape = (1,) if shape_class == "broadcast" else x.shape[2:]
    steps = rng.integers(0, 5, shape)
    return OpSample([x, np.asarray(steps * DT, dtype.numpy)], {"dt": DT},
                    const_inputs=frozenset({1}), input_types=declared)


@recipe("snn.Scale")
def scale(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
          ) -> OpSample | None:
    """A per-neuron factor."""
    made = _sequence(dtype, shape_class, rng)
    if made is None:
        return None
    x, declared = made
    factor = _param(dtype, shape_class, x.shape[2:], rng, -2.0, 2.0)
    return OpSample([x, factor], const_inputs=frozenset({1}), input_types=declared)


@recipe("snn.Linear", "snn.Affine")
def linear(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
           ) -> OpSample | None:
    """Spikes [T, B, N] through a random weight matrix (and bias)."""
    if shape_class not in ("rank3", "empty", "symbolic", "special"):
        return None
    made = _sequence(dtype, shape_class, rng, (5,))
    if made is None:
        return None
    x, declared = made
    if shape_class != "special":
        x = (x > 1.5).astype(dtype.numpy)  # spikes
    inputs = [x, rng.uniform(-1, 1, (3, 5)).astype(dtype.numpy)]
    if op.name == "Affine":
        inputs.append(rng.uniform(-1, 1, 3).astype(dtype.numpy))
    return OpSample(inputs, const_inputs=frozenset(range(1, len(inputs))),
                    input_types=declared)


@recipe("snn.Conv1d", "snn.Conv2d")
def conv(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
         ) -> OpSample | None:
    """A small convolution of spike maps on every step, strides and pads cycling."""
    if shape_class not in ("rank4", "empty", "symbolic", "special"):
        return None
    rank = 1 if op.name == "Conv1d" else 2
    spatial = (5,) * rank
    made = _sequence(dtype, shape_class, rng, (2, *spatial))
    if made is None:
        return None
    x, declared = made
    weight = rng.uniform(-1, 1, (3, 2, *(3,) * rank)).astype(dtype.numpy)
    bias = rng.uniform(-1, 1, 3).astype(dtype.numpy)
    stride = int(rng.integers(1, 3))
    pad = int(rng.integers(0, 2))
    attrs = {"strides": [stride] * rank, "pads": [pad] * (2 * rank)}
    return OpSample([x, weight, bias], attrs, const_inputs=frozenset({1, 2}),
                    input_types=declared)


@recipe("snn.SumPool2d")
def sum_pool(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
             ) -> OpSample | None:
    """2x2 sum pooling of spike maps, with and without padding."""
    if shape_class not in ("rank4", "empty", "symbolic", "special"):
        return None
    made = _sequence(dtype, shape_class, rng, (2, 4, 5))
    if made is None:
        return None
    x, declared = made
    pads = [0, 0, 1, 1] if rng.integers(2) else [0, 0, 0, 0]
    return OpSample([x], {"kernel_shape": [2, 2], "pads": pads}, input_types=declared)


@recipe("snn.Flatten")
def flatten(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
            ) -> OpSample | None:
    """Neuron axes merged, from a random start."""
    features = {"rank3": (5,), "rank4": (2, 3, 2), "empty": (2, 3), "symbolic": (2, 2),
                "special": (2, 2)}.get(shape_class)
    if features is None:
        return None
    made = _sequence(dtype, shape_class, rng, features)
    if made is None:
        return None
    x, declared = made
    start = int(rng.integers(0, len(features)))
    return OpSample([x], {"start_dim": start, "end_dim": -1}, input_types=declared)
