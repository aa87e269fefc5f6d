"""``Module.graph``: a model's forward pass as a verified graph."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from polyhal.errors import IRError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.nn.build import check_params_mode

if TYPE_CHECKING:
    from polyhal.nn.module import Module


def model_graph(model: Module, input_types: Sequence[Any], name: str, params: Any,
                input_names: Sequence[str] | None, output_names: Sequence[str] | None
                ) -> Graph:
    """Build ``model``'s forward graph; see :meth:`polyhal.nn.Module.graph`."""
    where = f"{type(model).__name__}.graph"
    mode = check_params_mode(params, where)
    types = [_input_type(t, index, where) for index, t in enumerate(input_types)]
    names = _names(input_names, "x", len(types), "input_names", where, numbered=len(types) != 1)
    clash = sorted(set(names) & set(model._named_parameters()))
    if clash:
        raise IRError(f"{where}: input name(s) {', '.join(map(repr, clash))} are also "
                      "parameter names; pass other input_names")
    _check_arity(model, len(types), where)
    builder = GraphBuilder(name)
    values = [builder.input(n, t) for n, t in zip(names, types, strict=True)]
    with model.bind(builder, mode):
        result = model(*values)
    outputs = result if isinstance(result, tuple) else (result,)
    for index, value in enumerate(outputs):
        if not isinstance(value, Var) or value.builder is not builder:
            raise IRError(f"{where}: forward returned {type(value).__name__} as output "
                          f"{index}; expected a graph value (or a tuple of them)")
    out_names = _names(output_names, "y", len(outputs), "output_names", where,
                       numbered=isinstance(result, tuple))
    builder.output(*outputs, names=out_names)
    return builder.build()


def _check_arity(model: Module, count: int, where: str) -> None:
    signature = inspect.signature(model.forward)
    try:
        signature.bind(*range(count))
    except TypeError:
        raise IRError(f"{where}: {type(model).__name__}.forward{signature} does not take "
                      f"{count} input(s)") from None


def _input_type(value: Any, index: int, where: str) -> TensorType:
    if isinstance(value, TensorType):
        return value
    if isinstance(value, tuple | list):
        return TensorType(DType.FLOAT32, tuple(value))
    raise IRError(f"{where}: input type {index} must be a TensorType (f32['batch', 4]) or a "
                  f"shape tuple, got {type(value).__name__} {value!r}")


def _names(given: Sequence[str] | None, stem: str, count: int, what: str, where: str,
           numbered: bool) -> list[str]:
    if given is None:
        return [f"{stem}{i}" for i in range(count)] if numbered else [stem]
    names = [given] if isinstance(given, str) else list(given)
    if len(names) != count or not all(isinstance(n, str) and n for n in names):
        raise IRError(f"{where}: {what} must be {count} non-empty name(s), got {given!r}")
    if len(set(names)) != count:
        raise IRError(f"{where}: {what} {names!r} has duplicates")
    return names
