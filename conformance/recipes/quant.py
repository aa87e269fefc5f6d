"""Recipes of the quantization ops: QuantizeLinear, DequantizeLinear,
MatMulInteger and QLinearMatMul (core), and quant.Requantize.

Scales are powers of two, so every division and product is exact in every
scale dtype and the results do not depend on the order or precision of the
arithmetic; QuantizeLinear's real values keep their fraction clear of .5 (ties
round half to even, which is defined, but a tie must not be a rounding
accident). The classes walk per-tensor, per-axis and blocked parameters, the
optional zero points, ``output_dtype`` and ``precision``. Requantize's classes
walk per-tensor and per-channel parameters, bias given or not, both roundings,
relu and zero points, with values that tie, saturate and sit at int32's extremes;
its outputs are graded exactly, as every integer output is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe
from polyhal.conformance.recipes.generic import (
    cycle_dtype,
    declare,
    pick,
    specials,
    variant,
)
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef

_SCALE_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
_QUANTIZED = (DType.INT8, DType.UINT8, DType.INT16)
_INT8S = (DType.INT8, DType.UINT8)


def _power_of_two(shape: tuple[int, ...], dtype: DType, rng: np.random.Generator,
                  exponents: tuple[int, ...] = (-3, -2, -1, 0)) -> np.ndarray:
    """Scales 2**e of ``shape`` (exact in every float dtype)."""
    e = rng.choice(exponents, size=shape)
    return np.asarray(np.exp2(e)).astype(dtype.numpy)


def _zero_point(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Zero points near the middle of the quantized range."""
    if dtype is DType.UINT8:
        return rng.integers(120, 136, size=shape).astype(dtype.numpy)
    return rng.integers(-8, 9, size=shape).astype(dtype.numpy)


def _levels(shape: tuple[int, ...], rng: np.random.Generator, span: int) -> np.ndarray:
    """Real quantization levels: whole numbers in [-span, span) plus a fraction in
    [0.15, 0.35] or [0.65, 0.85], exact in bfloat16 for span <= 16 once scaled."""
    whole = rng.integers(-span, span, size=shape)
    frac = rng.uniform(0.15, 0.35, size=shape) + rng.integers(0, 2, size=shape) * 0.5
    return whole + frac


# shape class -> (x shape, granularity, axis attr, block_size, zero point?, y dtype choice)
# granularity: "tensor" (rank-0 scale), "tensor1" (1-element 1-D), "axis", "block";
# symbolic has neither a zero point nor output_dtype: y is uint8.
_QUANT_PLAN: dict[str, tuple[tuple[int, ...], str, int | None, int, bool]] = {
    "scalar": ((), "tensor", None, 0, True),
    "rank1": ((6,), "axis", None, 0, True),
    "rank2": ((3, 4), "axis", None, 0, True),
    "rank3": ((2, 3, 4), "block", -1, 2, True),
    "rank4": ((2, 1, 3, 2), "tensor", None, 0, False),
    "rank5": ((2, 1, 3, 1, 2), "axis", 2, 0, True),
    "empty": ((0, 4), "axis", 1, 0, True),
    "symbolic": ((3, 4), "axis", 1, 0, False),
    "special": ((3, 4), "axis", 0, 0, True),
}


