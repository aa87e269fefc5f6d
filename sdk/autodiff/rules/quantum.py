"""The gradient of ``quantum.Expectation``: a ``quantum.ExpectationVJP`` node.

The VJP is quantum work itself (adjoint sweeps or parameter-shift batches), so
the rule emits one node that carries the forward node's attributes; the device
that runs it picks the method (:mod:`polyhal.adapters.quantum.gradients`).
"""

from __future__ import annotations

from polyhal.autodiff.rules import VjpContext, vjp_rule
from polyhal.ir.builder import Var


@vjp_rule("Expectation", domain="quantum")
def _expectation(ctx: VjpContext) -> list[Var | None]:
    if not any(ctx.wanted):
        return [None, None]
    attrs = {k: v for k, v in ctx.attrs.items() if v is not None}
    d_inputs, d_weights = ctx.builder.op("ExpectationVJP", ctx.inputs[0], ctx.inputs[1],
                                         ctx.cotangent, domain="quantum", num_outputs=2,
                                         **attrs)
    return [d_inputs if ctx.wanted[0] else None, d_weights if ctx.wanted[1] else None]
