"""Recipes of the neural-network ops: Conv, ConvTranspose, MaxPool, AveragePool,
the global pools, Softmax/LogSoftmax, BatchNormalization, LayerNormalization,
LRN and Dropout.

Windowed ops take rank3/rank4/rank5 as 1-D/2-D/3-D spatial inputs
``[N, C, D...]`` (N 1..2, C 1..4, spatial 2..7, kernels 2..3) and walk strides,
dilations, explicit pads, every ``auto_pad``, ``ceil_mode``, groups (depthwise
too), the bias, ``count_include_pad``, ConvTranspose's output_padding and
output_shape, and MaxPool's Indices output with both storage orders. MaxPool
data has no ties outside ``special``. 16-bit floats use [-1, 1] where sums
accumulate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe, values
from polyhal.conformance.recipes.generic import (
    FLOATS,
    cycle_dtype,
    declare,
    distinct,
    moderate,
    positive,
    shape_for,
    specials,
    variant,
)
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef


def _batch(shape: tuple[int, ...], shape_class: str, rng: np.random.Generator
           ) -> tuple[int, ...]:
    if shape_class == "symbolic":
        return (int(rng.integers(1, 3)), *shape[1:])
    return shape


# --------------------------------------------------------------------------- Conv

# class -> (X shape, W shape, bias?, attributes)
_CONV_PLAN: dict[str, tuple[tuple[int, ...], tuple[int, ...], bool, dict[str, Any]]] = {
    "rank3": ((2, 2, 6), (3, 2, 3), True, {"strides": [2], "pads": [1, 1]}),
    "rank4": ((1, 4, 5, 5), (4, 2, 3, 2), False,
              {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    "rank5": ((1, 2, 3, 4, 4), (2, 2, 2, 2, 2), True, {"auto_pad": "VALID"}),
    "empty": ((0, 2, 4, 4), (3, 2, 2, 2), True, {}),
    "symbolic": ((2, 2, 5, 5), (3, 2, 3, 3), True,
                 {"dilations": [2, 1], "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}),
    "special": ((1, 3, 5, 4), (3, 1, 3, 3), False,
                {"group": 3, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
}


@recipe("core.Conv")
def conv(op: OpDef, dtype: DType, shape_class: str,
         rng: np.random.Generator) -> OpSample | None:
    """1-D, 2-D (grouped, SAME_UPPER) and 3-D (VALID) convolutions, dilated and
    explicitly padded with a given kernel_shape in ``symbolic``, depthwise with
    SAME_LOWER in ``special``."""
    if shape_class not in _CONV_PLAN:
        return None
    x_shape, w_shape, bias, attrs = _CONV_PLAN[shape_class]
    x_shape = _batch(x_shape, shape_class, rng)
    x = specials(dtype, x_shape, rng) if shape_class == "special" else moderate(
        dtype, x_shape, rng)
    inputs = [x, moderate(dtype, w_shape, rng)]
    if bias:
        inputs.append(moderate(dtype, (w_shape[0],), rng))
    sample = OpSample(inputs, dict(attrs))
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- ConvTranspose

# class -> (X shape, W shape [C, M/group, K...], bias?, attributes)
_CONV_TRANSPOSE_PLAN: dict[str, tuple[tuple[int, ...], tuple[int, ...], bool,
                                      dict[str, Any]]] = {
    "rank3": ((2, 2, 4), (2, 3, 3), True,
              {"strides": [2], "pads": [1, 0], "output_padding": [1]}),
    "rank4": ((1, 4, 3, 3), (4, 2, 2, 3), False,
              {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    "rank5": ((1, 2, 2, 3, 2), (2, 1, 2, 2, 2), True,
              {"strides": [2, 1, 2], "output_shape": [5, 4, 4]}),
    "empty": ((0, 2, 3, 3), (2, 2, 2, 2), True, {"auto_pad": "VALID"}),
    "symbolic": ((2, 2, 4, 4), (2, 3, 3, 3), True,
                 {"dilations": [2, 1], "pads": [1, 1, 0, 1], "kernel_shape": [3, 3]}),
    "special": ((1, 3, 3, 3), (3, 1, 3, 3), False,
                {"group": 3, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
}


@recipe("core.ConvTranspose")
def conv_transpose(op: OpDef, dtype: DType, shape_class: str,
                   rng: np.random.Generator) -> OpSample | None:
    """1-D strided with pads and output_padding, 2-D grouped SAME_UPPER, 3-D with an
    output_shape one larger than the full output along one axis, VALID on an empty
    batch, dilated with kernel_shape in ``symbolic``, depthwise SAME_LOWER in
    ``special``."""
    if shape_class not in _CONV_TRANSPOSE_PLAN:
        return None
    x_shape, w_shape, bias, attrs = _CONV_TRANSPOSE_PLAN[shape_class]
    x_shape = _batch(x_shape, shape_class, rng)
    x = specials(dtype, x_shape, rng) if shape_class == "special" else moderate(
        dtype, x_shape, rng)
    inputs = [x, moderate(dtype, w_shape, rng)]
    if bias:
        group = attrs.get("group", 1)
        inputs.append(moderate(dtype, (w_shape[1] * group,), rng))
    sample = OpSample(inputs, dict(attrs))
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- pools

# class -> (X shape, attributes, outputs); shared by MaxPool and AveragePool
_POOL_PLAN: dict[str, tuple[tuple[int, ...], dict[str, Any], int]] = {
    "rank3": ((1, 2, 7), {"kernel_shape": [3], "strides": [2], "pads": [1, 1],
                          "ceil_mode": 1}, 1),
    "rank4": ((2, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, 2),
    "rank5": ((1, 1, 3, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2],
                                "auto_pad": "SAME_UPPER"}, 2),
    "empty": ((0, 2, 4, 4), {"kernel_shape": [2, 2]}, 1),
    "symbolic": ((2, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                "dilations": [2, 2]}, 1),
    "special": ((1, 2, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2],
                               "auto_pad": "SAME_LOWER"}, 2),
}


def _pool_sample(shape_class: str, x: np.ndarray, attrs: dict[str, Any],
                 outputs: int = 1) -> OpSample:
    sample = OpSample([x], attrs, num_outputs=outputs if outputs > 1 else None)
    if shape_class == "symbolic":
        declare(sample)
    return sample


@recipe("core.MaxPool")
def max_pool(op: OpDef, dtype: DType, shape_class: str,
             rng: np.random.Generator) -> OpSample | None:
    """Tie-free data; ceil_mode, pads, dilations, SAME_UPPER/LOWER; Indices in
    row-major (rank4) and column-major (rank5) order."""
    if shape_class not in _POOL_PLAN:
        return None
    shape, attrs, outputs = _POOL_PLAN[shape_class]
    shape = _batch(shape, shape_class, rng)
    attrs = dict(attrs)
    if shape_class == "rank5":
        attrs["storage_order"] = 1
    x = specials(dtype, shape, rng) if shape_class == "special" else distinct(dtype, shape, rng)
    return _pool_sample(shape_class, x, attrs, outputs)


@recipe("core.AveragePool")
def average_pool(op: OpDef, dtype: DType, shape_class: str,
                 rng: np.random.Generator) -> OpSample | None:
    """ceil_mode windows cut short, pads with and without count_include_pad,
    dilations, SAME_UPPER/LOWER (pads counted in ``special``)."""
    if shape_class not in _POOL_PLAN:
        return None
    shape, attrs, _ = _POOL_PLAN[shape_class]
    shape = _batch(shape, shape_class, rng)
    attrs = dict(attrs)
    if shape_class in ("rank3", "symbolic", "special"):
        attrs["count_include_pad"] = 1
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    return _pool_sample(shape_class, x, attrs)


_GLOBAL_SHAPES = {"rank2": (2, 3), "rank3": (1, 3, 5), "rank4": (2, 2, 3, 3),
                  "rank5": (1, 2, 2, 3, 2), "empty": (0, 3, 4, 4), "symbolic": (2, 3, 4, 4),
                  "special": (1, 3, 3, 4)}


@recipe("core.GlobalAveragePool", "core.GlobalMaxPool")
def global_pool(op: OpDef, dtype: DType, shape_class: str,
                rng: np.random.Generator) -> OpSample | None:
    """[N, C, D...] of 0 to 3 spatial axes; ``empty`` has N = 0."""
    if shape_class not in _GLOBAL_SHAPES:
        return None
    shape = _batch(_GLOBAL_SHAPES[shape_class], shape_class, rng)
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    return _pool_sample(shape_class, x, {})


# --------------------------------------------------------------------------- Softmax

_SOFTMAX_AXIS = {"rank1": 0, "rank2": None, "rank3": 1, "rank4": -3, "rank5": 2,
                 "empty": -1, "symbolic": -1, "special": 1}


@recipe("core.Softmax", "core.LogSoftmax")
def softmax(op: OpDef, dtype: DType, shape_class: str,
            rng: np.random.Generator) -> OpSample | None:
    """Every axis position (default -1 in rank2); ``special`` rows hold NaN/inf."""
    if shape_class not in _SOFTMAX_AXIS:
        return None
    shape = shape_for(shape_class, rng)
    assert shape is not None
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    axis = _SOFTMAX_AXIS[shape_class]
    sample = OpSample([x], {} if axis is None else {"axis": axis})
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- BatchNormalization

_BN_SHAPES = {"rank1": (4,), "rank2": (3, 2), "rank3": (2, 3, 4), "rank4": (2, 3, 2, 2),
              "rank5": (1, 2, 2, 2, 2), "empty": (0, 3, 2), "symbolic": (2, 3, 4),
              "special": (2, 3, 4)}


@recipe("core.BatchNormalization")
def batch_norm(op: OpDef, dtype: DType, shape_class: str,
               rng: np.random.Generator) -> OpSample | None:
    """Per-channel parameters (scale/B and mean/var each in X's dtype or another
    float), positive variances, epsilon varied; rank1 X is one channel."""
    if shape_class not in _BN_SHAPES:
        return None
    shape = _batch(_BN_SHAPES[shape_class], shape_class, rng)
    channels = shape[1] if len(shape) >= 2 else 1
    t1 = dtype if variant(shape_class, 2) else cycle_dtype(FLOATS, shape_class)
    t2 = dtype if variant(shape_class, 3) else cycle_dtype(FLOATS, shape_class, 1)
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    inputs = [x, values(t1, (channels,), rng, -1.5, 1.5), values(t1, (channels,), rng),
              values(t2, (channels,), rng, -1.0, 1.0), positive(0.5, 2.0)(t2, (channels,), rng)]
    attrs = {"epsilon": 1e-3} if shape_class in ("rank4", "special") else {}
    sample = OpSample(inputs, attrs)  # type: ignore[arg-type]
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- LayerNormalization

# class -> (X shape, axis or None, Scale shape, B shape or None, outputs, epsilon or None)
_LN_PLAN: dict[str, tuple[tuple[int, ...], int | None, tuple[int, ...], tuple[int, ...] | None,
                          int, float | None]] = {
    "rank1": ((6,), None, (6,), (6,), 3, None),
    "rank2": ((3, 4), 1, (4,), None, 1, None),
    "rank3": ((2, 3, 4), 1, (3, 4), (3, 4), 3, 1e-3),
    "rank4": ((2, 1, 3, 2), -2, (1, 2), (2,), 1, None),
    "rank5": ((2, 1, 2, 2, 2), 0, (1, 2, 2, 2), None, 3, None),
    "empty": ((2, 0, 4), -1, (4,), (4,), 1, None),
    "symbolic": ((3, 4), -1, (4,), (4,), 3, None),
    "special": ((3, 4), -1, (4,), (4,), 1, 1e-2),
}


@recipe("core.LayerNormalization")
def layer_norm(op: OpDef, dtype: DType, shape_class: str,
               rng: np.random.Generator) -> OpSample | None:
    """axis from 0 to -1, Scale/B of the normalized shape or broadcasting to it,
    B omitted, the Mean/InvStdDev outputs asked for or not."""
    if shape_class not in _LN_PLAN:
        return None
    shape, axis, scale_shape, b_shape, outputs, epsilon = _LN_PLAN[shape_class]
    shape = _batch(shape, shape_class, rng)
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    inputs = [x, values(dtype, scale_shape, rng, -1.5, 1.5)]
    if b_shape is not None:
        inputs.append(values(dtype, b_shape, rng))
    attrs: dict[str, Any] = {}
    if axis is not None:
        attrs["axis"] = axis
    if epsilon is not None:
        attrs["epsilon"] = epsilon
    sample = OpSample(inputs, attrs, num_outputs=outputs if outputs > 1 else None)
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- LRN

# class -> (X shape, attributes)
_LRN_PLAN: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "rank2": ((2, 5), {"size": 3}),
    "rank3": ((1, 4, 5), {"size": 2}),
    "rank4": ((1, 5, 3, 3), {"size": 5, "alpha": 1e-3, "beta": 0.5, "bias": 2.0}),
    "rank5": ((1, 3, 2, 2, 2), {"size": 1}),
    "empty": ((0, 3, 4), {"size": 3}),
    "symbolic": ((2, 4, 3), {"size": 3, "alpha": 0.01}),
    "special": ((1, 4, 3), {"size": 3}),
}


@recipe("core.LRN")
def lrn(op: OpDef, dtype: DType, shape_class: str,
        rng: np.random.Generator) -> OpSample | None:
    """Odd, even, 1 and full-depth windows; alpha/beta/bias varied."""
    if shape_class not in _LRN_PLAN:
        return None
    shape, attrs = _LRN_PLAN[shape_class]
    shape = _batch(shape, shape_class, rng)
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    sample = OpSample([x], dict(attrs))
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- Dropout


@recipe("core.Dropout")
def dropout(op: OpDef, dtype: DType, shape_class: str,
            rng: np.random.Generator) -> OpSample | None:
    """Inference-mode Dropout: ratio and training_mode absent, given as graph
    inputs or constants (training with ratio 0 in rank3), with and without mask."""
    shape = shape_for(shape_class, rng)
    if shape is None:
        return None
    x = specials(dtype, shape, rng) if shape_class == "special" else values(dtype, shape, rng)
    ratio_dtype = cycle_dtype(FLOATS, shape_class)
    no = np.asarray(False)
    plans: dict[str, tuple[list[np.ndarray | None], frozenset[int], int]] = {
        "rank1": ([x, np.asarray(0.3).astype(ratio_dtype.numpy), no], frozenset(), 2),
        "rank2": ([x, np.asarray(0.5).astype(ratio_dtype.numpy), no], frozenset({1, 2}), 1),
        "rank3": ([x, np.asarray(0.0).astype(ratio_dtype.numpy), np.asarray(True)],
                  frozenset({1, 2}), 1),
        "rank4": ([x, None, no], frozenset({2}), 2),
        "empty": ([x], frozenset(), 2),
        "symbolic": ([x, np.asarray(0.2).astype(ratio_dtype.numpy)], frozenset(), 2),
    }
    inputs, const, outputs = plans.get(shape_class, ([x], frozenset(), 1))
    sample = OpSample(inputs, {"seed": 7} if shape_class == "rank2" else {},
                      const_inputs=const, num_outputs=outputs if outputs > 1 else None)
    if shape_class == "symbolic":
        declare(sample)
    return sample
