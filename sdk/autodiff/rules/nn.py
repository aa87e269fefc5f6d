"""Rules of softmax, convolution and pooling.

The windowed rules express each adjoint with the windowed ops themselves, so
that their own rules give higher orders:

* Conv's input cotangent is a ConvTranspose of the cotangent with the same
  weights; its weight cotangent a Conv of the input (batch and channels
  swapped) with the cotangent as kernel, stride and dilation exchanged.
* ConvTranspose's are the same pair the other way round.
* AveragePool's is a depthwise ConvTranspose of the cotangent, each output
  weighted by its divisor; MaxPool's scatters the cotangent onto the position
  each window took its maximum from.

They need static spatial shapes (every pad and crop is computed while
building).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from polyhal.autodiff.rules import VjpContext, op, reshape, shape_of, vjp_rule
from polyhal.ir.builder import Var
from polyhal.ops.transposed_conv import transposed_geometry, transposed_window
from polyhal.ops.window import axis_geometry, window_attrs

# ----------------------------------------------------------------------------- softmax


@vjp_rule("Softmax")
def _softmax(ctx: VjpContext) -> list[Var | None]:
    y, g = ctx.output, ctx.cotangent
    axis = ctx.attrs["axis"]
    return [y * (g - op("ReduceSum", g * y, [axis], keepdims=1))]


@vjp_rule("LogSoftmax")
def _log_softmax(ctx: VjpContext) -> list[Var | None]:
    y, g = ctx.output, ctx.cotangent
    axis = ctx.attrs["axis"]
    return [g - op("Exp", y) * op("ReduceSum", g, [axis], keepdims=1)]


# ----------------------------------------------------------------------------- global pools


def _spatial_axes(value: Var) -> list[int]:
    return list(range(2, value.type.rank))


@vjp_rule("GlobalAveragePool")
def _global_average_pool(ctx: VjpContext) -> list[Var | None]:
    x = ctx.x
    count = math.prod(ctx.static_shape(x)[2:])
    spread = op("Expand", ctx.cotangent, shape_of(x))
    return [spread / np.asarray(count, x.dtype.numpy)]


@vjp_rule("GlobalMaxPool")
def _global_max_pool(ctx: VjpContext) -> list[Var | None]:
    """The cotangent goes to the maximum, split evenly between ties."""
    x = ctx.x
    if x.type.rank == 2:
        return [ctx.cotangent]  # no spatial axes: the identity
    hit = op("Cast", op("Equal", x, ctx.output), to=x.dtype)
    ties = op("ReduceSum", hit, _spatial_axes(x), keepdims=1)
    return [hit * (ctx.cotangent / ties)]


# ----------------------------------------------------------------------------- convolution


def _perm_channels_first(rank: int) -> list[int]:
    return [1, 0, *range(2, rank)]


def _crop_or_pad(value: Var, begins: Sequence[int], ends: Sequence[int]) -> Var:
    """``value`` with each spatial axis grown (positive) or cropped (negative) at both
    ends."""
    if not any(begins) and not any(ends):
        return value
    pads = np.array([0, 0, *begins, 0, 0, *ends], np.int64)
    return op("Pad", value, pads)


def _weight_grad(inputs: Var, cotangent: Var, strides: Sequence[int],
                 dilations: Sequence[int], group: int, begins: Sequence[int],
                 ends: Sequence[int], kernel: Sequence[int]) -> Var:
    """``sum over n, o of cotangent[n, m, o] * inputs[n, c, o*stride + k*dilation - begin]``
    as ``[M, C/group, K...]``: a Conv of the inputs (batch as channels) whose kernel is
    the cotangent, the stride and dilation exchanged."""
    rank = inputs.type.rank
    n, c = inputs.shape[:2]
    m = cotangent.shape[1]
    assert isinstance(n, int) and isinstance(c, int) and isinstance(m, int)
    spatial_in, spatial_out = list(inputs.shape[2:]), list(cotangent.shape[2:])
    swap = _perm_channels_first(rank)
    if group == 1:
        data, kernel_of = op("Transpose", inputs, perm=swap), op("Transpose", cotangent,
                                                                  perm=swap)
    else:  # [C/G, G*N, D...] against [G*M/G, N, O...], in G groups
        cg, mg = c // group, m // group
        data = reshape(inputs, np.array([n, group, cg, *spatial_in], np.int64))
        data = op("Transpose", data, perm=[2, 1, 0, *range(3, rank + 1)])
        data = reshape(data, np.array([cg, group * n, *spatial_in], np.int64))
        kernel_of = reshape(cotangent, np.array([n, group, mg, *spatial_out], np.int64))
        kernel_of = op("Transpose", kernel_of, perm=[1, 2, 0, *range(3, rank + 1)])
        kernel_of = reshape(kernel_of, np.array([m, n, *spatial_out], np.int64))
    full = op("Conv", data, kernel_of, strides=list(dilations), dilations=list(strides),
              pads=[*begins, *ends], group=group)
    reach = [int(d) for d in full.shape[2:]]
    if reach != list(kernel):
        full = op("Slice", full, [0] * len(kernel), list(kernel), list(range(2, rank)))
    return op("Transpose", full, perm=swap)


def _bias_grad(ctx: VjpContext) -> Var | None:
    if len(ctx.inputs) < 3 or ctx.inputs[2] is None or not ctx.wanted[2]:
        return None
    return op("ReduceSum", ctx.cotangent, [0, *_spatial_axes(ctx.output)], keepdims=0)


def _window_geometry(ctx: VjpContext, kernel: Sequence[int], pool: bool
                     ) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """``(strides, dilations, begins, ends, outputs)`` of a Conv or pool node."""
    attrs = {k: ctx.attrs[k] for k in ("auto_pad", "pads", "strides", "dilations")}
    attrs["ceil_mode"] = ctx.attrs.get("ceil_mode", 0)
    try:
        win = window_attrs(kernel, attrs, pool)
        geometry = [axis_geometry(size, axis, win)
                    for axis, size in enumerate(ctx.static_shape(ctx.x)[2:])]
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    return (list(win.strides), list(win.dilations), [g[0] for g in geometry],
            [g[1] for g in geometry], [g[2] for g in geometry])


def _adjoint(cotangent: Var, weights: Var, strides: Sequence[int], dilations: Sequence[int],
             group: int, begins: Sequence[int], sizes: Sequence[int]) -> Var:
    """The transpose of a windowed sum: ConvTranspose's full output, cropped (or padded
    with zeros) to the input positions ``[begin, begin + size)`` of each axis."""
    full = op("ConvTranspose", cotangent, weights, strides=list(strides),
              dilations=list(dilations), group=group)
    reach = [int(d) for d in full.shape[2:]]
    return _crop_or_pad(full, [-b for b in begins],
                        [b + s - r for b, s, r in zip(begins, sizes, reach, strict=True)])


@vjp_rule("Conv")
def _conv(ctx: VjpContext) -> list[Var | None]:
    x, w = ctx.inputs[0], ctx.inputs[1]
    assert x is not None and w is not None
    shape = ctx.static_shape(x)
    kernel = ctx.static_shape(w, "the weights")[2:]
    group = ctx.attrs["group"]
    strides, dilations, begins, ends, _ = _window_geometry(ctx, kernel, pool=False)
    g = ctx.cotangent
    dx = dw = None
    if ctx.wanted[0]:
        dx = _adjoint(g, w, strides, dilations, group, begins, shape[2:])
    if ctx.wanted[1]:
        dw = _weight_grad(x, g, strides, dilations, group, begins, ends, kernel)
    return [dx, dw, _bias_grad(ctx)][:len(ctx.inputs)]


@vjp_rule("ConvTranspose")
def _conv_transpose(ctx: VjpContext) -> list[Var | None]:
    x, w = ctx.inputs[0], ctx.inputs[1]
    assert x is not None and w is not None
    shape = ctx.static_shape(x)
    kernel = ctx.static_shape(w, "the weights")[2:]
    attrs = {k: ctx.attrs[k] for k in ("auto_pad", "dilations", "output_padding",
                                       "output_shape", "pads", "strides")}
    try:
        t = transposed_window(kernel, attrs)
        geometry = [transposed_geometry(size, axis, t) for axis, size in enumerate(shape[2:])]
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    strides, dilations = list(t.win.strides), list(t.win.dilations)
    group = ctx.attrs["group"]
    # the cotangent of the full output: Y is its window [begin, begin + out)
    full = _crop_or_pad(ctx.cotangent, [begin for begin, _, _ in geometry],
                        [size - begin - out for begin, size, out in geometry])
    dx = dw = None
    if ctx.wanted[0]:
        dx = op("Conv", full, w, strides=strides, dilations=dilations, group=group)
        if [int(d) for d in dx.shape[2:]] != list(shape[2:]):
            dx = op("Slice", dx, [0] * len(kernel), list(shape[2:]),
                    list(range(2, len(shape))))
    if ctx.wanted[1]:
        zeros = [0] * len(kernel)
        dw = _weight_grad(full, x, strides, dilations, group, zeros, zeros, kernel)
    return [dx, dw, _bias_grad(ctx)][:len(ctx.inputs)]


# ----------------------------------------------------------------------------- pools


@vjp_rule("AveragePool")
def _average_pool(ctx: VjpContext) -> list[Var | None]:
    """Each output's cotangent over its divisor, spread over its window."""
    x = ctx.x
    shape = ctx.static_shape(x)
    kernel = list(ctx.attrs["kernel_shape"])
    strides, dilations, begins, ends, outs = _window_geometry(ctx, kernel, pool=True)
    include_pad = bool(ctx.attrs["count_include_pad"])
    divisor = np.ones([1] * len(kernel))
    for axis, (size, k, s, d, b, e, o) in enumerate(zip(
            shape[2:], kernel, strides, dilations, begins, ends, outs, strict=True)):
        coords = np.arange(o)[:, None] * s - b + np.arange(k)[None, :] * d
        low, high = (-b, size + e) if include_pad else (0, size)
        counted = ((coords >= low) & (coords < high)).sum(axis=1)
        divisor = divisor * counted.reshape([o if i == axis else 1 for i in range(len(kernel))])
    with np.errstate(divide="ignore"):
        weight = np.where(divisor > 0, 1.0 / np.maximum(divisor, 1), 0.0)
    scaled = ctx.cotangent * weight.astype(x.dtype.numpy)
    channels = shape[1]
    ones = np.ones([channels, 1, *kernel], x.dtype.numpy)
    return [_adjoint(scaled, ctx.builder.constant(ones), strides, dilations, channels,
                     begins, shape[2:])]


@vjp_rule("MaxPool")
def _max_pool(ctx: VjpContext) -> list[Var | None]:
    """The cotangent of each window goes to the position of its maximum (the first one,
    as Indices names it)."""
    x = ctx.x
    shape = ctx.static_shape(x)
    attrs = {k: ctx.attrs[k] for k in ("auto_pad", "ceil_mode", "dilations", "kernel_shape",
                                       "pads", "strides")}
    _, indices = op("MaxPool", x, num_outputs=2, **attrs)
    g = ctx.cotangent if ctx.cotangents[0] is not None else None
    if g is None:
        return [None]
    flat_size = math.prod(shape)
    zeros = ctx.builder.constant(np.zeros([flat_size], x.dtype.numpy))
    flat = op("ScatterElements", zeros, reshape(indices, np.array([-1], np.int64)),
              reshape(g, np.array([-1], np.int64)), axis=0, reduction="add")
    return [reshape(flat, shape_of(x))]
