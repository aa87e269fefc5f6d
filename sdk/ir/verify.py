"""The verifier: every structural and typing rule of the IR, checked in one pass.

Errors name the graph, the node, its op and the input or attribute at fault,
and say what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from polyhal.errors import IRError, LimitExceededError, VerificationError, shown
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.limits import current_limits
from polyhal.ir.types import TensorType

if TYPE_CHECKING:
    from polyhal.ir.graph import Graph, Node
    from polyhal.ops.registry import OpDef

_KIND_CHECKS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "string": (str,),
    "tensor": (np.ndarray,),
}


def resolve_attrs(op: OpDef, attrs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``attrs`` checked against ``op``'s schema, with defaults filled in."""
    from polyhal.ops.registry import REQUIRED, AttrKind

    specs = op.attr_specs
    unknown = sorted(set(attrs) - set(specs))
    if unknown:
        known = ", ".join(sorted(specs)) or "none"
        raise VerificationError(f"{where}: unknown attribute {unknown[0]!r} (known: {known})")
    resolved: dict[str, Any] = {}
    for name, spec in specs.items():
        if name not in attrs:
            if spec.default is REQUIRED:
                raise VerificationError(f"{where}: required attribute {name!r} is missing")
            resolved[name] = spec.default
            continue
        value = attrs[name]
        kind = spec.kind
        bad = False
        if kind in (AttrKind.INTS, AttrKind.FLOATS, AttrKind.STRINGS):
            element = {AttrKind.INTS: "int", AttrKind.FLOATS: "float",
                       AttrKind.STRINGS: "string"}[kind]
            bad = not isinstance(value, tuple) or not all(
                isinstance(v, _KIND_CHECKS[element]) for v in value)
            if not bad and kind is AttrKind.FLOATS:
                value = tuple(_as_float(v, where, name) for v in value)
        elif kind is AttrKind.DTYPE:
            if isinstance(value, str):
                value = DType.parse(value, f"{where}: attribute {name!r}")
            bad = not isinstance(value, DType)
        else:
            bad = not isinstance(value, _KIND_CHECKS[kind.value])
            if not bad and kind is AttrKind.FLOAT:
                value = _as_float(value, where, name)
        if bad:
            raise VerificationError(f"{where}: attribute {name!r} must be {kind.value}, "
                                    f"got {_describe(value)}")
        resolved[name] = value
    return resolved


def _as_float(value: float, where: str, name: str) -> float:
    """A float attribute's value (an int given for it too) as a float."""
    try:
        return float(value)
    except OverflowError:  # an int beyond float64's range
        raise VerificationError(f"{where}: attribute {name!r} is {shown(value)}, too large "
                                "for a float") from None


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return "a list of " + ", ".join(sorted({type(v).__name__ for v in value}) or {"nothing"})
    return f"{type(value).__name__} {shown(value)}"


def infer_node(op: OpDef, node_name: str, input_types: Sequence[TensorType | None],
               attrs: dict[str, Any], num_outputs: int,
               consts: Sequence[np.ndarray | None]) -> list[TensorType]:
    """Check a node's input dtypes against ``op`` and infer its output types."""
    from polyhal.ops.infer import InferContext

    where = f"node {node_name!r} ({op.qualified_name})"
    bound: dict[str, tuple[DType, int]] = {}
    for index, t in enumerate(input_types):
        if t is None:
            continue
        spec = op.input_spec(index)
        allowed = op.type_vars[spec.type_var]
        if t.dtype not in allowed:
            names = ", ".join(sorted(d.value for d in allowed))
            raise VerificationError(f"{where}: input {index} ({spec.name}) has dtype "
                                    f"{t.dtype.value}; allowed: {names}")
        if spec.type_var in bound and bound[spec.type_var][0] != t.dtype:
            other_dtype, other = bound[spec.type_var]
            raise VerificationError(
                f"{where}: input {index} ({spec.name}) is {t.dtype.value} but input {other} "
                f"({op.input_spec(other).name}) is {other_dtype.value}; they must match")
        bound.setdefault(spec.type_var, (t.dtype, index))
    ctx = InferContext(node_name, op, list(input_types), attrs, num_outputs, list(consts))
    try:
        result = op.infer(ctx)
    except LimitExceededError as exc:  # raised by the dims arithmetic, which knows no node
        raise LimitExceededError(f"{where}: {exc}") from None
    except IRError:
        raise
    except Exception as exc:  # an inference bug must still name the node
        raise VerificationError(f"{where}: type inference failed: {exc!r}") from exc
    types = [result] if isinstance(result, TensorType) else list(result)
    if len(types) < num_outputs:
        raise VerificationError(f"{where}: inference gave {len(types)} outputs, "
                                f"the node has {num_outputs}")
    types = types[:num_outputs]
    for index, t in enumerate(types):
        spec = op.output_spec(index)
        if t.dtype not in op.type_vars[spec.type_var]:
            raise VerificationError(f"{where}: output {index} ({spec.name}) would be "
                                    f"{t.dtype.value}, which the op does not allow")
    return types


def types_compatible(declared: TensorType, inferred: TensorType) -> bool:
    """True when a declared output type agrees with the inferred one.

    A dimension inference could not express (an ``_``-prefixed symbol) may be
    declared as anything; every other dimension must be equal.
    """
    if declared.dtype != inferred.dtype or declared.rank != inferred.rank:
        return False
    for d, i in zip(declared.shape, inferred.shape, strict=True):
        if isinstance(i, str) and i.startswith("_") and D.is_symbol(i):
            continue
        if not D.dims_equal(d, i):
            return False
    return True


