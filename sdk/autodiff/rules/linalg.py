"""Rules of matrix products (Gemm decomposes to MatMul before differentiation)."""

from __future__ import annotations

from polyhal.autodiff.rules import VjpContext, op, sum_to, vjp_rule
from polyhal.ir.builder import Var


def _swap_last(value: Var) -> Var:
    rank = value.type.rank
    return op("Transpose", value, perm=[*range(rank - 2), rank - 1, rank - 2])


@vjp_rule("MatMul")
def _matmul(ctx: VjpContext) -> list[Var | None]:
    """numpy.matmul semantics: a 1-D operand is a matrix of one row (A) or one column
    (B) whose added axis the result drops; batch dims broadcast."""
    a, b = ctx.inputs
    assert a is not None and b is not None
    g = ctx.cotangent
    a_vector, b_vector = a.type.rank == 1, b.type.rank == 1
    a2 = op("Unsqueeze", a, [0]) if a_vector else a
    b2 = op("Unsqueeze", b, [1]) if b_vector else b
    if a_vector and b_vector:
        g2 = op("Unsqueeze", g, [0, 1])
    elif a_vector:
        g2 = op("Unsqueeze", g, [g.type.rank - 1])
    elif b_vector:
        g2 = op("Unsqueeze", g, [g.type.rank])
    else:
        g2 = g
    batch = tuple(ctx.output.shape[:max(a2.type.rank, b2.type.rank) - 2])
    da = db = None
    if ctx.wanted[0]:
        da = sum_to(op("MatMul", g2, _swap_last(b2)), a2.shape, ctx, (*batch, *a2.shape[-2:]))
        da = op("Squeeze", da, [0]) if a_vector else da
    if ctx.wanted[1]:
        db = sum_to(op("MatMul", _swap_last(a2), g2), b2.shape, ctx, (*batch, *b2.shape[-2:]))
        db = op("Squeeze", db, [1]) if b_vector else db
    return [da, db]
