"""Rules of reductions: the cotangent is spread back over the reduced axes."""

from __future__ import annotations

import math

import numpy as np

from polyhal.autodiff.rules import VjpContext, op, positive_axes, shape_of, vjp_rule
from polyhal.ir.builder import Var


def _axes(ctx: VjpContext) -> list[int] | None:
    """The reduced axes (sorted, non-negative), or ``None`` for "none" (the identity)."""
    rank = ctx.x.type.rank
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
        known = ctx.const(1)
        if known is None:
            raise ctx.unsupported("the axes must be known while building the gradient")
        axes = [int(a) for a in known.reshape(-1)]
    else:
        axes = []
    if not axes:
        return None if ctx.attrs["noop_with_empty_axes"] else list(range(rank))
    return positive_axes(axes, rank)


def _kept(ctx: VjpContext, value: Var, axes: list[int]) -> Var:
    """``value`` (shaped like the output) with the reduced axes kept as size 1."""
    return value if ctx.attrs["keepdims"] or not axes else op("Unsqueeze", value, axes)


def _spread(ctx: VjpContext, value: Var) -> Var:
    return op("Expand", value, shape_of(ctx.x))


@vjp_rule("ReduceSum")
def _reduce_sum(ctx: VjpContext) -> list[Var | None]:
    axes = _axes(ctx)
    if axes is None:
        return [ctx.cotangent, None]
    return [_spread(ctx, _kept(ctx, ctx.cotangent, axes)), None]


@vjp_rule("ReduceMean")
def _reduce_mean(ctx: VjpContext) -> list[Var | None]:
    axes = _axes(ctx)
    if axes is None:
        return [ctx.cotangent, None]
    x = ctx.x
    dims = [x.shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        count: Var | np.ndarray = np.asarray(max(1, math.prod(dims)), x.dtype.numpy)
    else:
        sizes = op("Gather", op("Shape", x), np.array(axes, np.int64))
        count = op("Cast", op("ReduceProd", sizes, keepdims=0), to=x.dtype)
    return [_spread(ctx, _kept(ctx, ctx.cotangent, axes) / count), None]


@vjp_rule("ReduceMax", "ReduceMin")
def _reduce_extreme(ctx: VjpContext) -> list[Var | None]:
    """To the elements equal to the extreme, split evenly among ties."""
    axes = _axes(ctx)
    if axes is None:
        return [ctx.cotangent, None]
    x = ctx.x
    hits = op("Cast", op("Equal", x, _kept(ctx, ctx.output, axes)), to=x.dtype)
    count = op("ReduceSum", hits, axes, keepdims=1)
    return [hits * (_kept(ctx, ctx.cotangent, axes) / count), None]


@vjp_rule("ReduceProd")
def _reduce_prod(ctx: VjpContext) -> list[Var | None]:
    """``g * prod / x``: exact where no reduced element is 0 (there it is NaN or inf)."""
    axes = _axes(ctx)
    if axes is None:
        return [ctx.cotangent, None]
    product = _kept(ctx, ctx.cotangent * ctx.output, axes)
    return [product / ctx.x, None]
