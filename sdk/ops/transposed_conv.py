"""ConvTranspose (ONNX semantics): the transpose of Conv (its gradient with
respect to the input), over any number of spatial axes. (The module is not
named after the op: ``polyhal.ops.conv_transpose`` is the op's builder.)

X is ``[N, C, D1..Dn]``, W ``[C, M/group, K1..Kn]``, the optional bias B
``[M]``, and Y ``[N, M, O1..On]``. Input position ``i`` of a spatial axis adds
``X[i] * W[k]`` at position ``i * stride + k * dilation`` of the *full*
output, whose length is::

    full = stride * (D - 1) + output_padding + (K - 1) * dilation + 1

Y is the window ``[pad_begin, pad_begin + O)`` of the full output (a window
reaching outside it reads zeros, then the bias), with ONNX's formulas:

* ``output_shape`` given: ``O = output_shape``, ``total = full - O``, split
  ``pad_begin = total // 2`` for SAME_UPPER and ``total - total // 2``
  otherwise, ``pad_end = total - pad_begin``; ``pads`` are ignored.
* SAME_UPPER/SAME_LOWER: ``O = D * stride``, the same split (the odd pad at
  the end for SAME_UPPER, at the beginning for SAME_LOWER).
* NOTSET: ``O = full - pad_begin - pad_end`` with explicit pads; VALID: no pads.

Choices where ONNX is silent or its implementations disagree:

* ``//`` rounds down, also for a negative total (an output larger than the
  full one): ONNX's own test data (``test_convtranspose_output_shape``, total
  -1) needs that. The positions outside the full output are zeros (plus the
  bias). onnxruntime instead clamps a negative total to 0 (SAME: O = full) or
  puts every extra position at the end (output_shape), and onnx's reference
  evaluator does the latter for output_shape.
* With SAME_UPPER/SAME_LOWER, ``output_padding`` enters the total pad, not
  ``O`` (as onnxruntime and onnx's reference evaluator; onnx's shape
  inference adds it to ``O``).
* The window attributes (auto_pad, strides, dilations, pads) are checked as
  Conv checks them (:mod:`polyhal.ops.window`): ``pads`` together with an
  auto_pad other than NOTSET is an error. ``output_padding`` must be smaller
  than the stride or the dilation of its axis, and every spatial axis of X
  needs at least one position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import FLOAT_TYPES
from polyhal.ir.limits import ensure_allocatable
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register
from polyhal.ops.window import BadWindow, Window, check_window, check_x, window_ints

_SAME = ("SAME_UPPER", "SAME_LOWER")


@dataclass(frozen=True)
class Transposed:
    """The validated attributes of one ConvTranspose node."""

    win: Window
    output_padding: tuple[int, ...]
    output_shape: tuple[int, ...] | None


def transposed_window(kernel: Sequence[D.Dim], attrs: Mapping[str, Any]) -> Transposed:
    """Check the attributes of a node with spatial kernel ``kernel``."""
    win = check_window(kernel, attrs, pool=False)
    n = len(kernel)
    output_padding = window_ints(attrs, "output_padding", n, 0, 0)
    for i, (p, s, d) in enumerate(zip(output_padding, win.strides, win.dilations, strict=True)):
        if p >= max(s, d):
            raise BadWindow(f"attribute output_padding={list(output_padding)}: the value of "
                            f"spatial axis {i} must be smaller than its stride {s} or its "
                            f"dilation {d}")
    shape = window_ints(attrs, "output_shape", n, 0, 0) if attrs.get("output_shape") else None
    return Transposed(win, output_padding, shape)


def transposed_geometry(size: int, axis: int, t: Transposed) -> tuple[int, int, int]:
    """``(pad_begin, full, output_size)`` of spatial axis ``axis`` of static size."""
    win = t.win
    if size < 1:
        raise BadWindow(f"spatial axis {axis} of X is empty; ConvTranspose needs at least "
                        "one input position")
    k, s, d = int(win.kernel[axis]), win.strides[axis], win.dilations[axis]
    full = s * (size - 1) + t.output_padding[axis] + (k - 1) * d + 1
    if t.output_shape is not None or win.auto_pad in _SAME:
        out = t.output_shape[axis] if t.output_shape is not None else size * s
        total = full - out
        begin = total // 2 if win.auto_pad == "SAME_UPPER" else total - total // 2
        return begin, full, out
    n = len(win.kernel)
    begin, end = (0, 0) if win.auto_pad == "VALID" else (win.pads[axis], win.pads[n + axis])
    if begin + end > full:
        raise BadWindow(f"spatial axis {axis}: pads {begin} and {end} remove more than the "
                        f"{full} positions of the full output")
    return begin, full, full - begin - end


def _out_dim(ctx: InferContext, size: D.Dim, axis: int, t: Transposed) -> D.Dim:
    """Output size of one spatial axis, symbolic where expressible."""
    if t.output_shape is not None:
        return t.output_shape[axis]
    k = t.win.kernel[axis]
    if isinstance(size, int) and isinstance(k, int):
        try:
            return transposed_geometry(size, axis, t)[2]
        except BadWindow as exc:
            raise ctx.error(str(exc)) from None
    s = t.win.strides[axis]
    if t.win.auto_pad in _SAME:
        return D.dim_mul(size, s)
    if not isinstance(k, int):
        return ctx.fresh(f"out{axis}")
    n = len(t.win.kernel)
    pads = 0 if t.win.auto_pad == "VALID" else t.win.pads[axis] + t.win.pads[n + axis]
    extra = t.output_padding[axis] + (k - 1) * t.win.dilations[axis] + 1 - pads
    return D.dim_add(D.dim_mul(D.dim_sub(size, 1), s), extra)


def _infer_conv_transpose(ctx: InferContext) -> TensorType:
    x, w = check_x(ctx), ctx.input(1)
    if w.rank != x.rank:
        raise ctx.error(f"input W must have the rank of X ({x.rank}), got {w}")
    group = ctx.attrs["group"]
    if group < 1:
        raise ctx.error(f"attribute group={group} must be >= 1")
    c, w_channels = x.shape[1], w.shape[0]
    if isinstance(c, int) and isinstance(w_channels, int) and c != w_channels:
        raise ctx.error(f"X has {c} channels but W {w} (shape [C, M/group, K...]) has "
                        f"{w_channels}")
    if isinstance(c, int) and c % group:
        raise ctx.error(f"X has {c} channels, which group={group} does not divide")
    kernel = list(w.shape[2:])
    if ctx.attrs["kernel_shape"] is not None:
        given = list(ctx.attrs["kernel_shape"])
        if len(given) != len(kernel) or any(k < 1 or (isinstance(wk, int) and wk != k)
                                            for k, wk in zip(given, kernel, strict=True)):
            raise ctx.error(f"attribute kernel_shape={given} does not match W {w}")
        kernel = given
    m = D.dim_mul(w.shape[1], group)
    if ctx.has_input(2):
        b = ctx.input(2)
        if b.rank != 1 or (isinstance(b.shape[0], int) and isinstance(m, int)
                           and b.shape[0] != m):
            raise ctx.error(f"input B must have shape [{m}] (one bias per output channel), "
                            f"got {b}")
    try:
        t = transposed_window(kernel, ctx.attrs)
    except BadWindow as exc:
        raise ctx.error(str(exc)) from None
    spatial = tuple(_out_dim(ctx, size, i, t) for i, size in enumerate(x.shape[2:]))
    return TensorType(x.dtype, (x.shape[0], m, *spatial))


def _conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                    auto_pad: str, dilations: Any, group: int, kernel_shape: Any,
                    output_padding: Any, output_shape: Any, pads: Any,
                    strides: Any) -> np.ndarray:
    attrs = {"auto_pad": auto_pad, "dilations": dilations, "output_padding": output_padding,
             "output_shape": output_shape, "pads": pads, "strides": strides}
    kernel, spatial = w.shape[2:], x.shape[2:]
    try:
        t = transposed_window(kernel, attrs)
        geometry = [transposed_geometry(size, i, t) for i, size in enumerate(spatial)]
    except BadWindow as exc:
        raise ValueError(str(exc)) from None
    full = [g[1] for g in geometry]
    n, c, m_per_group = x.shape[0], x.shape[1], w.shape[1]
    m = m_per_group * group
    ensure_allocatable([n, m, *full], "ConvTranspose: full output")
    y = np.zeros((n, group, m_per_group, *full), dtype=x.dtype)
    xg = x.reshape(n, group, c // group, *spatial)
    wg = w.reshape(group, c // group, m_per_group, *kernel)
    for k in np.ndindex(*kernel):
        # every input position i lands on i * stride + k * dilation
        starts = [ki * d for ki, d in zip(k, t.win.dilations, strict=True)]
        window = tuple(slice(a, a + s * (size - 1) + 1, s)
                       for a, s, size in zip(starts, t.win.strides, spatial, strict=True))
        y[(..., *window)] += np.einsum("ngc...,gcm->ngm...", xg, wg[(..., *k)])
    y = y.reshape(n, m, *full)
    # Y is a window of the full output; negative pads reach outside it (zeros).
    widths = [(max(0, -begin), max(0, begin + out - size))
              for (begin, size, out) in geometry]
    if any(a or z for a, z in widths):
        ensure_allocatable([n, m, *(size + a + z for size, (a, z) in
                                    zip(full, widths, strict=True))], "ConvTranspose: output")
        y = np.pad(y, [(0, 0), (0, 0), *widths])
    y = y[(..., *(slice(begin + a, begin + a + out)
                  for (begin, _, out), (a, _) in zip(geometry, widths, strict=True)))]
    if b is not None:
        y = y + b.reshape(1, m, *[1] * len(spatial))
    return np.ascontiguousarray(y, dtype=x.dtype)


register(OpDef(
    name="ConvTranspose",
    inputs=(Input("X", "T"), Input("W", "T"), Input("B", "T", optional=True)),
    outputs=(Output("Y", "T"),),
    type_vars={"T": FLOAT_TYPES},
    attrs=(
        Attr("auto_pad", AttrKind.STRING, "NOTSET", "NOTSET, SAME_UPPER, SAME_LOWER or VALID."),
        Attr("dilations", AttrKind.INTS, None, "Per spatial axis; default 1."),
        Attr("group", AttrKind.INT, 1, "Channel groups; C must be a multiple."),
        Attr("kernel_shape", AttrKind.INTS, None, "Must match W's spatial shape if given."),
        Attr("output_padding", AttrKind.INTS, None,
             "Extra positions at the end of each spatial axis; default 0."),
        Attr("output_shape", AttrKind.INTS, None,
             "Spatial output shape; pads are then derived (and pads ignored)."),
        Attr("pads", AttrKind.INTS, None, "[x1_begin, ..., x1_end, ...]; default 0."),
        Attr("strides", AttrKind.INTS, None, "Per spatial axis; default 1."),
    ),
    infer=_infer_conv_transpose, kernel=_conv_transpose, onnx_since=22, differentiable=True,
    doc="N-D grouped, strided, dilated transposed convolution of X [N, C, D...] with W "
        "[C, M/group, K...] plus optional bias B [M], giving [N, M, O...]: each input "
        "position adds X * W at position i*stride + k*dilation of the full output "
        "(length stride*(D-1) + output_padding + (K-1)*dilation + 1), and pads crop it. "
        "With output_shape, or SAME_UPPER/SAME_LOWER (O = D*stride), the total pad is "
        "full - O, split with the odd one at the end for SAME_UPPER and at the beginning "
        "otherwise (rounding down, also when negative: positions outside the full output "
        "are zeros plus bias). pads with an auto_pad other than NOTSET is an error; "
        "output_padding must be smaller than its axis' stride or dilation."))