def _check_name(kind: str, name: str, seen: dict[str, str], where: str) -> None:
    if name in seen:
        raise VerificationError(f"{where}: {kind} name {name!r} is already used by {seen[name]}")
    seen[name] = f"{kind} {name!r}" if kind != "value" else where


def verify_graph(graph: Graph) -> dict[str, TensorType]:
    """Verify ``graph``; return the type of every value by name."""
    from polyhal.ir.graph import Node, Value
    from polyhal.ops.registry import lookup

    limits = current_limits()
    g = f"graph {graph.name!r}"
    if len(graph.nodes) > limits.max_nodes:
        raise LimitExceededError(f"{g}: {len(graph.nodes)} nodes exceed the limit of "
                                 f"{limits.max_nodes}")
    types: dict[str, TensorType] = {}
    owner: dict[str, str] = {}
    consts: dict[str, np.ndarray] = {}
    produced_later = {o.name: n.name for n in graph.nodes if isinstance(n, Node)
                      for o in n.outputs}

    def define(value_name: str, t: TensorType, who: str) -> None:
        if value_name in owner:
            raise VerificationError(f"{g}: value name {value_name!r} is defined twice "
                                    f"({owner[value_name]} and {who})")
        owner[value_name] = who
        types[value_name] = t
        static = [d for d in t.shape if isinstance(d, int)]
        if len(t.shape) > limits.max_rank:
            raise LimitExceededError(f"{g}: {who} has rank {t.rank}, over the limit of "
                                     f"{limits.max_rank}")
        if len(static) == t.rank:
            limits.check_shape(static, lambda: f"{g}: {who} ({value_name}: {t})")

    for value in graph.inputs:
        if not isinstance(value, Value):
            raise VerificationError(f"{g}: inputs must be Values, got {type(value).__name__}")
        for d in value.type.shape:
            if isinstance(d, str) and not D.is_symbol(d):
                raise VerificationError(f"{g}: input {value.name!r} has dimension {d!r}; "
                                        "graph inputs take ints or plain symbols")
        define(value.name, value.type, f"graph input {value.name!r}")
    for name, array in graph.constants.items():
        define(name, TensorType.of(array, f"{g} constant {name!r}"), f"constant {name!r}")
        consts[name] = array

    node_names: dict[str, str] = {}
    for node in graph.nodes:
        if not isinstance(node, Node):
            raise VerificationError(f"{g}: nodes must be Nodes, got {type(node).__name__}")
        where = f"{g}: node {node.name!r} ({node.qualified_op})"
        _check_name("node", node.name, node_names, where)
        op = lookup(node.op, node.domain)
        if op is None:
            raise VerificationError(f"{where}: unknown op {node.qualified_op}")
        _check_arity(op, node, where)
        input_types: list[TensorType | None] = []
        for index, name in enumerate(node.inputs):
            if name == "":
                if not op.input_spec(index).optional:
                    raise VerificationError(f"{where}: input {index} "
                                            f"({op.input_spec(index).name}) is required")
                input_types.append(None)
                continue
            if name not in types:
                if name in produced_later:
                    raise VerificationError(
                        f"{where}: input {index} reads {name!r}, which node "
                        f"{produced_later[name]!r} defines later: the graph has a cycle or "
                        "its nodes are not in topological order")
                raise VerificationError(f"{where}: input {index} reads {name!r}, which no "
                                        "graph input, constant or node defines")
            input_types.append(types[name])
        attrs = resolve_attrs(op, node.attrs, where)
        inferred = infer_node(op, node.name, input_types, attrs, len(node.outputs),
                              [consts.get(n) for n in node.inputs])
        for index, (value, t) in enumerate(zip(node.outputs, inferred, strict=True)):
            if not types_compatible(value.type, t):
                raise VerificationError(f"{where}: output {index} ({value.name!r}) is declared "
                                        f"{value.type} but the op gives {t}")
            define(value.name, value.type, f"output {index} of node {node.name!r}")
        value = constant_value(op, attrs)
        if value is not None:
            consts[node.outputs[0].name] = value

    for index, value in enumerate(graph.outputs):
        if not isinstance(value, Value):
            raise VerificationError(f"{g}: outputs must be Values, got {type(value).__name__}")
        if value.name not in types:
            raise VerificationError(f"{g}: output {index} names {value.name!r}, which nothing "
                                    "defines")
        if not types_compatible(value.type, types[value.name]):
            raise VerificationError(f"{g}: output {value.name!r} is declared {value.type} but "
                                    f"the graph computes {types[value.name]}")
    return types


def constant_value(op: OpDef, attrs: dict[str, Any]) -> np.ndarray | None:
    """The value a ``core.Constant`` node produces (``None`` for any other op)."""
    if op.name != "Constant" or op.domain != "core":
        return None
    return np.asarray(op.kernel(**attrs))


def _check_arity(op: OpDef, node: Node, where: str) -> None:
    check_arity(op, len(node.inputs), len(node.outputs), where)


def check_arity(op: OpDef, n_in: int, n_out: int, where: str) -> None:
    """Raise unless ``op`` takes ``n_in`` inputs and gives ``n_out`` outputs."""
    for count, lo, hi, specs, noun, verb in (
            (n_in, op.min_inputs, op.max_inputs, op.inputs, "inputs", "takes"),
            (n_out, op.min_outputs, op.max_outputs, op.outputs, "outputs", "has")):
        if lo <= count and (hi is None or count <= hi) and (noun == "inputs" or count > 0):
            continue
        names = ", ".join(s.name + ("..." if s.variadic else "") + ("?" if s.optional else "")
                          for s in specs)
        if hi is None:
            expected = f"{max(lo, 1)} or more"
        else:
            expected = f"{lo}" if lo == hi else f"{lo} to {hi}"
        raise VerificationError(f"{where}: {verb} {expected} {noun} ({names}), got {count}")
