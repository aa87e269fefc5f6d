"""Vector-Jacobian products of core ops, as graph-building rules.

A rule receives a :class:`VjpContext` (the node, its inputs and outputs as
values of the gradient graph's builder, and the cotangents of its outputs)
and returns one cotangent per input: a value of the input's type, or ``None``
where the input gets none (an integer input, an input no gradient is asked
of, or a zero). Rules build their results from ops that have rules
themselves, so the gradient of a gradient graph exists too::

    @vjp_rule("Exp")
    def _exp(ctx):
        return [ctx.cotangent * ctx.output]

Rules live here, one module per op family, rather than in the op modules
(:mod:`polyhal.ops`): they are builder code over the ops, and an op module
that built graphs of other ops would import the whole registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.errors import UnsupportedError
from polyhal.ir import dims as D
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.graph import Node
from polyhal.ops import apply


@dataclass
class VjpContext:
    """What a rule may look at (all values belong to the gradient graph's builder)."""

    node: Node
    inputs: list[Var | None]
    """The node's inputs (``None`` for an omitted optional input)."""
    outputs: list[Var]
    cotangents: list[Var | None]
    """Cotangent of each output; ``None`` is zero."""
    attrs: dict[str, Any]
    """Every schema attribute, defaults filled in."""
    wanted: list[bool]
    """Whether input ``i`` needs a cotangent (rules may skip the others)."""
    builder: GraphBuilder

    @property
    def x(self) -> Var:
        """The first input."""
        value = self.inputs[0]
        assert value is not None
        return value

    @property
    def output(self) -> Var:
        """The first output."""
        return self.outputs[0]

    @property
    def cotangent(self) -> Var:
        """The first output's cotangent (zero filled in when absent)."""
        ct = self.cotangents[0]
        return ct if ct is not None else zeros_like(self.outputs[0])

    def const(self, index: int) -> np.ndarray | None:
        """Input ``index``'s value when it is known while building (axes, shapes)."""
        value = self.inputs[index] if index < len(self.inputs) else None
        return None if value is None else self.builder.known_value(value)

    def ints(self, index: int, what: str) -> list[int] | None:
        """Input ``index`` as a list of ints, ``None`` when omitted; an error when it is
        not known while building (a rule that needs axes, pads or repeats)."""
        if index >= len(self.inputs) or self.inputs[index] is None:
            return None
        known = self.const(index)
        if known is None:
            raise self.unsupported(f"{what} must be known while building the gradient")
        return [int(v) for v in known.reshape(-1)]

    def static_shape(self, value: Var, what: str = "the input") -> tuple[int, ...]:
        """``value``'s shape, which must be static."""
        if not all(isinstance(d, int) for d in value.shape):
            raise self.unsupported(f"the shape of {what} must be static, got "
                                   f"{list(value.shape)}")
        return tuple(int(d) for d in value.shape)

    def unsupported(self, why: str) -> UnsupportedError:
        """The error for a case this rule cannot differentiate."""
        return UnsupportedError(f"no gradient for node {self.node.name!r} "
                                f"({self.node.qualified_op}): {why}")


VjpRule = Callable[[VjpContext], Sequence["Var | None"]]

RULES: dict[str, VjpRule] = {}
"""Rules by qualified op name (``core.Exp``)."""


def vjp_rule(*names: str, domain: str = "core") -> Callable[[VjpRule], VjpRule]:
    """Register a rule for ops ``names`` of ``domain``."""
    def register(rule: VjpRule) -> VjpRule:
        for name in names:
            RULES[f"{domain}.{name}"] = rule
        return rule
    return register


def op(name: str, *inputs: Any, **attrs: Any) -> Any:
    """Apply core op ``name`` (a short form of :func:`polyhal.ops.apply`)."""
    return apply(name, *inputs, **attrs)


def reshape(value: Var, shape: Any) -> Var:
    """``Reshape`` with ``allowzero=1``: a 0 in ``shape`` is a zero-size dim (the
    rules pass exact shapes, which may describe empty tensors)."""
    return op("Reshape", value, shape, allowzero=1)


def scalar(like: Var, value: float) -> np.ndarray:
    """A 0-d array of ``like``'s dtype, to combine with it."""
    return np.asarray(value, dtype=like.dtype.numpy)


def shape_of(value: Var) -> Var:
    """``Shape(value)`` (a constant when the shape is static)."""
    if all(isinstance(d, int) for d in value.shape):
        return value.builder.constant(np.array(value.shape, np.int64))
    return op("Shape", value)


def zeros_like(value: Var) -> Var:
    """Zeros of ``value``'s type."""
    fill = np.zeros(1, value.dtype.numpy)
    return op("ConstantOfShape", shape_of(value), value=fill)


def zeros(shape: Sequence[int], like: Var) -> Var:
    """Zeros of static ``shape`` and ``like``'s dtype (made at run time, not stored)."""
    return op("ConstantOfShape", like.builder.constant(np.array(shape, np.int64)),
              value=np.zeros(1, like.dtype.numpy))


def scatter_add_along(values: Var, indices: Var | np.ndarray, axis: int, size: int) -> Var:
    """The transpose of ``Gather(x, indices, axis)`` for 1-D ``indices`` (non-negative):
    ``values`` summed into a tensor whose ``axis`` has ``size`` positions."""
    shape = [int(d) for d in values.shape]
    line = [1] * len(shape)
    line[axis] = shape[axis]
    index = indices if isinstance(indices, Var) else values.builder.constant(
        np.asarray(indices, np.int64))
    spread = op("Expand", reshape(index, np.array(line, np.int64)),
                np.array(shape, np.int64))
    target = [*shape[:axis], size, *shape[axis + 1:]]
    return op("ScatterElements", zeros(target, values), spread, values, axis=axis,
              reduction="add")


def sum_to(ct: Var, shape: tuple[D.Dim, ...], where: VjpContext,
           actual: tuple[D.Dim, ...] | None = None) -> Var:
    """``ct`` summed over the axes broadcasting added to a value of ``shape``.

    ``actual`` is ``ct``'s true shape when the rule knows it better than inference
    does (the node output's type: a cotangent built from ``Shape`` of a symbolic
    value has fresh dims where the output's type names them).
    """
    have_shape = ct.shape if actual is None else actual
    lead = ct.type.rank - len(shape)
    if lead < 0:
        raise where.unsupported(f"a cotangent of rank {ct.type.rank} for an input of rank "
                                f"{len(shape)}")
    if lead:
        ct = op("ReduceSum", ct, list(range(lead)), keepdims=0)
    axes = []
    for axis, (want, have) in enumerate(zip(shape, have_shape[lead:], strict=True)):
        if want == have:
            continue
        if want != 1:
            raise where.unsupported(f"cannot tell statically whether dim {axis} ({want} "
                                    f"against {have}) was broadcast")
        axes.append(axis)
    if axes:
        ct = op("ReduceSum", ct, axes, keepdims=1)
    return ct


def unbroadcast(ctx: VjpContext, cts: Sequence[Var | None]) -> list[Var | None]:
    """Each input's cotangent summed to that input's shape (multidirectional ops)."""
    result: list[Var | None] = []
    for value, ct, wanted in zip(ctx.inputs, cts, ctx.wanted, strict=True):
        result.append(None if ct is None or value is None or not wanted
                      else sum_to(ct, value.shape, ctx, ctx.output.shape))
    return result


def positive_axes(axes: Sequence[int], rank: int) -> list[int]:
    """``axes`` with negative ones counted from the back, sorted."""
    return sorted(int(a) % rank if rank else 0 for a in axes)


from polyhal.autodiff.rules import (  # noqa: E402, F401  (importing registers the rules)
    elementwise,
    indexing,
    linalg,
    movement,
    nn,
    quantum,
    reduce,
)