def _param_shape(x_shape: tuple[int, ...], granularity: str, axis: int | None,
                 block: int) -> tuple[int, ...]:
    rank = len(x_shape)
    if granularity == "tensor":
        return ()
    if granularity == "tensor1":
        return (1,)
    ax = (1 if axis is None else axis) % rank if rank > 1 else 0
    if granularity == "axis":
        return (x_shape[ax],)
    return tuple(-(-d // block) if i == ax else d for i, d in enumerate(x_shape))


@recipe("core.QuantizeLinear")
def quantize_linear(op: OpDef, dtype: DType, shape_class: str,
                    rng: np.random.Generator) -> OpSample | None:
    """x = level * scale with power-of-two scales; the quantized dtype comes from
    the zero point, ``output_dtype``, or defaults to uint8, by class."""
    if shape_class not in _QUANT_PLAN:
        return None
    x_shape, granularity, axis, block, with_zero = _QUANT_PLAN[shape_class]
    if shape_class == "symbolic":
        x_shape = (int(rng.integers(2, 5)), *x_shape[1:])
    scale_dtype = dtype if dtype in _SCALE_DTYPES else cycle_dtype(_SCALE_DTYPES, shape_class)
    p_shape = _param_shape(x_shape, granularity, axis, block)
    exponents = (-1, 0) if dtype is DType.INT32 else (-3, -2, -1, 0)
    scale = _power_of_two(p_shape, scale_dtype, rng, exponents)
    full_scale = scale
    if granularity in ("axis", "block") and x_shape:
        ax = (1 if axis is None else axis) % len(x_shape) if len(x_shape) > 1 else 0
        if granularity == "axis":
            full_scale = scale.reshape([-1 if i == ax else 1 for i in range(len(x_shape))])
        else:
            full_scale = np.repeat(scale, block, axis=ax)[
                tuple(slice(0, d) for d in x_shape)]
    y_dtype = cycle_dtype(_QUANTIZED, shape_class)
    attrs: dict[str, Any] = {}
    if axis is not None:
        attrs["axis"] = axis
    if block:
        attrs["block_size"] = block
    unsigned = not with_zero and shape_class != "rank4"  # the default uint8 output
    if shape_class == "special":
        x = specials(dtype, x_shape, rng)
    elif dtype is DType.INT32:
        levels = rng.integers(0 if unsigned else -30, 30, size=x_shape)
        x = (levels * full_scale.astype(np.float64)).astype(np.int32)
    else:
        levels = _levels(x_shape, rng, 12)
        x = ((np.abs(levels) if unsigned else levels)
             * full_scale.astype(np.float64)).astype(dtype.numpy)
    inputs: list[np.ndarray | None] = [x, scale]
    if with_zero:
        inputs.append(_zero_point(y_dtype, p_shape, rng))
    elif shape_class == "rank4":
        attrs["output_dtype"] = DType.INT16
    if shape_class == "rank2" and dtype is DType.FLOAT16:
        attrs["precision"] = DType.FLOAT32
    sample = OpSample(inputs, attrs)
    if shape_class == "symbolic":
        declare(sample)
    return sample


_DEQUANT_PLAN: dict[str, tuple[tuple[int, ...], str, int | None, int, bool]] = {
    "scalar": ((), "tensor", None, 0, True),
    "rank1": ((6,), "axis", None, 0, False),
    "rank2": ((3, 4), "axis", None, 0, True),
    "rank3": ((2, 3, 4), "block", 1, 2, True),
    "rank4": ((2, 1, 3, 2), "tensor1", None, 0, True),
    "rank5": ((2, 1, 3, 1, 2), "axis", -3, 0, False),
    "empty": ((2, 0), "axis", 0, 0, True),
    "symbolic": ((3, 4), "axis", 1, 0, True),
    "special": ((3, 4), "tensor", None, 0, True),
}


def _quantized_values(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator
                      ) -> np.ndarray:
    """Quantized data: the full range for 8-bit types, +-300 for wider ones."""
    if dtype in _INT8S:
        info = np.iinfo(dtype.numpy)
        return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dtype.numpy)
    return rng.integers(-300, 301, size=shape).astype(dtype.numpy)


@recipe("core.DequantizeLinear")
def dequantize_linear(op: OpDef, dtype: DType, shape_class: str,
                      rng: np.random.Generator) -> OpSample | None:
    """(x - zero point) * scale with power-of-two scales of a class-dependent dtype;
    ``output_dtype`` in some classes; ``special`` uses the dtype's extremes."""
    if shape_class not in _DEQUANT_PLAN:
        return None
    x_shape, granularity, axis, block, with_zero = _DEQUANT_PLAN[shape_class]
    if shape_class == "symbolic":
        x_shape = (int(rng.integers(2, 5)), *x_shape[1:])
    scale_dtype = cycle_dtype(_SCALE_DTYPES, shape_class)
    p_shape = _param_shape(x_shape, granularity, axis, block)
    scale = _power_of_two(p_shape, scale_dtype, rng)
    if shape_class == "special":
        x = specials(dtype, x_shape, rng)
    else:
        x = _quantized_values(dtype, x_shape, rng)
    inputs: list[np.ndarray | None] = [x, scale]
    if with_zero:
        if dtype in _INT8S:
            inputs.append(_zero_point(dtype, p_shape, rng))
        else:
            inputs.append(rng.integers(-50, 51, size=p_shape).astype(dtype.numpy))
    attrs: dict[str, Any] = {}
    if axis is not None:
        attrs["axis"] = axis
    if block:
        attrs["block_size"] = block
    if variant(shape_class, 3) == 1:
        attrs["output_dtype"] = cycle_dtype(_SCALE_DTYPES, shape_class, 1)
    sample = OpSample(inputs, attrs)
    if shape_class == "symbolic":
        declare(sample)
    return sample


# --------------------------------------------------------------------------- integer matmuls

# class -> (A shape, B shape, a parameter shape or None, b parameter shape or None)
def _matmul_plan(shape_class: str, rng: np.random.Generator
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None,
                            tuple[int, ...] | None] | None:
    m, k, n = (int(v) for v in rng.integers(2, 5, size=3))
    plans = {
        "rank1": ((k,), (k, n), None, (n,)),
        "rank2": ((m, k), (k, n), (m,), ()),
        "rank3": ((2, m, k), (2, k, n), (2, m, 1), (1, n)),
        "rank4": ((2, 1, m, k), (2, 1, k, n), (), None),
        "rank5": ((1, 2, 1, 2, k), (2, 1, 1, k, n), None, (1, 1, 1, 1, n)),
        "broadcast": ((2, 1, m, k), (3, k, n), (m, 1), (n,)),
        "empty": ((0, k), (k, n), (0,), (n,)),
        "symbolic": ((int(rng.integers(2, 4)), m, k), (k, n), (), (n,)),
        "special": ((m, k), (k, n), (), ()),
    }
    return plans.get(shape_class)  # type: ignore[return-value]


def _full_range(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype.numpy)
    return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dtype.numpy)


