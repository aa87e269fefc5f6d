"""The reference executor: the living specification of every op.

It binds symbolic dimensions from the inputs, checks every input against the
graph's declared types, runs each node's reference kernel and checks what the
kernel returned against the inferred types. float16 and bfloat16 compute in
float32 and round once to the result dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from polyhal.errors import ExecutionError, InputBindingError, IRError, PolyhalError
from polyhal.ir import dims as D
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node
from polyhal.ir.limits import current_limits
from polyhal.ir.types import TensorType
from polyhal.ir.verify import infer_node, resolve_attrs
from polyhal.ops.registry import OpDef, get_op


def bind_inputs(graph: Graph, args: Sequence[Any], kwargs: Mapping[str, Any]
                ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Match positional and named arrays to the graph inputs and bind symbols."""
    if kwargs or len(args) != len(graph.inputs):
        args = _in_input_order(graph, args, kwargs)
    bindings: dict[str, int] = {}
    arrays: dict[str, np.ndarray] = {}
    for value, array in zip(graph.inputs, args, strict=True):
        expected = value.type
        if array is None:
            raise InputBindingError(f"{_input_where(value.name, expected)}: got None")
        if type(array) is not np.ndarray:
            array = _as_array(array, value.name, expected)
        if array.dtype != expected.dtype.numpy:
            array = _in_native_order(array, expected, value.name)
        if array.ndim != expected.rank or D.bind_shape(expected.shape, array.shape,
                                                       bindings) is not None:
            check_shape(expected, array.shape, bindings, _input_where(value.name, expected),
                        InputBindingError)
        arrays[value.name] = array
    return arrays, bindings


def _as_array(data: Any, name: str, expected: TensorType) -> np.ndarray:
    """``data`` (a list, a scalar, a buffer, an ndarray subclass) as a plain ndarray; an
    InputBindingError if it is not one (a ragged list, say) or is a masked array (numpy's
    kernels would honour the mask, a device's would not see it)."""
    if isinstance(data, np.ma.MaskedArray):
        raise InputBindingError(f"{_input_where(name, expected)}: got a masked array; pass "
                                "its data or array.filled(value)")
    try:
        return np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise InputBindingError(f"{_input_where(name, expected)}: got a "
                                f"{type(data).__name__} that is not an array of one shape "
                                f"({exc})") from None


def _in_input_order(graph: Graph, args: Sequence[Any], kwargs: Mapping[str, Any]
                    ) -> list[Any]:
    """The positional and named arguments as one list in graph-input order."""
    names = [v.name for v in graph.inputs]
    if len(args) > len(names):
        raise InputBindingError(f"graph {graph.name!r} takes {len(names)} inputs, "
                                f"got {len(args)} positional")
    given: dict[str, Any] = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            raise InputBindingError(f"graph {graph.name!r} has no input {key!r} "
                                    f"(inputs: {', '.join(names)})")
        if key in given:
            raise InputBindingError(f"input {key!r} is given twice")
        given[key] = value
    missing = [n for n in names if n not in given]
    if missing:
        raise InputBindingError(f"graph {graph.name!r}: missing input(s) {', '.join(missing)}")
    return [given[n] for n in names]


def _in_native_order(array: np.ndarray, expected: TensorType, name: str) -> np.ndarray:
    """A copy of ``array`` in this machine's byte order when that is all that differs
    from ``expected``'s dtype (``>f4`` for float32, say); else an InputBindingError."""
    native = array.dtype.newbyteorder("=")
    if array.dtype.byteorder not in "=|" and native == expected.dtype.numpy:
        return array.astype(native)
    raise InputBindingError(f"{_input_where(name, expected)}: got dtype {array.dtype}")


def _input_where(name: str, expected: TensorType) -> str:
    # Formatted only for an error: bind_inputs runs on every call of a compiled graph.
    return f"input {name!r} (expects {expected})"


def check_shape(expected: TensorType, shape: tuple[int, ...], bindings: dict[str, int],
                where: str, error: type[PolyhalError]) -> None:
    """Check ``shape`` against ``expected``, binding plain symbols on first sight."""
    if len(shape) != expected.rank:
        raise error(f"{where}: got rank {len(shape)} (shape {list(shape)})")
    axis = D.bind_shape(expected.shape, shape, bindings)
    if axis is not None:
        dim = expected.shape[axis]
        detail = f" ({dim} = {D.evaluate(dim, bindings)})" if isinstance(dim, str) else ""
        raise error(f"{where}: dimension {axis} is {shape[axis]}, expected {dim}{detail}")


