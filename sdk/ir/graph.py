"""The graph: typed values, nodes and immutable graphs.

A :class:`Graph` is verified when it is constructed, so every ``Graph``
object in a program is valid. Passes never mutate a graph; they build a new
one (``dataclasses.replace`` works and re-verifies).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from polyhal.errors import VerificationError
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType


@dataclass(frozen=True)
class Value:
    """A named, typed value: a graph input, a constant or a node output."""

    name: str
    type: TensorType

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise VerificationError(f"value name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.type, TensorType):
            raise VerificationError(f"value {self.name!r}: type must be a TensorType, "
                                    f"got {type(self.type).__name__}")

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


AttrValue = int | float | str | DType | np.ndarray | tuple


def freeze_attr(value: Any, where: str) -> AttrValue:
    """An immutable copy of an attribute value (lists become tuples, arrays read-only)."""
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, str | DType):
        return value
    if isinstance(value, np.ndarray):
        return freeze_array(value, where)
    if isinstance(value, list | tuple):
        return tuple(freeze_attr(v, where) for v in value)
    raise VerificationError(f"{where}: unsupported attribute value of type {type(value).__name__}")


def freeze_array(array: np.ndarray, where: str) -> np.ndarray:
    """A read-only C-contiguous array with a polyhal dtype: ``array`` itself when it
    is one and no writeable array it views could change it (so graphs rebuilt from
    a graph share its constants), else a read-only copy."""
    if not isinstance(array, np.ndarray):
        raise VerificationError(f"{where}: expected a numpy array, got {type(array).__name__}")
    DType.from_numpy(array.dtype, where)
    if not array.flags.c_contiguous or _writeable_through(array):
        array = np.array(array, order="C")
        array.flags.writeable = False
    return array


def _writeable_through(array: np.ndarray) -> bool:
    """True when ``array``, or an array it is a view of, is writeable."""
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            return True
        array = array.base
    return False


@dataclass(frozen=True)
class Node:
    """One op application.

    ``inputs`` are value names (``""`` for an omitted optional input);
    ``outputs`` are the values it defines, with their types; ``attrs`` maps
    attribute names to values (defaults need not be spelled out).
    """

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[Value, ...]
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    domain: str = "core"

    def __post_init__(self) -> None:
        where = f"node {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise VerificationError(f"node name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.op, str) or not self.op:
            raise VerificationError(f"{where}: op must be a non-empty string, got {self.op!r}")
        if not isinstance(self.domain, str) or not self.domain:
            raise VerificationError(f"{where}: domain must be a non-empty string")
        inputs = tuple(self.inputs)
        if not all(isinstance(i, str) for i in inputs):
            raise VerificationError(f"{where} ({self.qualified_op}): inputs must be value names")
        outputs = tuple(self.outputs)
        if not all(isinstance(o, Value) for o in outputs):
            raise VerificationError(f"{where} ({self.qualified_op}): outputs must be Values")
        if not isinstance(self.attrs, Mapping):
            raise VerificationError(f"{where} ({self.qualified_op}): attrs must be a mapping")
        attrs = {str(k): freeze_attr(v, f"{where} attribute {k!r}") for k, v in self.attrs.items()}
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "outputs", outputs)
        object.__setattr__(self, "attrs", types.MappingProxyType(attrs))

    def __reduce__(self) -> tuple:
        return (Node, (self.op, self.name, self.inputs, self.outputs, dict(self.attrs),
                       self.domain))

    @property
    def qualified_op(self) -> str:
        """``domain.Op``."""
        return f"{self.domain}.{self.op}"

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the values this node defines."""
        return tuple(o.name for o in self.outputs)


@dataclass(frozen=True, eq=False)
class Graph:
    """A verified, immutable dataflow graph.

    ``nodes`` are in topological order; ``constants`` maps names to read-only
    arrays (initializers). Construction verifies the graph and raises
    :class:`~polyhal.errors.VerificationError` naming the first problem.
    """

    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    doc: str = ""

    def __post_init__(self) -> None:
        from polyhal.ir.verify import verify_graph

        if not isinstance(self.name, str):
            raise VerificationError(f"graph name must be a string, got {self.name!r}")
        for label in ("inputs", "outputs", "nodes"):
            if not isinstance(getattr(self, label), list | tuple):
                raise VerificationError(f"graph {self.name!r}: {label} must be a sequence")
        if not isinstance(self.constants, Mapping):
            raise VerificationError(f"graph {self.name!r}: constants must be a mapping")
        constants = {str(k): freeze_array(v, f"graph {self.name!r} constant {k!r}")
                     for k, v in self.constants.items()}
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "constants", types.MappingProxyType(constants))
        object.__setattr__(self, "_value_types", verify_graph(self))

    def __reduce__(self) -> tuple:
        return (_unpickled_graph, (self.name, self.inputs, self.outputs, self.nodes,
                                   dict(self.constants), self.doc, dict(self._value_types)))

    def value_type(self, name: str) -> TensorType:
        """The type of the value called ``name``."""
        try:
            return self._value_types[name]  # type: ignore[attr-defined]
        except KeyError:
            raise VerificationError(f"graph {self.name!r} has no value {name!r}") from None

    @property
    def value_types(self) -> Mapping[str, TensorType]:
        """Every value's type, by name."""
        return types.MappingProxyType(self._value_types)  # type: ignore[attr-defined]

    @cached_property
    def producers(self) -> Mapping[str, Node]:
        """The node that defines each node-output value."""
        return {o.name: n for n in self.nodes for o in n.outputs}

    @cached_property
    def consumers(self) -> Mapping[str, tuple[Node, ...]]:
        """The nodes that read each value."""
        result: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(i for i in node.inputs if i):
                result.setdefault(name, []).append(node)
        return {k: tuple(v) for k, v in result.items()}

    def __str__(self) -> str:
        from polyhal.ir.printer import format_graph

        return format_graph(self)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.inputs)} inputs, {len(self.outputs)} outputs, "
                f"{len(self.nodes)} nodes, {len(self.constants)} constants)")


def _unpickled_graph(name: str, inputs: tuple[Value, ...], outputs: tuple[Value, ...],
                     nodes: tuple[Node, ...], constants: dict[str, np.ndarray], doc: str,
                     value_types: dict[str, TensorType]) -> Graph:
    """A graph from its pickle, not verified again: it was verified when it was made,
    and pickles only carry graphs between polyhal's own processes (an isolated
    device's worker, a grading process), where unpickling is trusted anyway (a pickle
    can run any code). Verifying again took longer than the rest of a small case's
    compile in a worker."""
    graph = object.__new__(Graph)
    for array in constants.values():
        array.flags.writeable = False  # fresh from the pickle: no one else holds it
    for label, value in (("name", name), ("inputs", inputs), ("outputs", outputs),
                         ("nodes", nodes), ("constants", types.MappingProxyType(constants)),
                         ("doc", doc), ("_value_types", value_types)):
        object.__setattr__(graph, label, value)
    return graph
