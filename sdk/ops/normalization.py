"""Normalization and friends (ONNX semantics): Softmax, LogSoftmax,
BatchNormalization (inference), LayerNormalization, LRN and Dropout
(inference).

Softmax, LogSoftmax, BatchNormalization, LayerNormalization and LRN are
composites: their decompositions rebuild them from reductions and
elementwise arithmetic (LRN's channel window sum as a Conv with a kernel of
ones), in the same order of operations as the kernels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polyhal import ops
from polyhal.errors import UnsupportedError
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import REQUIRED, Attr, AttrKind, Input, OpDef, Output, register

_FLOAT = {"T": FLOAT_TYPES}


def _axes_const(axes: list[int]) -> np.ndarray:
    return np.asarray(axes, dtype=np.int64)


# --- Softmax / LogSoftmax ---------------------------------------------------

def _infer_softmax(ctx: InferContext) -> TensorType:
    x = ctx.input(0)
    ctx.axis(ctx.attrs["axis"], x.rank)
    return x


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    # subtracting the max keeps exp() from overflowing; initial= admits empty axes
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


def _softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    e = np.exp(_shifted(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    shifted = _shifted(x, axis)
    with np.errstate(divide="ignore"):  # an empty slice sums to 0: log gives -inf
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _decompose_shifted(x: Any, axis: int) -> tuple[Any, np.ndarray]:
    axes = _axes_const([axis % x.type.rank])
    return x - ops.reduce_max(x, axes, keepdims=1), axes


def _decompose_softmax(x: Any, *, axis: int) -> Any:
    shifted, axes = _decompose_shifted(x, axis)
    e = ops.exp(shifted)
    return e / ops.reduce_sum(e, axes, keepdims=1)


def _decompose_log_softmax(x: Any, *, axis: int) -> Any:
    shifted, axes = _decompose_shifted(x, axis)
    return shifted - ops.log(ops.reduce_sum(ops.exp(shifted), axes, keepdims=1))


_SOFTMAX_AXIS = Attr("axis", AttrKind.INT, -1, "The axis normalized over; negative counts back.")

register(OpDef(
    name="Softmax", inputs=(Input("input", "T"),), outputs=(Output("output", "T"),),
    type_vars=_FLOAT, attrs=(_SOFTMAX_AXIS,), infer=_infer_softmax, kernel=_softmax,
    decompose=_decompose_softmax, onnx_since=13, differentiable=True,
    doc="exp(x - max) / sum(exp(x - max)) along axis (rank >= 1). A slice that is all -inf, "
        "or holds +inf or NaN, gives NaN."))

register(OpDef(
    name="LogSoftmax", inputs=(Input("input", "T"),), outputs=(Output("output", "T"),),
    type_vars=_FLOAT, attrs=(_SOFTMAX_AXIS,), infer=_infer_softmax, kernel=_log_softmax,
    decompose=_decompose_log_softmax, onnx_since=13, differentiable=True,
    doc="(x - max) - log(sum(exp(x - max))) along axis (rank >= 1)."))


# --- BatchNormalization -----------------------------------------------------

_BN_PARAMS = ("scale", "B", "input_mean", "input_var")


def _infer_batch_norm(ctx: InferContext) -> TensorType:
    x = ctx.input(0)
    if x.rank < 1:
        raise ctx.error(f"input X must have rank >= 1 ([N, C, D...] or [N]), got {x}")
    training = ctx.flag("training_mode")
    if ctx.num_outputs > 1 and not training:
        raise ctx.error("outputs running_mean and running_var exist only in training mode")
    channels = x.shape[1] if x.rank >= 2 else 1
    for index, name in enumerate(_BN_PARAMS, start=1):
        t = ctx.input(index)
        if t.rank != 1 or (isinstance(t.shape[0], int) and isinstance(channels, int)
                           and t.shape[0] != channels):
            raise ctx.error(f"input {index} ({name}) must have shape [{channels}] (one value "
                            f"per channel of X {x}), got {t}")
    return [x, ctx.input(3), ctx.input(4)][:max(ctx.num_outputs, 1)]


def _batch_norm(x: np.ndarray, scale: np.ndarray, b: np.ndarray, mean: np.ndarray,
                var: np.ndarray, *, epsilon: float, momentum: float,
                training_mode: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = (-1, *[1] * (x.ndim - 2))  # per-channel values broadcast over [N, C, D...]

    def channel(p: np.ndarray) -> np.ndarray:
        return p.astype(x.dtype, copy=False).reshape(shape)

    eps = x.dtype.type(epsilon)
    if not training_mode:
        y = (x - channel(mean)) / np.sqrt(channel(var) + eps) * channel(scale) + channel(b)
        return y, mean, var
    axes = (0, *range(2, x.ndim))  # every axis but the channels
    batch_mean = x.mean(axis=axes)
    batch_var = ((x - channel(batch_mean)) ** 2).mean(axis=axes)
    y = (x - channel(batch_mean)) / np.sqrt(channel(batch_var) + eps) * channel(scale)
    y = y + channel(b)
    keep = mean.dtype.type(momentum)
    running_mean = mean * keep + batch_mean.astype(mean.dtype) * (1 - keep)
    running_var = var * keep + batch_var.astype(var.dtype) * (1 - keep)
    return y, running_mean, running_var


def _decompose_batch_norm(x: Any, scale: Any, b: Any, mean: Any, var: Any, *,
                          epsilon: float, momentum: float, training_mode: int) -> Any:
    spatial = list(range(1, x.type.rank - 1))

    def channel(p: Any) -> Any:
        if p.dtype != x.dtype:
            p = ops.cast(p, to=x.dtype)
        return ops.unsqueeze(p, _axes_const(spatial)) if spatial else p

    if training_mode:
        return None  # batch statistics: no decomposition; the node stays whole
    return (x - channel(mean)) / ops.sqrt(channel(var) + epsilon) * channel(scale) + channel(b)


register(OpDef(
    name="BatchNormalization",
    inputs=(Input("X", "T"), Input("scale", "T1"), Input("B", "T1"),
            Input("input_mean", "T2"), Input("input_var", "T2")),
    outputs=(Output("Y", "T"), Output("running_mean", "T2", optional=True),
             Output("running_var", "T2", optional=True)),
    type_vars={"T": FLOAT_TYPES, "T1": FLOAT_TYPES, "T2": FLOAT_TYPES},
    attrs=(Attr("epsilon", AttrKind.FLOAT, 1e-5, "Added to the variance."),
           Attr("momentum", AttrKind.FLOAT, 0.9, "Training mode: weight of the running "
                "statistics in their update."),
           Attr("training_mode", AttrKind.INT, 0, "1: normalize with the batch's statistics "
                "and output updated running statistics.")),
    infer=_infer_batch_norm, kernel=_batch_norm, decompose=_decompose_batch_norm,
    onnx_since=15, differentiable=True,
    doc="Inference mode: (X - mean) / sqrt(var + epsilon) * scale + B per channel (axis 1; "
        "a rank-1 X is one channel). Parameters are first converted to X's dtype. "
        "Training mode (training_mode=1): the same with the batch's mean and population "
        "variance over every axis but the channels, and the optional outputs running_mean = "
        "input_mean * momentum + batch_mean * (1 - momentum), likewise running_var; only "
        "training mode may ask for them. Training mode has no decomposition."))


# --- LayerNormalization -----------------------------------------------------

def _infer_layer_norm(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    axis = ctx.axis(ctx.attrs["axis"], x.rank)
    if ctx.attrs["stash_type"] != 1:
        raise ctx.error(f"attribute stash_type={ctx.attrs['stash_type']} is not supported "
                        "(only 1: float32)")
    for index in (1, 2):
        if not ctx.has_input(index):
            continue
        t, name = ctx.input(index), ctx.op.inputs[index].name
        tail = x.shape[x.rank - t.rank:] if t.rank else ()
        if t.rank > x.rank or any(isinstance(p, int) and isinstance(q, int) and p not in (1, q)
                                  for p, q in zip(t.shape, tail, strict=True)):
            raise ctx.error(f"input {index} ({name}) {t} does not broadcast to X {x}")
    stats = TensorType(DType.FLOAT32, (*x.shape[:axis], *[1] * (x.rank - axis)))
    return [x, stats, stats]


def _layer_norm(x: np.ndarray, scale: np.ndarray, b: np.ndarray | None = None, *, axis: int,
                epsilon: float, stash_type: int) -> tuple[np.ndarray, ...]:
    axes = tuple(range(axis % x.ndim, x.ndim))
    count = np.float32(math.prod(x.shape[a] for a in axes))
    xs = x.astype(np.float32)  # stash_type=1: stage one runs in float32 for every dtype
    with np.errstate(invalid="ignore", divide="ignore"):  # nothing to normalize: NaN
        mean = xs.sum(axis=axes, keepdims=True) / count
        d = xs - mean
        var = (d * d).sum(axis=axes, keepdims=True) / count
        inv_std = np.float32(1) / np.sqrt(var + np.float32(epsilon))
        y = (d * inv_std).astype(x.dtype) * scale
    if b is not None:
        y = y + b
    return y, mean, inv_std


def _decompose_layer_norm(x: Any, scale: Any, b: Any = None, *, axis: int, epsilon: float,
                          stash_type: int) -> tuple[Any, ...]:
    rank = x.type.rank
    axes = _axes_const(list(range(axis % rank, rank)))
    xs = x if x.dtype is DType.FLOAT32 else ops.cast(x, to=DType.FLOAT32)
    mean = ops.reduce_mean(xs, axes, keepdims=1)
    d = xs - mean
    inv_std = 1.0 / ops.sqrt(ops.reduce_mean(d * d, axes, keepdims=1) + epsilon)
    normalized = d * inv_std
    if x.dtype is not DType.FLOAT32:
        normalized = ops.cast(normalized, to=x.dtype)
    y = normalized * scale
    return (y if b is None else y + b), mean, inv_std


register(OpDef(
    name="LayerNormalization",
    inputs=(Input("X", "T"), Input("Scale", "T"), Input("B", "T", optional=True)),
    outputs=(Output("Y", "T"), Output("Mean", "U", optional=True),
             Output("InvStdDev", "U", optional=True)),
    # ONNX's U also admits bfloat16 (stash_type=16), which polyhal does not support
    type_vars={"T": FLOAT_TYPES, "U": frozenset({DType.FLOAT32})},
    attrs=(Attr("axis", AttrKind.INT, -1, "First normalized axis; negative counts back."),
           Attr("epsilon", AttrKind.FLOAT, 1e-5, "Added to the variance."),
           Attr("stash_type", AttrKind.INT, 1, "Must be 1: statistics in float32.")),
    infer=_infer_layer_norm, kernel=_layer_norm, decompose=_decompose_layer_norm,
    onnx_since=17, differentiable=True,
    doc="Normalizes over axes [axis, rank): Y = (X - Mean) * InvStdDev * Scale + B, where "
        "Mean and InvStdDev = 1/sqrt(population variance + epsilon) are float32 outputs "
        "of shape [d0..d(axis-1), 1, ...]. As the ONNX function body says, stage one "
        "runs in float32 for every input dtype (float64 too) and Normalized is cast back "
        "to X's dtype before Scale and B (which broadcast to X unidirectionally). Only "
        "stash_type=1 is supported. Normalizing over zero elements gives NaN."))


# --- LRN ----------------------------------------------------------------------

def _infer_lrn(ctx: InferContext) -> TensorType:
    x = ctx.input(0)
    if x.rank < 2:
        raise ctx.error(f"input X must have rank >= 2 ([N, C, D...]), got {x}")
    if ctx.attrs["size"] < 1:
        raise ctx.error(f"attribute size={ctx.attrs['size']} must be >= 1")
    return x


def _lrn(x: np.ndarray, *, alpha: float, beta: float, bias: float, size: int) -> np.ndarray:
    channels = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    square = x * x
    square_sum = np.empty_like(x)
    for c in range(channels):  # the channel window [c - before, c + after], clipped
        low, high = max(0, c - before), min(channels, c + after + 1)
        square_sum[:, c] = square[:, low:high].sum(axis=1)
    return x / (bias + alpha / size * square_sum) ** beta


_LRN_WINDOW_LIMIT = 4096
"""The widest channel window LRN decomposes to when the channel count is symbolic."""


def _decompose_lrn(x: Any, *, alpha: float, beta: float, bias: float, size: int) -> Any:
    if 0 in x.type.shape:  # no element: no window to sum (a Conv over an empty axis is refused)
        return x * np.ones((), x.dtype.numpy)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    channels = x.type.shape[1]
    if isinstance(channels, int):  # offsets of `channels` or more reach no channel
        before, after = min(before, max(channels - 1, 0)), min(after, max(channels - 1, 0))
    elif size > _LRN_WINDOW_LIMIT:
        return None  # a window this wide over an unknown channel count: the node stays whole
    spatial = x.type.rank - 2
    ones = np.ones([1, 1, before + after + 1, *[1] * spatial], dtype=x.dtype.numpy)
    # [N, 1, C, D...]: the channel window is a Conv window over the C axis
    square = ops.unsqueeze(x * x, _axes_const([1]))
    window = ops.conv(square, ones, pads=[before, *[0] * spatial, after, *[0] * spatial])
    square_sum = ops.squeeze(window, _axes_const([1]))
    dtype = x.dtype.numpy
    base = np.asarray(bias, dtype) + np.asarray(alpha / size, dtype) * square_sum
    return x / ops.pow(base, np.asarray(beta, dtype))


register(OpDef(
    name="LRN", inputs=(Input("X", "T"),), outputs=(Output("Y", "T"),), type_vars=_FLOAT,
    attrs=(Attr("alpha", AttrKind.FLOAT, 1e-4, "Scaling parameter."),
           Attr("beta", AttrKind.FLOAT, 0.75, "The exponent."),
           Attr("bias", AttrKind.FLOAT, 1.0, "Added before the power."),
           Attr("size", AttrKind.INT, REQUIRED, "Channels summed over (>= 1).")),
    infer=_infer_lrn, kernel=_lrn, decompose=_decompose_lrn, onnx_since=13,
    differentiable=True,
    doc="Local response normalization across channels (axis 1): "
        "Y = X / (bias + alpha / size * sum of X^2 over channels "
        "[c - floor((size-1)/2), c + ceil((size-1)/2)])^beta."))


# --- Dropout ----------------------------------------------------------------

_DROPOUT_TRAINING = ("Dropout with training_mode=True is not supported: polyhal implements "
                     "inference-mode Dropout only (or training with ratio 0)")


def _drops(ratio: np.ndarray | None, training: np.ndarray) -> bool:
    """True when Dropout would drop: training with a nonzero ratio (default 0.5)."""
    if not bool(training.reshape(-1)[0]):
        return False
    return ratio is None or float(ratio.reshape(-1)[0]) != 0.0


def _infer_dropout(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    for index in (1, 2):
        if ctx.has_input(index):
            t = ctx.input(index)
            if any(d != 1 for d in t.shape):
                raise ctx.error(f"input {index} ({ctx.op.inputs[index].name}) must be a "
                                f"scalar, got {t}")
    # an unknown ratio counts as nonzero: it cannot be shown harmless before run time
    training = ctx.const(2)
    if training is not None and _drops(ctx.const(1), training):
        raise ctx.error(_DROPOUT_TRAINING)
    return [x, TensorType(DType.BOOL, x.shape)]


def _dropout(data: np.ndarray, ratio: np.ndarray | None = None,
             training_mode: np.ndarray | None = None, *, seed: int | None
             ) -> tuple[np.ndarray, np.ndarray]:
    if training_mode is not None and _drops(ratio, training_mode):
        raise UnsupportedError(_DROPOUT_TRAINING)
    return data, np.ones(data.shape, dtype=bool)


register(OpDef(
    name="Dropout",
    inputs=(Input("data", "T"), Input("ratio", "T1", optional=True),
            Input("training_mode", "T2", optional=True)),
    outputs=(Output("output", "T"), Output("mask", "T2", optional=True)),
    type_vars={"T": FLOAT_TYPES, "T1": FLOAT_TYPES, "T2": frozenset({DType.BOOL})},
    attrs=(Attr("seed", AttrKind.INT, None, "Unused (no random dropout)."),),
    infer=_infer_dropout, kernel=_dropout, onnx_since=22, differentiable=True,
    doc="Inference mode: output = data and mask all True; ratio is ignored. ratio and "
        "training_mode must be single-element tensors. training_mode=True is rejected "
        "(at verification when it is a constant, else at run time) unless ratio is 0, "
        "where dropout is the identity too."))

