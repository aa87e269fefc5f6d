"""The op registry: the single source of truth for every op.

An :class:`OpDef` carries an op's schema (domain, name, inputs, outputs,
typed attributes with defaults, allowed dtypes), its type/shape inference,
its reference kernel and, for composite ops, its decomposition into
primitives. Conformance cases, the op reference in ``docs/ops.md``, ONNX
mapping and autodiff are all derived from the registry.

A kernel is a plain function of numpy arrays and keyword attributes::

    register(OpDef(
        name="Relu",
        inputs=(Input("X", "T"),),
        outputs=(Output("Y", "T"),),
        type_vars={"T": SIGNED_NUMERIC_TYPES},
        infer=same_as_input(0),
        kernel=lambda x: np.maximum(x, x.dtype.type(0)),
        doc="max(x, 0), elementwise.",
    ))
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polyhal.errors import IRError
from polyhal.ir.dtypes import DType

if TYPE_CHECKING:
    from polyhal.ops.infer import InferContext


class AttrKind(enum.Enum):
    """The type of an attribute value."""

    INT = "int"
    FLOAT = "float"
    STRING = "string"
    INTS = "ints"
    FLOATS = "floats"
    STRINGS = "strings"
    TENSOR = "tensor"
    DTYPE = "dtype"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of an attribute that every node must set."""


@dataclass(frozen=True)
class Attr:
    """An attribute: ``default`` is :data:`REQUIRED`, ``None`` (absent) or a value."""

    name: str
    kind: AttrKind
    default: Any = None
    doc: str = ""


@dataclass(frozen=True)
class Input:
    """A positional input; ``type_var`` names its dtype set in ``OpDef.type_vars``."""

    name: str
    type_var: str
    optional: bool = False
    variadic: bool = False
    doc: str = ""


@dataclass(frozen=True)
class Output:
    """A positional output; optional outputs may be left off a node."""

    name: str
    type_var: str
    optional: bool = False
    variadic: bool = False
    doc: str = ""


InferFn = Callable[["InferContext"], Any]
KernelFn = Callable[..., Any]


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything polyhal knows about one op."""

    name: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    type_vars: Mapping[str, frozenset[DType]]
    infer: InferFn
    kernel: KernelFn
    attrs: tuple[Attr, ...] = ()
    domain: str = "core"
    doc: str = ""
    decompose: Callable[..., Any] | None = None
    """``decompose(*inputs, **attrs)`` builds the op from primitives on builder values, or
    returns ``None`` when these attributes have no decomposition."""
    differentiable: bool = False
    onnx_since: int | None = None
    """The opset version of the ONNX op whose semantics this op follows."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def qualified_name(self) -> str:
        """``domain.Name``, as written in errors and docs."""
        return f"{self.domain}.{self.name}"

    @property
    def attr_specs(self) -> dict[str, Attr]:
        """Attributes by name."""
        return {a.name: a for a in self.attrs}

    @property
    def min_inputs(self) -> int:
        """Number of inputs a node must give."""
        return sum(1 for spec in self.inputs if not spec.optional)

    @property
    def max_inputs(self) -> int | None:
        """Largest number of inputs, or ``None`` when the last one is variadic."""
        if self.inputs and self.inputs[-1].variadic:
            return None
        return len(self.inputs)

    @property
    def min_outputs(self) -> int:
        """Number of outputs a node must have."""
        return sum(1 for o in self.outputs if not o.optional)

    @property
    def max_outputs(self) -> int | None:
        """Largest number of outputs, or ``None`` when the last one is variadic."""
        if self.outputs and self.outputs[-1].variadic:
            return None
        return len(self.outputs)

    def input_spec(self, index: int) -> Input:
        """The schema of positional input ``index`` (variadic tails repeat)."""
        return self.inputs[min(index, len(self.inputs) - 1)]

    def output_spec(self, index: int) -> Output:
        """The schema of positional output ``index`` (variadic tails repeat)."""
        return self.outputs[min(index, len(self.outputs) - 1)]

    def all_dtypes(self) -> frozenset[DType]:
        """Every dtype the op's first input accepts."""
        if not self.inputs:
            return frozenset()
        return self.type_vars[self.inputs[0].type_var]


_REGISTRY: dict[tuple[str, str], OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry; a second definition of the same op is an error."""
    key = (op.domain, op.name)
    if key in _REGISTRY:
        raise IRError(f"op {op.qualified_name} is registered twice")
    for spec in (*op.inputs, *op.outputs):
        if spec.type_var not in op.type_vars:
            raise IRError(f"op {op.qualified_name}: {spec.name} uses undeclared "
                          f"type variable {spec.type_var!r}")
    _REGISTRY[key] = op
    return op


def lookup(name: str, domain: str = "core") -> OpDef | None:
    """The op ``domain.name``, or ``None``."""
    return _REGISTRY.get((domain, name))


def get_op(name: str, domain: str = "core") -> OpDef:
    """The op ``domain.name``; an :class:`IRError` if it is unknown."""
    op = lookup(name, domain)
    if op is None:
        raise IRError(f"unknown op {domain}.{name}")
    return op


def all_ops(domain: str | None = None) -> list[OpDef]:
    """Registered ops (of one domain when given), sorted by qualified name."""
    ops = [op for (d, _), op in _REGISTRY.items() if domain in (None, d)]
    return sorted(ops, key=lambda op: (op.domain, op.name))


def domains() -> list[str]:
    """Every domain that has at least one op."""
    return sorted({d for d, _ in _REGISTRY})