def _extremes(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype.numpy)
    return rng.choice([int(info.min), int(info.max)], size=shape).astype(dtype.numpy)


@recipe("core.MatMulInteger")
def matmul_integer(op: OpDef, dtype: DType, shape_class: str,
                   rng: np.random.Generator) -> OpSample | None:
    """Full-range 8-bit operands (B's dtype varies with the class) and scalar,
    per-row or per-column zero points, present or omitted; ``special``: extremes."""
    plan = _matmul_plan(shape_class, rng)
    if plan is None:
        return None
    a_shape, b_shape, a_zero, b_zero = plan
    b_dtype = cycle_dtype(_INT8S, shape_class, _INT8S.index(dtype))
    fill = _extremes if shape_class == "special" else _full_range
    inputs: list[np.ndarray | None] = [fill(dtype, a_shape, rng), fill(b_dtype, b_shape, rng)]
    inputs.append(None if a_zero is None else _full_range(dtype, a_zero, rng))
    inputs.append(None if b_zero is None else _full_range(b_dtype, b_zero, rng))
    while inputs[-1] is None:
        inputs.pop()
    sample = OpSample(inputs)
    if shape_class == "symbolic":
        declare(sample)
    return sample


@recipe("core.QLinearMatMul")
def qlinear_matmul(op: OpDef, dtype: DType, shape_class: str,
                   rng: np.random.Generator) -> OpSample | None:
    """Moderate 8-bit operands, power-of-two scales (per-tensor, per-row of a,
    per-column of b) of a class-dependent dtype, and a y scale that keeps most
    results in range; ``special``: extremes, which saturate."""
    plan = _matmul_plan(shape_class, rng)
    if plan is None:
        return None
    a_shape, b_shape, a_param, b_param = plan
    a_param = () if a_param is None else a_param
    b_param = () if b_param is None else b_param
    b_dtype = cycle_dtype(_INT8S, shape_class, _INT8S.index(dtype))
    y_dtype = cycle_dtype(_INT8S, shape_class, 1)
    scale_dtype = cycle_dtype(_SCALE_DTYPES, shape_class)

    def operand(d: DType, shape: tuple[int, ...]) -> np.ndarray:
        if shape_class == "special":
            return _extremes(d, shape, rng)
        if d is DType.UINT8:
            return rng.integers(100, 156, size=shape).astype(d.numpy)
        return rng.integers(-28, 29, size=shape).astype(d.numpy)

    y_one = pick(rng, [(), (1,)])
    inputs = [operand(dtype, a_shape), _power_of_two(a_param, scale_dtype, rng, (-3, -2)),
              _zero_point(dtype, a_param, rng),
              operand(b_dtype, b_shape), _power_of_two(b_param, scale_dtype, rng, (-3, -2)),
              _zero_point(b_dtype, b_param, rng),
              _power_of_two(y_one, scale_dtype, rng, (0, 1)),
              _zero_point(y_dtype, y_one, rng)]
    sample = OpSample(inputs)  # type: ignore[arg-type]
    if shape_class == "symbolic":
        declare(sample)
    return sample



# --------------------------------------------------------------------------- quant.Requantize

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

# regime -> inclusive ranges of (multiplier, shift, x, bias): "ties" makes p / 2^shift
# land on halves often and saturate sometimes; "scaled" is what the quantization pass
# emits (multiplier in [2^30, 2^31), accumulators of a few million).
_REGIMES = {
    "ties": ((1, 7), (1, 4), (-120, 120), (-20, 20)),
    "scaled": ((2**30, _INT32_MAX), (40, 46), (-(2**21), 2**21), (-(2**19), 2**19)),
}

