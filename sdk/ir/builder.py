"""Write graphs as plain Python.

>>> import numpy as np
>>> from polyhal import ops
>>> from polyhal.ir import GraphBuilder, f32
>>> g = GraphBuilder("mlp")
>>> x = g.input("x", f32["batch", 4])
>>> w = g.constant(np.ones((4, 2), np.float32), name="w")
>>> g.output(ops.relu(x @ w + 1.0), name="y")
>>> graph = g.build()
>>> graph.outputs[0].type
TensorType(float32[batch, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from polyhal.errors import IRError, VerificationError
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node, Value, freeze_array, freeze_attr
from polyhal.ir.limits import current_limits
from polyhal.ir.types import TensorType
from polyhal.ir.verify import check_arity, constant_value, infer_node, resolve_attrs


class Var:
    """A value under construction; arithmetic operators add nodes to its builder."""

    __slots__ = ("builder", "name", "type")
    __array_priority__ = 1000  # so ``ndarray + Var`` defers to Var

    def __init__(self, builder: GraphBuilder, name: str, type: TensorType) -> None:
        self.builder = builder
        self.name = name
        self.type = type

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.type.dtype

    @property
    def shape(self) -> tuple:
        """The (possibly symbolic) shape."""
        return self.type.shape

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Var:
        args = (other, self) if reverse else (self, other)
        return self.builder.op(op, *args)

    def __add__(self, other: Any) -> Var:
        return self._binary("Add", other)

    def __radd__(self, other: Any) -> Var:
        return self._binary("Add", other, reverse=True)

    def __sub__(self, other: Any) -> Var:
        return self._binary("Sub", other)

    def __rsub__(self, other: Any) -> Var:
        return self._binary("Sub", other, reverse=True)

    def __mul__(self, other: Any) -> Var:
        return self._binary("Mul", other)

    def __rmul__(self, other: Any) -> Var:
        return self._binary("Mul", other, reverse=True)

    def __truediv__(self, other: Any) -> Var:
        return self._binary("Div", other)

    def __rtruediv__(self, other: Any) -> Var:
        return self._binary("Div", other, reverse=True)

    def __matmul__(self, other: Any) -> Var:
        return self._binary("MatMul", other)

    def __rmatmul__(self, other: Any) -> Var:
        return self._binary("MatMul", other, reverse=True)

    def __pow__(self, other: Any) -> Var:
        return self._binary("Pow", other)

    def __neg__(self) -> Var:
        return self.builder.op("Neg", self)

    def __abs__(self) -> Var:
        return self.builder.op("Abs", self)

    def __repr__(self) -> str:
        return f"Var({self.name}: {self.type})"


class GraphBuilder:
    """Builds a :class:`Graph` node by node, inferring types as it goes."""

    def __init__(self, name: str = "graph", reserved: Sequence[str] = (), doc: str = "") -> None:
        self.name = name
        self.doc = doc
        """The built graph's :attr:`Graph.doc`."""
        self._reserved = set(reserved)
        self._inputs: list[Value] = []
        self._constants: dict[str, np.ndarray] = {}
        self._nodes: list[Node] = []
        self._node_names: set[str] = set()
        self._outputs: list[tuple[str, str | None]] = []
        self._types: dict[str, TensorType] = {}
        self._const_values: dict[str, np.ndarray] = {}
        self._counter = 0

    def _unique(self, stem: str) -> str:
        while True:
            self._counter += 1
            name = f"{stem}_{self._counter}"
            if (name not in self._types and name not in self._reserved
                    and name not in self._node_names):
                return name

    def _claim(self, name: str, type: TensorType) -> Var:
        if name in self._types:
            raise VerificationError(f"graph {self.name!r}: value name {name!r} is already used")
        self._types[name] = type
        return Var(self, name, type)

    def input(self, name: str, type: TensorType) -> Var:
        """Declare a graph input: ``g.input("x", f32["batch", 784])``."""
        self._inputs.append(Value(name, type))
        return self._claim(name, type)

    def constant(self, value: Any, name: str | None = None, dtype: DType | None = None) -> Var:
        """A constant (an initializer) holding a read-only copy of ``value`` (an array
        that is already read-only, such as another graph's constant, is shared)."""
        array = np.asarray(value, dtype=dtype.numpy if dtype else None)
        if dtype is None and array.dtype == np.float64 and not isinstance(value, np.ndarray):
            array = array.astype(np.float32)
        name = name or self._unique("const")
        var = self._claim(name, TensorType.of(array, f"constant {name!r}"))
        frozen = freeze_array(array, f"constant {name!r}")
        self._constants[name] = frozen
        self._const_values[name] = frozen
        return var

    def known_value(self, var: Var) -> np.ndarray | None:
        """The value of ``var`` when it is known while building (a constant, or an op
        of constants the builder folds for inference, such as ``Shape`` of a static
        value), else ``None``."""
        return self._const_values.get(var.name)

    def _as_var(self, value: Any, like: DType | None) -> Var:
        if isinstance(value, Var):
            if value.builder is not self:
                raise IRError(f"value {value.name!r} belongs to another graph builder")
            return value
        if isinstance(value, np.ndarray):
            return self.constant(value)
        if like is not None and isinstance(value, int | float | bool | list | tuple):
            return self.constant(np.asarray(value, dtype=like.numpy))
        array = np.asarray(value)
        if array.size == 0 and isinstance(value, list | tuple):
            array = array.astype(np.int64)  # an empty list of axes, pads or sizes
        elif array.dtype == np.float64:
            array = array.astype(np.float32)
        return self.constant(array)

    def op(self, op: str, *inputs: Any, domain: str = "core", num_outputs: int | None = None,
           name: str | None = None, output_names: Sequence[str] | None = None,
           **attrs: Any) -> Any:
        """Apply ``op``; returns a :class:`Var`, or a tuple when it has several outputs.

        Non-``Var`` inputs (numbers, lists, arrays) become constants; a number
        takes the dtype of the ``Var`` it meets in the same type variable.
        ``None`` omits an optional input. ``output_names`` names the outputs
        (default: the node name, with ``.i`` suffixes when there are several).
        """
        from polyhal.ops import snake_name
        from polyhal.ops.registry import get_op

        opdef = get_op(op, domain)
        node_name = name or self._unique(snake_name(op).rstrip("_"))
        where = f"node {node_name!r} ({opdef.qualified_name})"
        like: dict[str, DType] = {}
        for index, value in enumerate(inputs):
            if isinstance(value, Var):
                like.setdefault(opdef.input_spec(index).type_var, value.dtype)
        vars_: list[Var | None] = []
        for index, value in enumerate(inputs):
            if value is None:
                vars_.append(None)
                continue
            vars_.append(self._as_var(value, like.get(opdef.input_spec(index).type_var)))
        if (num_outputs is not None and "num_outputs" in opdef.attr_specs
                and all(v is None for v in inputs[1:])):
            # Split takes its output count as an attribute unless sizes are given.
            attrs.setdefault("num_outputs", num_outputs)
        frozen = {k: freeze_attr(v, f"{where} attribute {k!r}") for k, v in attrs.items()
                  if v is not None}
        resolved = resolve_attrs(opdef, frozen, where)
        count = num_outputs if num_outputs is not None else max(opdef.min_outputs, 1)
        if output_names is not None:
            count = len(output_names)
        check_arity(opdef, len(vars_), count, where)
        out_types = infer_node(
            opdef, node_name, [v.type if v else None for v in vars_], resolved, count,
            [self._const_values.get(v.name) if v else None for v in vars_])
        out_names = list(output_names) if output_names is not None else [
            node_name if count == 1 else f"{node_name}.{i}" for i in range(count)]
        for out_name, t in zip(out_names, out_types, strict=True):
            if t.is_static:
                current_limits().check_shape(
                    t.shape, lambda out_name=out_name, t=t: f"{where}: output {out_name!r} ({t})")
        outputs = [self._claim(n, t) for n, t in zip(out_names, out_types, strict=True)]
        self._node_names.add(node_name)
        self._nodes.append(Node(opdef.name, node_name, tuple(v.name if v else "" for v in vars_),
                                tuple(Value(v.name, v.type) for v in outputs), frozen,
                                opdef.domain))
        value = constant_value(opdef, resolved)
        if value is not None:
            self._const_values[outputs[0].name] = value
        return outputs[0] if count == 1 else tuple(outputs)

    def output(self, *values: Var, name: str | None = None,
               names: Sequence[str] | None = None) -> None:
        """Mark values as graph outputs, optionally renaming them.

        Renaming an input, a constant or a value that is already an output adds an
        ``Identity`` node, so that every output name stands for one value.
        """
        if name is not None:
            names = [name]
        if names is not None and len(names) != len(values):
            raise IRError(f"output: {len(values)} values but {len(names)} names")
        for index, value in enumerate(values):
            if not isinstance(value, Var) or value.builder is not self:
                raise IRError(f"output {index} is not a value of this graph builder")
            new = names[index] if names else None
            if new is not None and new != value.name and (
                    value.name in self._constants or any(
                        v.name == value.name for v in self._inputs) or any(
                        old == value.name for old, _ in self._outputs)):
                value = self.op("Identity", value)
            self._outputs.append((value.name, new))

    def build(self) -> Graph:
        """The verified graph."""
        renames = {old: new for old, new in self._outputs if new is not None and new != old}
        taken = set(self._types) - set(renames)
        for new in renames.values():
            if new in taken:
                raise VerificationError(f"graph {self.name!r}: output name {new!r} is already "
                                        "used by another value")

        def rename(name: str) -> str:
            return renames.get(name, name)

        def rename_value(v: Value) -> Value:
            return Value(rename(v.name), v.type)

        if any(old in {v.name for v in self._inputs} | set(self._constants) for old in renames):
            raise VerificationError(f"graph {self.name!r}: a graph input or constant cannot be "
                                    "renamed as an output")
        nodes = [Node(n.op, n.name, tuple(rename(i) for i in n.inputs),
                      tuple(rename_value(o) for o in n.outputs), n.attrs, n.domain)
                 for n in self._nodes]
        outputs = [Value(rename(name), self._types[name]) for name, _ in self._outputs]
        return Graph(self.name, tuple(self._inputs), tuple(outputs), tuple(nodes),
                     dict(self._constants), self.doc)
