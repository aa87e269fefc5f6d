"""Automatic differentiation as graph transforms: gradients are IR, so they run
on whichever devices hold their ops, and differentiate again for higher
orders.

* :func:`grad` — the gradient of one output's sum with respect to inputs.
* :func:`vjp` — vector-Jacobian products: cotangents of outputs become inputs.
* :func:`jvp` — Jacobian-vector products: tangents of inputs become inputs.

Each returns a new graph that computes the original outputs too::

    from polyhal import autodiff
    dgraph = autodiff.grad(graph, wrt=["x"])       # outputs: y, grad_x
    d2graph = autodiff.grad(dgraph, wrt=["x"], of="grad_x")   # d2/dx2 (summed)

The rules, one per differentiable core op, live in
:mod:`polyhal.autodiff.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyhal.autodiff.reverse import (
    backpropagate,
    check_differentiable,
    prepare,
    replay_forward,
)
from polyhal.autodiff.rules import RULES, shape_of, vjp_rule, zeros_like
from polyhal.errors import IRError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import FLOAT_TYPES
from polyhal.ir.graph import Graph
from polyhal.ops import apply
from polyhal.passes import eliminate_dead_code, replay

__all__ = ["RULES", "grad", "jvp", "vjp", "vjp_rule"]


def _float_inputs(graph: Graph) -> list[str]:
    return [v.name for v in graph.inputs if v.type.dtype in FLOAT_TYPES]


def _float_outputs(graph: Graph) -> list[str]:
    return [v.name for v in graph.outputs if v.type.dtype in FLOAT_TYPES]


def _fresh(graph: Graph, base: str, taken: set[str]) -> str:
    """``base``, with underscores appended until no value of ``graph`` has it."""
    name = base
    while name in graph.value_types or name in taken:
        name += "_"
    taken.add(name)
    return name


def _ones_like(value: Var) -> Var:
    return apply("ConstantOfShape", shape_of(value), value=np.ones(1, value.dtype.numpy))


def _finish(builder: GraphBuilder, graph: Graph, env: dict[str, Var],
            extra: list[tuple[str, Var]]) -> Graph:
    for value in graph.outputs:
        builder.output(env[value.name], name=value.name)
    for name, var in extra:
        builder.output(var, name=name)
    return eliminate_dead_code(builder.build())


def _check_graph(graph: object, where: str) -> None:
    if not isinstance(graph, Graph):
        raise IRError(f"{where}: expected a Graph, got {type(graph).__name__}")


def _names(value: object, argument: str, what: str, where: str) -> list[str]:
    """``value`` (one name or a list of distinct names) as a list; an ``IRError``
    naming ``argument`` otherwise."""
    names = [value] if isinstance(value, str) else value
    if (not isinstance(names, list | tuple)
            or not all(isinstance(name, str) for name in names)):
        raise IRError(f"{where}: {argument}={value!r} must be an {what} name or a list of "
                      f"{what} names")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise IRError(f"{where}: {argument} lists {', '.join(map(repr, repeated))} more than "
                      "once")
    return list(names)


def _wrt(graph: Graph, wrt: Sequence[str] | str | None, where: str) -> list[str]:
    _check_graph(graph, where)
    names = _float_inputs(graph) if wrt is None else _names(wrt, "wrt", "input", where)
    check_differentiable(graph, names, "input")
    if not names and wrt is None:
        raise IRError(f"{where}: graph {graph.name!r} has no floating-point input to "
                      "differentiate with respect to")
    if not names:
        raise IRError(f"{where}: wrt={wrt!r} names no input")
    return names


def _of(graph: Graph, of: Sequence[str] | str | None, where: str) -> list[str]:
    outputs = _float_outputs(graph) if of is None else _names(of, "of", "output", where)
    check_differentiable(graph, outputs, "output")
    return outputs


def _gradient_or_zeros(found: Var | None, env: dict[str, Var], name: str) -> Var:
    return found if found is not None else zeros_like(env[name])


def _vjp_graph(graph: Graph, wrt: list[str], of: list[str], name: str,
               cotangent_inputs: bool = True
               ) -> tuple[Graph, dict[str, str], dict[str, str]]:
    """The vjp graph, the cotangent input of each output in ``of`` and the gradient
    output of each input in ``wrt`` (by name). Without ``cotangent_inputs`` the
    cotangents are ones (the gradient of the outputs' sum) and there are none."""
    prepared = prepare(graph)
    taken: set[str] = set()
    cotangent_names = ({o: _fresh(prepared, f"cotangent_{o}", taken) for o in of}
                       if cotangent_inputs else {})
    grad_names = {x: _fresh(prepared, f"grad_{x}", taken) for x in wrt}
    builder = GraphBuilder(name, reserved=[*prepared.value_types, *taken])
    env = replay_forward(builder, prepared)
    seeds = {o: builder.input(cotangent_names[o], prepared.value_types[o])
             if cotangent_inputs else _ones_like(env[o]) for o in of}
    found = backpropagate(builder, prepared, env, seeds, wrt)
    extra = [(grad_names[x], _gradient_or_zeros(found[x], env, x)) for x in wrt]
    return _finish(builder, prepared, env, extra), cotangent_names, grad_names


def grad(graph: Graph, wrt: Sequence[str] | str | None = None, of: str | None = None
         ) -> Graph:
    """The gradient of the sum of output ``of`` with respect to inputs ``wrt``.

    ``of`` defaults to the graph's only output (a scalar loss, usually); ``wrt``
    to every floating-point input. The result has the inputs of ``graph`` and
    its outputs, then one output ``grad_<input>`` per name in ``wrt``, shaped like
    that input (zeros where the output does not depend on it). Gradients of
    integer or boolean values are an :class:`~polyhal.errors.IRError`; an op
    that cannot be differentiated an :class:`~polyhal.errors.UnsupportedError`.
    """
    names = _wrt(graph, wrt, "grad")
    if of is None:
        outputs = [v.name for v in graph.outputs]
        if len(outputs) != 1:
            raise IRError(f"graph {graph.name!r} has {len(outputs)} outputs "
                          f"({', '.join(outputs)}): name the one to differentiate with of=")
        of = outputs[0]
    if not isinstance(of, str):
        raise IRError(f"grad: of={of!r} must be the name of one output (vjp takes several)")
    check_differentiable(graph, [of], "output")
    return _vjp_graph(graph, names, [of], f"grad_{graph.name}", cotangent_inputs=False)[0]


def vjp(graph: Graph, wrt: Sequence[str] | str | None = None,
        of: Sequence[str] | str | None = None) -> Graph:
    """Vector-Jacobian products: ``graph`` with one more input ``cotangent_<output>``
    per output in ``of`` (default: every floating-point output), typed like that
    output, and one more output ``grad_<input>`` per input in ``wrt``: the sum over
    outputs of cotangent times the output's Jacobian."""
    names = _wrt(graph, wrt, "vjp")
    outputs = _of(graph, of, "vjp")
    built, _, _ = _vjp_graph(graph, names, outputs, f"vjp_{graph.name}")
    return built


def jvp(graph: Graph, wrt: Sequence[str] | str | None = None,
        of: Sequence[str] | str | None = None) -> Graph:
    """Jacobian-vector products: ``graph`` with one more input ``tangent_<input>``
    per input in ``wrt`` and one more output ``tangent_<output>`` per output in
    ``of``: the output's Jacobian times the tangents.

    Built by transposing the vjp (the vjp is linear in its cotangents, so its own
    vjp with respect to them is the jvp); no forward-mode rules are needed.
    """
    names = _wrt(graph, wrt, "jvp")
    outputs = _of(graph, of, "jvp")
    first, cotangents, grads = _vjp_graph(graph, names, outputs, "jvp_first")
    second, tangents, transposed = _vjp_graph(first, list(cotangents.values()),
                                              list(grads.values()), "jvp_second")
    taken: set[str] = set()
    tangent_in = {x: _fresh(second, f"tangent_{x}", taken) for x in names}
    tangent_out = {o: _fresh(second, f"tangent_{o}", taken) for o in outputs}
    builder = GraphBuilder(f"jvp_{graph.name}", reserved=[*second.value_types, *taken])
    env: dict[str, Var] = {v.name: builder.input(v.name, v.type) for v in graph.inputs}
    for x in names:
        env[tangents[grads[x]]] = builder.input(tangent_in[x], graph.value_types[x])
    for name, array in second.constants.items():
        env[name] = builder.constant(array, name=name)
    # The result does not depend on the first cotangents: zeros stand for them, made
    # once their output exists (the backward part, which reads them, comes after).
    unbound = {cotangents[o]: o for o in outputs}
    for node in second.nodes:
        for name in node.inputs:
            if name in unbound:
                env[name] = zeros_like(env[unbound.pop(name)])
        outs = replay(builder, node, [env[i] if i else None for i in node.inputs])
        for value, var in zip(node.outputs, outs, strict=True):
            env[value.name] = var
    extra = [(tangent_out[o], env[transposed[cotangents[o]]]) for o in outputs]
    return _finish(builder, graph, env, extra)