# class -> (x shape, per-channel inputs: m(ultiplier) s(hift) b(ias), bias given,
# attributes); rank4 bakes the parameters in as constants, special takes extremes.
_REQUANT_PLAN: dict[str, tuple[tuple[int, ...], str, bool, dict[str, Any]]] = {
    "scalar": ((), "", True, {"rounding": "half_even"}),
    "rank1": ((6,), "ms", False, {"relu": 1}),
    "rank2": ((3, 4), "msb", True, {"zero_point": -7}),
    "rank3": ((2, 3, 4), "s", True, {"rounding": "half_even", "relu": 1, "zero_point": 9}),
    "rank4": ((2, 1, 3, 4), "msb", True, {"rounding": "half_even"}),
    "rank5": ((2, 1, 2, 1, 3), "b", True, {"relu": 1, "zero_point": -128}),
    "broadcast": ((4, 6), "mb", True, {"rounding": "half_even", "zero_point": 3}),
    "empty": ((2, 0), "msb", True, {}),
    "symbolic": ((3, 5), "ms", True, {"relu": 1, "rounding": "half_even"}),
    "special": ((6, 6), "msb", True, {"relu": 1, "zero_point": -3}),
}


def _draw(bounds: tuple[int, int], shape: tuple[int, ...], rng: np.random.Generator
          ) -> np.ndarray:
    return rng.integers(bounds[0], bounds[1], size=shape, endpoint=True).astype(np.int32)


def _requantize_extremes(x_shape: tuple[int, ...], rng: np.random.Generator
                         ) -> list[np.ndarray]:
    """Columns of (multiplier, shift, bias) at their extremes; x at int32's."""
    channels = x_shape[-1]
    multiplier = rng.choice([0, 1, 2**30, _INT32_MAX, _INT32_MAX], size=channels)
    shift = rng.choice([0, 1, 31, 62, 63], size=channels)
    bias = rng.choice([_INT32_MIN, _INT32_MAX, 0, -1], size=channels)
    x = rng.choice([_INT32_MIN, _INT32_MAX, 0, 1, -1, 2**30, -(2**30)], size=x_shape)
    return [a.astype(np.int32) for a in (x, multiplier, shift, bias)]


def _requantize_values(x_shape: tuple[int, ...], per_channel: str, rng: np.random.Generator
                       ) -> list[np.ndarray]:
    """x, multiplier, shift and bias in one regime, or one regime per channel when both
    the multiplier and the shift are per channel."""
    channels = x_shape[-1] if x_shape else 1
    mixed = "m" in per_channel and "s" in per_channel
    one = pick(rng, list(_REGIMES))
    regimes = [pick(rng, list(_REGIMES)) if mixed else one for _ in range(channels)]
    params = []
    for index, code in enumerate("msb"):
        if code in per_channel:
            params.append(np.array([_draw(_REGIMES[r][index], (), rng) for r in regimes],
                                   np.int32).reshape(channels))
        else:
            params.append(_draw(_REGIMES[one][index], (), rng))
    if not x_shape:
        x = _draw(_REGIMES[one][2], (), rng)
    elif channels == 0:
        x = np.zeros(x_shape, np.int32)
    else:
        x = np.stack([_draw(_REGIMES[r][2], x_shape[:-1], rng) for r in regimes], axis=-1)
    return [x, *params]


@recipe("quant.Requantize")
def requantize(op: OpDef, dtype: DType, shape_class: str,
               rng: np.random.Generator) -> OpSample | None:
    """Per-tensor and per-channel parameters in two regimes (ties and saturation with
    small multipliers and shifts; the pass's multipliers in [2^30, 2^31)), bias given
    or not, both roundings, relu and zero points by class; ``special`` puts x, bias,
    multiplier and shift at their extremes."""
    if shape_class not in _REQUANT_PLAN:
        return None
    x_shape, per_channel, with_bias, attrs = _REQUANT_PLAN[shape_class]
    if shape_class == "symbolic":
        x_shape = (int(rng.integers(2, 5)), *x_shape[1:])
    if shape_class == "special":
        x, multiplier, shift, bias = _requantize_extremes(x_shape, rng)
    else:
        x, multiplier, shift, bias = _requantize_values(x_shape, per_channel, rng)
    inputs: list[np.ndarray | None] = [x, multiplier, shift, bias if with_bias else None]
    while inputs[-1] is None:
        inputs.pop()
    const = frozenset(range(1, len(inputs))) if shape_class == "rank4" else frozenset()
    sample = OpSample(inputs, dict(attrs), const_inputs=const)
    if shape_class == "symbolic":
        declare(sample)
    return sample
