"""Rules of ops that move, select or repeat elements."""

from __future__ import annotations

import numpy as np

from polyhal.autodiff.rules import (
    VjpContext,
    op,
    positive_axes,
    reshape,
    scatter_add_along,
    shape_of,
    sum_to,
    vjp_rule,
    zeros_like,
)
from polyhal.ir.builder import Var
from polyhal.ops.movement import pad_index, slice_spec, slice_window


@vjp_rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(ctx: VjpContext) -> list[Var | None]:
    return [reshape(ctx.cotangent, shape_of(ctx.x))] + [None] * (len(ctx.inputs) - 1)


@vjp_rule("Transpose")
def _transpose(ctx: VjpContext) -> list[Var | None]:
    rank = ctx.x.type.rank
    perm = ctx.attrs["perm"]
    perm = list(range(rank))[::-1] if perm is None else list(perm)
    return [op("Transpose", ctx.cotangent, perm=[int(p) for p in np.argsort(perm)])]


@vjp_rule("Expand")
def _expand(ctx: VjpContext) -> list[Var | None]:
    return [sum_to(ctx.cotangent, ctx.x.shape, ctx, ctx.output.shape), None]


@vjp_rule("Concat")
def _concat(ctx: VjpContext) -> list[Var | None]:
    inputs = [v for v in ctx.inputs if v is not None]
    axis = int(ctx.attrs["axis"]) % ctx.x.type.rank
    dims = [v.shape[axis] for v in inputs]
    if all(isinstance(d, int) for d in dims):
        sizes: Var | np.ndarray = np.array(dims, np.int64)
    else:
        sizes = op("Concat", *[op("Gather", op("Shape", v), np.array([axis], np.int64))
                               for v in inputs], axis=0)
    parts = op("Split", ctx.cotangent, sizes, axis=axis, num_outputs=len(inputs))
    return list(parts) if isinstance(parts, tuple) else [parts]


@vjp_rule("Split")
def _split(ctx: VjpContext) -> list[Var | None]:
    axis = int(ctx.attrs["axis"]) % ctx.x.type.rank
    parts = [ct if ct is not None else zeros_like(out)
             for ct, out in zip(ctx.cotangents, ctx.outputs, strict=True)]
    joined = parts[0] if len(parts) == 1 else op("Concat", *parts, axis=axis)
    return [joined] + [None] * (len(ctx.inputs) - 1)


@vjp_rule("Slice")
def _slice(ctx: VjpContext) -> list[Var | None]:
    """The cotangent put back where the slice took it, zeros elsewhere: per sliced axis
    (static), reversed for a negative step, spaced out by zeros for a step > 1, and
    padded to the input's extent."""
    x = ctx.x
    rank = x.type.rank
    starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    assert starts is not None and ends is not None
    spec = slice_spec(rank, starts, ends, ctx.ints(3, "axes"), ctx.ints(4, "steps"))
    g = ctx.cotangent
    shape = ctx.static_shape(x)
    for axis, start, end, step in spec:
        dim = shape[axis]
        lo, hi, _ = slice_window(dim, start, end, step)
        taken = np.arange(dim)[slice(lo, None if hi < 0 else hi, step)]
        if taken.size == 0:
            return [zeros_like(x)] + [None] * (len(ctx.inputs) - 1)
        if step < 0:
            g = op("Slice", g, [-1], [-(2 ** 63)], [axis], [-1])
            taken = taken[::-1]
        stride = abs(step)
        if stride > 1 and taken.size > 1:
            g = _space_out(g, axis, stride, int(taken.size))
        pads = [0] * (2 * rank)
        pads[axis] = int(taken[0])
        pads[rank + axis] = dim - int(taken[-1]) - 1
        if any(pads):
            g = op("Pad", g, np.array(pads, np.int64))
    return [g] + [None] * (len(ctx.inputs) - 1)


def _space_out(g: Var, axis: int, stride: int, count: int) -> Var:
    """``g`` with ``stride - 1`` zeros after each element along ``axis`` (none after the
    last): ``[a, b] -> [a, 0, b]`` for stride 2."""
    rank = g.type.rank
    spread = op("Unsqueeze", g, [axis + 1])
    pads = [0] * (2 * (rank + 1))
    pads[rank + 1 + axis + 1] = stride - 1
    spread = op("Pad", spread, np.array(pads, np.int64))
    shape = [0] * rank
    shape[axis] = count * stride
    flat = op("Reshape", spread, np.array(shape, np.int64))  # 0 copies the other dims
    return op("Slice", flat, [0], [(count - 1) * stride + 1], [axis])


@vjp_rule("Pad")
def _pad(ctx: VjpContext) -> list[Var | None]:
    """Negative pads crop (the cropped part's cotangent is zero). Constant mode: the
    part of the cotangent over the input, the padding's sum to the value; the other
    modes copy input positions (:func:`polyhal.ops.movement.pad_index`), so their
    cotangents are summed back onto the positions copied, axis by axis."""
    x, g = ctx.x, ctx.cotangent
    rank = x.type.rank
    pads = ctx.ints(1, "pads")
    assert pads is not None
    axes = ctx.ints(3, "axes")
    axes = list(range(rank)) if axes is None else positive_axes(axes, rank)
    begins, ends = pads[:len(axes)], pads[len(axes):]
    crop = [max(0, -b) for b in begins] + [max(0, -e) for e in ends]
    mode = ctx.attrs["mode"]
    if mode == "constant":
        inner = op("Slice", g, [max(0, b) for b in begins],
                   [-e if e > 0 else 2 ** 63 - 1 for e in ends], axes)
    else:
        shape = ctx.static_shape(x)
        inner = g
        for axis, begin, end, cut_begin, cut_end in zip(
                axes, begins, ends, crop[:len(axes)], crop[len(axes):], strict=True):
            if begin > 0 or end > 0:
                kept = shape[axis] - cut_begin - cut_end
                source = pad_index(kept, max(begin, 0), max(end, 0), mode)
                inner = scatter_add_along(inner, source, axis, kept)
    dx = op("Pad", inner, np.array(crop, np.int64), None, np.array(axes, np.int64)) if any(
        crop) else inner
    cts: list[Var | None] = [dx] + [None] * (len(ctx.inputs) - 1)
    value = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if value is not None and ctx.wanted[2] and mode == "constant":
        padding = op("ReduceSum", g, keepdims=0) - op("ReduceSum", inner, keepdims=0)
        cts[2] = reshape(padding, shape_of(value))
    return cts


@vjp_rule("Tile")
def _tile(ctx: VjpContext) -> list[Var | None]:
    x = ctx.x
    repeats = ctx.ints(1, "repeats")
    assert repeats is not None
    dims = ctx.static_shape(x)
    interleaved = [v for r, d in zip(repeats, dims, strict=True) for v in (r, d)]
    g = reshape(ctx.cotangent, np.array(interleaved, np.int64))
    g = op("ReduceSum", g, list(range(0, 2 * len(dims), 2)), keepdims=0)
    return [g, None]
