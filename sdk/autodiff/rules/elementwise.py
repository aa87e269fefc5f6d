"""Rules of elementwise ops (unary math, broadcasting arithmetic, Where, Cast)."""

from __future__ import annotations

import math

from polyhal.autodiff.rules import VjpContext, op, scalar, unbroadcast, vjp_rule
from polyhal.ir.builder import Var

# ----------------------------------------------------------------------------- unary


@vjp_rule("Identity", "Dropout")  # Dropout is the identity (inference mode only)
def _identity(ctx: VjpContext) -> list[Var | None]:
    return [ctx.cotangent] + [None] * (len(ctx.inputs) - 1)


@vjp_rule("Neg")
def _neg(ctx: VjpContext) -> list[Var | None]:
    return [-ctx.cotangent]


@vjp_rule("Abs")
def _abs(ctx: VjpContext) -> list[Var | None]:
    return [ctx.cotangent * op("Sign", ctx.x)]


@vjp_rule("Relu")
def _relu(ctx: VjpContext) -> list[Var | None]:
    positive = op("Greater", ctx.x, scalar(ctx.x, 0))
    return [op("Where", positive, ctx.cotangent, scalar(ctx.x, 0))]


@vjp_rule("Exp")
def _exp(ctx: VjpContext) -> list[Var | None]:
    return [ctx.cotangent * ctx.output]


@vjp_rule("Log")
def _log(ctx: VjpContext) -> list[Var | None]:
    return [ctx.cotangent / ctx.x]


@vjp_rule("Sqrt")
def _sqrt(ctx: VjpContext) -> list[Var | None]:
    return [ctx.cotangent * scalar(ctx.x, 0.5) / ctx.output]


@vjp_rule("Reciprocal")
def _reciprocal(ctx: VjpContext) -> list[Var | None]:
    return [-(ctx.cotangent * ctx.output * ctx.output)]


@vjp_rule("Sin")
def _sin(ctx: VjpContext) -> list[Var | None]:
    return [ctx.cotangent * op("Cos", ctx.x)]


@vjp_rule("Cos")
def _cos(ctx: VjpContext) -> list[Var | None]:
    return [-(ctx.cotangent * op("Sin", ctx.x))]


@vjp_rule("Tanh")
def _tanh(ctx: VjpContext) -> list[Var | None]:
    y = ctx.output
    return [ctx.cotangent * (scalar(y, 1) - y * y)]


@vjp_rule("Sigmoid")
def _sigmoid(ctx: VjpContext) -> list[Var | None]:
    y = ctx.output
    return [ctx.cotangent * y * (scalar(y, 1) - y)]


@vjp_rule("Erf")
def _erf(ctx: VjpContext) -> list[Var | None]:
    x = ctx.x
    return [ctx.cotangent * scalar(x, 2 / math.sqrt(math.pi)) * op("Exp", -(x * x))]


@vjp_rule("Cast")
def _cast(ctx: VjpContext) -> list[Var | None]:
    if not ctx.x.dtype.is_float:
        return [None]
    return [op("Cast", ctx.cotangent, to=ctx.x.dtype)]


# ---------------------------------------------------------------------------- binary


@vjp_rule("Add")
def _add(ctx: VjpContext) -> list[Var | None]:
    return unbroadcast(ctx, [ctx.cotangent, ctx.cotangent])


@vjp_rule("Sub")
def _sub(ctx: VjpContext) -> list[Var | None]:
    return unbroadcast(ctx, [ctx.cotangent, -ctx.cotangent])


@vjp_rule("Mul")
def _mul(ctx: VjpContext) -> list[Var | None]:
    a, b = ctx.inputs
    g = ctx.cotangent
    return unbroadcast(ctx, [g * b if ctx.wanted[0] else None,
                             g * a if ctx.wanted[1] else None])


@vjp_rule("Div")
def _div(ctx: VjpContext) -> list[Var | None]:
    _, b = ctx.inputs
    assert b is not None
    g = ctx.cotangent / b
    return unbroadcast(ctx, [g, -(g * ctx.output) if ctx.wanted[1] else None])


@vjp_rule("Pow")
def _pow(ctx: VjpContext) -> list[Var | None]:
    x, y = ctx.inputs
    assert x is not None and y is not None
    g, z = ctx.cotangent, ctx.output
    exponent = y if y.dtype == x.dtype else op("Cast", y, to=x.dtype)
    dx = g * exponent * op("Pow", x, exponent - scalar(exponent, 1)) if ctx.wanted[0] else None
    dy = None
    if ctx.wanted[1] and y.dtype.is_float:
        dy = g * z * op("Log", x)
        if y.dtype != x.dtype:
            dy = op("Cast", dy, to=y.dtype)
    return unbroadcast(ctx, [dx, dy])


@vjp_rule("Mod")
def _mod(ctx: VjpContext) -> list[Var | None]:
    a, b = ctx.inputs
    assert a is not None and b is not None
    g = ctx.cotangent
    quotient = a / b
    if ctx.attrs["fmod"]:  # truncation toward zero
        whole = op("Where", op("GreaterOrEqual", quotient, scalar(a, 0)),
                   op("Floor", quotient), op("Ceil", quotient))
    else:
        whole = op("Floor", quotient)
    return unbroadcast(ctx, [g, -(g * whole) if ctx.wanted[1] else None])


@vjp_rule("Sum")
def _sum(ctx: VjpContext) -> list[Var | None]:
    return unbroadcast(ctx, [ctx.cotangent] * len(ctx.inputs))


@vjp_rule("Max", "Min")
def _extreme(ctx: VjpContext) -> list[Var | None]:
    """The cotangent goes to the inputs equal to the result, split evenly among ties."""
    y, g = ctx.output, ctx.cotangent
    hits = [op("Cast", op("Equal", x, y), to=y.dtype) for x in ctx.inputs]
    count = hits[0]
    for hit in hits[1:]:
        count = count + hit
    share = g / count
    return unbroadcast(ctx, [share * hit for hit in hits])


@vjp_rule("Where")
def _where(ctx: VjpContext) -> list[Var | None]:
    condition = ctx.inputs[0]
    g = ctx.cotangent
    zero = scalar(g, 0)
    return unbroadcast(ctx, [None,
                             op("Where", condition, g, zero) if ctx.wanted[1] else None,
                             op("Where", condition, zero, g) if ctx.wanted[2] else None])
