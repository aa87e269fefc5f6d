"""Convolution and pooling (ONNX semantics): Conv, MaxPool, AveragePool,
GlobalAveragePool and GlobalMaxPool, over any number of spatial axes.

The windowed ops share one geometry, with the padding rules and the choices
where ONNX is silent: see :mod:`polyhal.ops.window`. The kernels gather every
window into an array ``[N, C, O1..On, K1..Kn]`` (see :func:`_gather_windows`)
and reduce over the kernel axes, which keeps them short and obviously correct.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.limits import ensure_allocatable
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import REQUIRED, Attr, AttrKind, Input, OpDef, Output, register
from polyhal.ops.window import (
    BadWindow,
    Window,
    axis_geometry,
    check_window,
    check_x,
    out_dim,
    window_attrs,
)


def _spatial_out(ctx: InferContext, x: TensorType, kernel: Sequence[D.Dim],
                 pool: bool) -> tuple[D.Dim, ...]:
    try:
        win = check_window(kernel, ctx.attrs, pool)
    except BadWindow as exc:
        raise ctx.error(str(exc)) from None
    return tuple(out_dim(ctx, size, i, win) for i, size in enumerate(x.shape[2:]))


def _pool_kernel_shape(ctx: InferContext, x: TensorType) -> tuple[int, ...]:
    kernel = ctx.attrs["kernel_shape"]
    if len(kernel) != x.rank - 2 or any(k < 1 for k in kernel):
        raise ctx.error(f"attribute kernel_shape={list(kernel)} must have {x.rank - 2} "
                        f"values >= 1 (one per spatial axis of X {x})")
    return tuple(kernel)


def _gather_windows(x: np.ndarray, win: Window, fill: Any, where: str
                    ) -> tuple[np.ndarray, list[np.ndarray], list[tuple[int, int, int]]]:
    """Every window of ``x``, where it reads, and the per-axis geometry.

    Returns ``windows`` of shape ``[N, C, O1..On, K1..Kn]`` (``fill`` where a
    position is outside the input); per spatial axis the input coordinate of
    each (output, kernel) position, an ``[Oi, Ki]`` array; and per spatial
    axis ``(pad_begin, pad_end, output_size)``.
    """
    spatial = x.shape[2:]
    geometry = [axis_geometry(size, i, win) for i, size in enumerate(spatial)]
    out_shape = [g[2] for g in geometry]
    # Checked before anything is built, so that a huge kernel is refused, not
    # allocated: the kernel positions and the [O..., K...] masks, which stay large
    # when the input or output is empty, then the windows themselves.
    kernel = [int(k) for k in win.kernel]
    for shape in (kernel, [*out_shape, *kernel], [*x.shape[:2], *out_shape, *kernel]):
        ensure_allocatable(shape, f"{where}: windows")
    coords = [np.arange(out)[:, None] * win.strides[i] - begin
              + np.arange(int(win.kernel[i]))[None, :] * win.dilations[i]
              for i, (begin, _, out) in enumerate(geometry)]
    # pad just enough that every coordinate lands inside the padded array
    widths = [(max(0, -int(c.min(initial=0))), max(0, int(c.max(initial=0)) - size + 1))
              for c, size in zip(coords, spatial, strict=True)]
    padded_shape = [*x.shape[:2], *(size + b + a for size, (b, a) in
                                     zip(spatial, widths, strict=True))]
    ensure_allocatable(padded_shape, f"{where}: padded input")
    padded = np.pad(x, [(0, 0), (0, 0), *widths], constant_values=fill)
    n = len(spatial)
    index = []
    for i, c in enumerate(coords):
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = c.shape
        index.append((c + widths[i][0]).reshape(shape))
    return padded[(slice(None), slice(None), *index)], coords, geometry


def _mask(coords: list[np.ndarray], low: Sequence[int], high: Sequence[int]) -> np.ndarray:
    """``[O1..On, K1..Kn]``: True where every coordinate is in ``[low, high)``."""
    n = len(coords)
    mask = np.ones([1] * (2 * n), dtype=bool)
    for i, c in enumerate(coords):
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = c.shape
        mask = mask & ((c >= low[i]) & (c < high[i])).reshape(shape)
    return mask


# --- Conv -------------------------------------------------------------------

def _infer_conv(ctx: InferContext) -> TensorType:
    x, w = check_x(ctx), ctx.input(1)
    if w.rank != x.rank:
        raise ctx.error(f"input W must have the rank of X ({x.rank}), got {w}")
    group = ctx.attrs["group"]
    if group < 1:
        raise ctx.error(f"attribute group={group} must be >= 1")
    c, m, c_per_group = x.shape[1], w.shape[0], w.shape[1]
    if isinstance(c, int) and isinstance(c_per_group, int) and c != c_per_group * group:
        raise ctx.error(f"X has {c} channels but W {w} with group={group} expects "
                        f"{c_per_group} * {group}")
    if isinstance(m, int) and m % group:
        raise ctx.error(f"W has {m} filters, which group={group} does not divide")
    kernel = list(w.shape[2:])
    if ctx.attrs["kernel_shape"] is not None:
        given = list(ctx.attrs["kernel_shape"])
        if len(given) != len(kernel) or any(k < 1 or (isinstance(wk, int) and wk != k)
                                            for k, wk in zip(given, kernel, strict=True)):
            raise ctx.error(f"attribute kernel_shape={given} does not match W {w}")
        kernel = given
    if ctx.has_input(2):
        b = ctx.input(2)
        if b.rank != 1 or (isinstance(b.shape[0], int) and isinstance(m, int)
                           and b.shape[0] != m):
            raise ctx.error(f"input B must have shape [{m}] (one bias per filter), got {b}")
    return TensorType(x.dtype, (x.shape[0], m, *_spatial_out(ctx, x, kernel, pool=False)))


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *, auto_pad: str,
          dilations: Any, group: int, kernel_shape: Any, pads: Any, strides: Any) -> np.ndarray:
    attrs = {"auto_pad": auto_pad, "dilations": dilations, "pads": pads, "strides": strides}
    win = window_attrs(w.shape[2:], attrs, pool=False)
    windows, _, geometry = _gather_windows(x, win, 0, "Conv")
    out = [g[2] for g in geometry]
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    # cols[n, g, c, p, k]: input channel c of group g at output position p, kernel offset k
    cols = windows.reshape(n, group, c // group, math.prod(out), math.prod(w.shape[2:]))
    filters = w.reshape(group, m // group, c // group, math.prod(w.shape[2:]))
    y = np.einsum("ngcpk,gmck->ngmp", cols, filters, optimize=True).reshape(n, m, *out)
    if b is not None:
        y = y + b.reshape(1, m, *[1] * len(out))
    return y.astype(x.dtype, copy=False)


_FLOAT = {"T": FLOAT_TYPES}
_POOL_ATTRS = (
    Attr("auto_pad", AttrKind.STRING, "NOTSET", "NOTSET, SAME_UPPER, SAME_LOWER or VALID."),
    Attr("ceil_mode", AttrKind.INT, 0, "1: ceil instead of floor for the output size."),
    Attr("dilations", AttrKind.INTS, None, "Per spatial axis; default 1."),
    Attr("kernel_shape", AttrKind.INTS, REQUIRED, "Window size per spatial axis."),
    Attr("pads", AttrKind.INTS, None, "[x1_begin, ..., x1_end, ...]; default 0."),
    Attr("strides", AttrKind.INTS, None, "Per spatial axis; default 1."),
)

register(OpDef(
    name="Conv",
    inputs=(Input("X", "T"), Input("W", "T"), Input("B", "T", optional=True)),
    outputs=(Output("Y", "T"),),
    type_vars=_FLOAT,
    attrs=(
        Attr("auto_pad", AttrKind.STRING, "NOTSET", "NOTSET, SAME_UPPER, SAME_LOWER or VALID."),
        Attr("dilations", AttrKind.INTS, None, "Per spatial axis; default 1."),
        Attr("group", AttrKind.INT, 1, "Channel groups; C and M must be multiples."),
        Attr("kernel_shape", AttrKind.INTS, None, "Must match W's spatial shape if given."),
        Attr("pads", AttrKind.INTS, None, "[x1_begin, ..., x1_end, ...]; default 0."),
        Attr("strides", AttrKind.INTS, None, "Per spatial axis; default 1."),
    ),
    infer=_infer_conv, kernel=_conv, onnx_since=22, differentiable=True,
    doc="N-D grouped, strided, dilated convolution (cross-correlation) of X [N, C, D...] with "
        "W [M, C/group, K...] plus optional bias B [M]; zero padding. See the module doc "
        "for the padding rules."))


# --- Pools ------------------------------------------------------------------

def _infer_max_pool(ctx: InferContext) -> list[TensorType]:
    x = check_x(ctx)
    ctx.flag("storage_order")
    shape = (*x.shape[:2], *_spatial_out(ctx, x, _pool_kernel_shape(ctx, x), pool=True))
    return [TensorType(x.dtype, shape), TensorType(DType.INT64, shape)]


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool(x: np.ndarray, *, auto_pad: str, ceil_mode: int, dilations: Any,
              kernel_shape: Any, pads: Any, storage_order: int, strides: Any
              ) -> tuple[np.ndarray, np.ndarray]:
    attrs = {"auto_pad": auto_pad, "ceil_mode": ceil_mode, "dilations": dilations,
             "pads": pads, "strides": strides}
    win = window_attrs(kernel_shape, attrs, pool=True)
    windows, coords, geometry = _gather_windows(x, win, _lowest(x.dtype), "MaxPool")
    spatial, out = x.shape[2:], [g[2] for g in geometry]
    size = math.prod(kernel_shape)  # explicit: -1 is ambiguous for empty arrays
    flat = windows.reshape(*x.shape[:2], *out, size)
    y = flat.max(axis=-1)
    # Indices: the first in-bounds position holding the max (NaN counts as the max).
    inside = _mask(coords, [0] * len(spatial), spatial).reshape(*out, size)
    hit = inside & (flat == y[..., None])
    if x.dtype.kind == "f":
        hit |= inside & np.isnan(flat) & np.isnan(y)[..., None]
    found = hit.any(axis=-1)
    offsets = np.unravel_index(np.argmax(hit, axis=-1), tuple(kernel_shape))
    grid = np.indices(out, sparse=True)
    position = [c[grid[i], offsets[i]] for i, c in enumerate(coords)]
    axis_order = range(len(out)) if storage_order == 0 else reversed(range(len(out)))
    linear = np.zeros(y.shape, dtype=np.int64)
    for i in axis_order:  # row-major (or column-major) flattening of the spatial index
        linear = linear * spatial[i] + position[i]
    channel = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(
        x.shape[0], x.shape[1], *[1] * len(out))
    indices = np.where(found, channel * math.prod(spatial) + linear, -1)
    return y, indices.astype(np.int64)


register(OpDef(
    name="MaxPool",
    inputs=(Input("X", "T"),),
    outputs=(Output("Y", "T"), Output("Indices", "I", optional=True)),
    type_vars={"T": FLOAT_TYPES | {DType.INT8, DType.UINT8}, "I": frozenset({DType.INT64})},
    attrs=(*_POOL_ATTRS,
           Attr("storage_order", AttrKind.INT, 0, "Indices flattening: 0 row-, 1 column-major.")),
    infer=_infer_max_pool, kernel=_max_pool, onnx_since=22, differentiable=True,
    doc="Max over each window, ignoring padding. Indices (int64) is the flat index "
        "(n*C + c) * prod(D) + the row-major (storage_order=0) or column-major "
        "(storage_order=1) spatial index of the first position holding the max. NaN "
        "propagates (Indices points at the first NaN). A window that covers no input "
        "position (possible only with dilation) gives -inf, or the dtype's minimum for "
        "integers, and Indices -1."))


def _infer_average_pool(ctx: InferContext) -> TensorType:
    x = check_x(ctx)
    ctx.flag("count_include_pad")
    return x.with_shape((*x.shape[:2],
                         *_spatial_out(ctx, x, _pool_kernel_shape(ctx, x), pool=True)))


def _average_pool(x: np.ndarray, *, auto_pad: str, ceil_mode: int, count_include_pad: int,
                  dilations: Any, kernel_shape: Any, pads: Any, strides: Any) -> np.ndarray:
    attrs = {"auto_pad": auto_pad, "ceil_mode": ceil_mode, "dilations": dilations,
             "pads": pads, "strides": strides}
    win = window_attrs(kernel_shape, attrs, pool=True)
    windows, coords, geometry = _gather_windows(x, win, 0, "AveragePool")
    spatial, out = x.shape[2:], [g[2] for g in geometry]
    size = math.prod(kernel_shape)  # explicit: -1 is ambiguous for empty arrays
    total = windows.reshape(*x.shape[:2], *out, size).sum(axis=-1)
    if count_include_pad:
        # pads count, but not the positions ceil_mode adds past the end padding
        counted = _mask(coords, [-begin for begin, _, _ in geometry],
                        [size + end for size, (_, end, _) in zip(spatial, geometry, strict=True)])
    else:
        counted = _mask(coords, [0] * len(spatial), spatial)
    count = counted.reshape(*out, size).sum(axis=-1).astype(x.dtype)
    with np.errstate(invalid="ignore"):  # an empty window: 0 / 0 = NaN (documented)
        return (total / count).astype(x.dtype, copy=False)


register(OpDef(
    name="AveragePool",
    inputs=(Input("X", "T"),),
    outputs=(Output("Y", "T"),),
    type_vars=_FLOAT,
    attrs=(*_POOL_ATTRS,
           Attr("count_include_pad", AttrKind.INT, 0, "1: pad positions count in the divisor.")),
    infer=_infer_average_pool, kernel=_average_pool, onnx_since=22, differentiable=True,
    doc="Mean over each window. The divisor counts the window positions inside the input "
        "(count_include_pad=0) or inside the padded input (count_include_pad=1: explicit or "
        "auto pads count, the extra positions ceil_mode adds past the end padding never "
        "do). A window with nothing to count gives NaN."))


# --- Global pools -----------------------------------------------------------

def _infer_global(ctx: InferContext) -> TensorType:
    x = ctx.input(0)
    if x.rank < 2:
        raise ctx.error(f"input X must have rank >= 2 ([N, C, D1, ...]), got {x}")
    return x.with_shape((*x.shape[:2], *[1] * (x.rank - 2)))


def _global_average_pool(x: np.ndarray) -> np.ndarray:
    axes = tuple(range(2, x.ndim))
    count = math.prod(x.shape[2:])
    with np.errstate(invalid="ignore"):  # empty spatial extent: 0 / 0 = NaN
        return (x.sum(axis=axes, keepdims=True) / x.dtype.type(count)).astype(x.dtype)


def _global_max_pool(x: np.ndarray) -> np.ndarray:
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True, initial=-np.inf)


register(OpDef(
    name="GlobalAveragePool", inputs=(Input("X", "T"),), outputs=(Output("Y", "T"),),
    type_vars=_FLOAT, infer=_infer_global, kernel=_global_average_pool, onnx_since=22,
    differentiable=True,
    doc="Mean over all spatial axes: [N, C, D...] -> [N, C, 1...]; an empty spatial "
        "extent gives NaN."))

register(OpDef(
    name="GlobalMaxPool", inputs=(Input("X", "T"),), outputs=(Output("Y", "T"),),
    type_vars=_FLOAT, infer=_infer_global, kernel=_global_max_pool, onnx_since=22,
    differentiable=True,
    doc="Max over all spatial axes: [N, C, D...] -> [N, C, 1...]; NaN propagates and an "
        "empty spatial extent gives -inf."))
