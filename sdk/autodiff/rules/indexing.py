"""Rules of the index-driven ops: Gather, GatherElements and the scatters.

A gather's transpose is a scatter-add; a scatter's cotangents are read back
with a gather, so the family is closed under differentiation. Scatters that
reduce with ``mul`` divide by the updates (an update of exactly zero gives a
non-finite cotangent); ``max``/``min`` split the cotangent evenly between the
values that tie for the result.
"""

from __future__ import annotations

import math

import numpy as np

from polyhal.autodiff.rules import (
    VjpContext,
    op,
    reshape,
    scatter_add_along,
    vjp_rule,
    zeros,
    zeros_like,
)
from polyhal.ir.builder import Var


def _non_negative(indices: Var, sizes: int | np.ndarray) -> Var:
    """``indices`` with negative ones counted from the back of ``sizes``."""
    negative = op("Less", indices, np.asarray(0, indices.dtype.numpy))
    return op("Where", negative, indices + np.asarray(sizes, indices.dtype.numpy), indices)


def _ones(shape: tuple[int, ...], like: Var) -> Var:
    return op("ConstantOfShape", like.builder.constant(np.array(shape, np.int64)),
              value=np.ones(1, like.dtype.numpy))


def _mask(condition: Var, like: Var) -> Var:
    return op("Cast", condition, to=like.dtype)


@vjp_rule("GatherElements")
def _gather_elements(ctx: VjpContext) -> list[Var | None]:
    data, indices = ctx.inputs[0], ctx.inputs[1]
    assert data is not None and indices is not None
    return [op("ScatterElements", zeros_like(data), indices, ctx.cotangent,
               axis=ctx.attrs["axis"], reduction="add"), None]


@vjp_rule("Gather")
def _gather(ctx: VjpContext) -> list[Var | None]:
    """A scatter-add of the cotangent, the index dims flattened into one."""
    data, indices = ctx.inputs[0], ctx.inputs[1]
    assert data is not None and indices is not None
    shape = ctx.static_shape(data)
    count = math.prod(ctx.static_shape(indices, "the indices"))
    axis = ctx.attrs["axis"] % len(shape)
    rows = reshape(ctx.cotangent,
              np.array([*shape[:axis], count, *shape[axis + 1:]], np.int64))
    flat = reshape(_non_negative(indices, shape[axis]), np.array([count], np.int64))
    return [scatter_add_along(rows, flat, axis, shape[axis]), None]


class _Scatter:
    """One scatter node's pieces, for ScatterElements and ScatterND alike."""

    def __init__(self, ctx: VjpContext, elements: bool) -> None:
        self.ctx = ctx
        self.data, self.indices, self.updates = ctx.inputs  # type: ignore[misc]
        self.elements = elements
        self.reduction = ctx.attrs["reduction"]
        self.axis = ctx.attrs.get("axis", 0)

    def scatter(self, target: Var, updates: Var, reduction: str = "none") -> Var:
        name = "ScatterElements" if self.elements else "ScatterND"
        attrs = {"axis": self.axis} if self.elements else {}
        return op(name, target, self.indices, updates, reduction=reduction, **attrs)

    def gather(self, value: Var) -> Var:
        """``value`` (shaped like the data) read where each update goes."""
        if self.elements:
            return op("GatherElements", value, self.indices, axis=self.axis)
        assert self.data is not None and self.indices is not None
        shape = self.ctx.static_shape(self.data)
        depth = self.ctx.static_shape(self.indices, "the indices")[-1]
        lead = shape[:depth]
        strides = np.array([math.prod(lead[i + 1:]) for i in range(depth)], np.int64)
        positive = _non_negative(self.indices, np.array(lead, np.int64))
        linear = op("ReduceSum", positive * strides, [-1], keepdims=0)
        rows = reshape(value, np.array([math.prod(lead), *shape[depth:]], np.int64))
        return op("Gather", rows, linear, axis=0)

    def rule(self) -> list[Var | None]:
        ctx, g = self.ctx, self.ctx.cotangent
        data, updates = self.data, self.updates
        assert data is not None and updates is not None
        d_data = d_updates = None
        if self.reduction == "none":
            if ctx.wanted[0]:
                d_data = self.scatter(g, zeros_like(updates))
            if ctx.wanted[2]:
                d_updates = self.gather(g)
        elif self.reduction == "add":
            d_data = g if ctx.wanted[0] else None
            d_updates = self.gather(g) if ctx.wanted[2] else None
        elif self.reduction == "mul":
            if ctx.wanted[0]:
                d_data = g * self.scatter(_ones(ctx.static_shape(data), data), updates, "mul")
            if ctx.wanted[2]:
                d_updates = self.gather(g * ctx.output) / updates
        else:  # max, min: the cotangent split between the values tying for the result
            hit_data = _mask(op("Equal", data, ctx.output), data)
            hit_updates = _mask(op("Equal", updates, self.gather(ctx.output)), updates)
            ties = hit_data + self.scatter(zeros(ctx.static_shape(data), data), hit_updates,
                                           "add")
            share = g / ties
            d_data = share * hit_data if ctx.wanted[0] else None
            d_updates = self.gather(share) * hit_updates if ctx.wanted[2] else None
        return [d_data, None, d_updates]


@vjp_rule("ScatterElements")
def _scatter_elements(ctx: VjpContext) -> list[Var | None]:
    return _Scatter(ctx, elements=True).rule()


@vjp_rule("ScatterND")
def _scatter_nd(ctx: VjpContext) -> list[Var | None]:
    return _Scatter(ctx, elements=False).rule()