class ReferenceExecutor:
    """Runs a graph with the reference kernels.

    >>> import numpy as np
    >>> from polyhal import ops
    >>> from polyhal.ir import GraphBuilder, f32
    >>> g = GraphBuilder()
    >>> x = g.input("x", f32["n"])
    >>> g.output(ops.relu(x), name="y")
    >>> ReferenceExecutor(g.build())(np.array([-1.0, 2.0], np.float32))["y"]
    array([0., 2.], dtype=float32)
    """

    def __init__(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise ExecutionError(f"expected a polyhal Graph, got {type(graph).__name__} (read "
                                 "a model file with polyhal.load or load_model)")
        self.graph = graph
        self._plan: list[tuple[Node, OpDef, dict[str, Any]]] = []
        for node in graph.nodes:
            op = get_op(node.op, node.domain)
            attrs = resolve_attrs(op, node.attrs, f"node {node.name!r}")
            self._plan.append((node, op, attrs))

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """Run on arrays given by position or by input name; outputs by name."""
        env, bindings = bind_inputs(self.graph, args, kwargs)
        env.update(self.graph.constants)
        for node, op, attrs in self._plan:
            inputs = [env[name] if name else None for name in node.inputs]
            for value, array in zip(node.outputs, run_node(node, op, attrs, inputs, bindings),
                                    strict=True):
                env[value.name] = array
        given = [env[v.name] for v in self.graph.inputs]
        return {v.name: _not_aliasing(env[v.name], given) for v in self.graph.outputs}


def _not_aliasing(array: np.ndarray, given: list[np.ndarray]) -> np.ndarray:
    """``array``, or a copy where it may share memory with one of the caller's arrays
    (Transpose, Reshape, Flatten, Squeeze and Unsqueeze return views of their input):
    writing to a result must never change the caller's data."""
    if any(np.may_share_memory(array, a) for a in given):
        return array.copy()
    return array


def run(graph: Graph, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
    """Run ``graph`` once on the reference executor."""
    return ReferenceExecutor(graph)(*args, **kwargs)


def _describe(inputs: Sequence[np.ndarray | None]) -> str:
    return ", ".join("none" if a is None else f"{a.dtype}{list(a.shape)}" for a in inputs)


def run_node(node: Node, op: OpDef, attrs: dict[str, Any], inputs: list[np.ndarray | None],
             bindings: dict[str, int]) -> list[np.ndarray]:
    """Run one node's reference kernel and check its outputs against the node's types."""
    where = f"node {node.name!r} ({node.qualified_op})"
    limits = current_limits()
    for value in node.outputs:
        shape = [D.evaluate(d, bindings) for d in value.type.shape]
        if all(s is not None for s in shape):
            limits.check_shape(shape, lambda value=value: f"{where}: output {value.name!r}")  # type: ignore[arg-type]
    low = any(v.type.dtype.is_low_precision for v in node.outputs) or any(
        a is not None and _is_low_precision(a.dtype) for a in inputs)
    args = [a.astype(np.float32) if a is not None and _is_low_precision(a.dtype) else a
            for a in inputs]
    try:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the specified ones
            result = op.kernel(*args, **attrs)
    except PolyhalError:
        raise
    except Exception as exc:
        reason = _refusal(node, op, attrs, inputs) or f"{type(exc).__name__}: {exc}"
        raise ExecutionError(f"{where} failed on inputs ({_describe(inputs)}): {reason}"
                             ) from exc
    results = list(result) if isinstance(result, tuple | list) else [result]
    if len(results) < len(node.outputs):
        raise ExecutionError(f"{where}: kernel returned {len(results)} outputs, "
                             f"expected {len(node.outputs)}")
    checked = []
    for value, array in zip(node.outputs, results, strict=False):
        array = np.asarray(array)
        expected = value.type.dtype.numpy
        if low and array.dtype == np.float32 and value.type.dtype.is_low_precision:
            with np.errstate(over="ignore"):  # overflow to +-inf is the correct rounding
                array = array.astype(expected)
        if array.dtype != expected:
            raise ExecutionError(f"{where}: kernel returned dtype {array.dtype} for output "
                                 f"{value.name!r}, expected {value.type.dtype.value}")
        check_shape(value.type, array.shape, bindings, f"{where}: output {value.name!r}",
                    ExecutionError)
        checked.append(array)
    return checked


def _refusal(node: Node, op: OpDef, attrs: dict[str, Any],
             inputs: list[np.ndarray | None]) -> str | None:
    """Why type inference refuses the node's concrete inputs, in its words, or ``None``.

    A kernel fails on inputs that verified when the sizes bound to the graph's
    symbols break a relation its types imply (a symbolic ``K`` bound to 2 where a
    MatMul's other operand has 4): the verifier's message names the dimensions,
    where the kernel's (numpy's) only quotes shapes."""
    types = [None if a is None else TensorType.of(a) for a in inputs]
    try:
        infer_node(op, node.name, types, attrs, len(node.outputs), inputs)
    except IRError as exc:
        prefix = f"node {node.name!r} ({op.qualified_name}): "
        message = str(exc)
        return message[len(prefix):] if message.startswith(prefix) else message
    except Exception:
        return None
    return None


_LOW_PRECISION = frozenset({np.dtype(np.float16), DType.BFLOAT16.numpy})


def _is_low_precision(dtype: np.dtype) -> bool:
    return dtype in _LOW_PRECISION
