"""What a device declares it can do.

The conformance suite generates cases from a device's :class:`Capabilities`
alone, and the runtime places nodes by them, so a claim is a promise: an
``UnsupportedError`` on a claimed case is a conformance failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Integral
from types import MappingProxyType

from polyhal.errors import AdapterContractError
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Node
from polyhal.ir.types import TensorType

PRECISIONS = frozenset({"fp32", "tf32", "fp16", "bf16"})
"""Precision modes ``compile(..., precision=...)`` may ask for."""


def _qualify(op: str) -> str:
    return op if "." in op else f"core.{op}"


def _strings(field_name: str, value: object) -> frozenset[str]:
    """``value`` (a collection of strings) as a frozenset, or an AdapterContractError."""
    items = None if isinstance(value, str) or not isinstance(value, Iterable) else tuple(value)
    if items is None or not all(isinstance(item, str) for item in items):
        raise AdapterContractError(f"Capabilities.{field_name}={value!r} must be a collection "
                                   "of strings")
    return frozenset(items)


def _integer(field_name: str, value: object, low: int, high: int | None,
             expected: str) -> int:
    """``value`` as an int within ``[low, high]``, or an AdapterContractError."""
    if (isinstance(value, bool) or not isinstance(value, Integral) or value < low
            or (high is not None and value > high)):
        raise AdapterContractError(f"Capabilities.{field_name}={value!r} must be {expected}")
    return int(value)


@dataclass(frozen=True)
class Capabilities:
    """The ops, dtypes and features a device supports.

    >>> caps = Capabilities(ops={"Add": ["float32"], "core.Relu": [DType.FLOAT32]})
    >>> caps.supports("core.Add", DType.FLOAT32)
    True
    """

    ops: Mapping[str, frozenset[DType]]
    """Claimed ops by qualified name (``"core.Add"``; a bare name means ``core``), each
    with the dtypes it handles. A node is covered when every dtype it binds to a type
    variable of the op is claimed (type variables that admit one dtype only, such as
    int64 shape inputs, need no claim)."""
    dynamic_shapes: bool = False
    """True when ``compile`` accepts symbolic dimensions; otherwise the runtime
    specializes each graph to concrete shapes before compiling."""
    precisions: frozenset[str] = frozenset({"fp32"})
    """Precision modes ``compile`` honours: a subset of ``fp32, tf32, fp16, bf16``."""
    memory_bytes: int | None = None
    """Device memory available to buffers, if known."""
    max_rank: int = 8
    """Largest tensor rank the device handles."""
    tags: frozenset[str] = field(default_factory=frozenset)
    """Free-form features, e.g. ``training``, ``async``, ``quantized``; ``sparse-2:4``
    (2:4 structured-sparse MatMul units) adds conformance level L4-sparse."""

    def __post_init__(self) -> None:
        from polyhal.ops.registry import lookup

        if not isinstance(self.ops, Mapping):
            raise AdapterContractError("Capabilities.ops must map op names to dtype sets")
        ops: dict[str, frozenset[DType]] = {}
        for raw_name, dtypes in self.ops.items():
            name = _qualify(str(raw_name))
            domain, _, op_name = name.partition(".")
            op = lookup(op_name, domain)
            if op is None:
                raise AdapterContractError(f"Capabilities.ops: unknown op {name!r}")
            if isinstance(dtypes, str | DType) or not isinstance(dtypes, Iterable):
                raise AdapterContractError(f"Capabilities.ops[{name!r}]: expected a collection "
                                           f"of dtypes, got {dtypes!r}")
            parsed = frozenset(DType.parse(d, f"Capabilities.ops[{name!r}]") for d in dtypes)
            allowed = frozenset().union(*op.type_vars.values())
            extra = parsed - allowed
            if extra:
                raise AdapterContractError(
                    f"Capabilities.ops[{name!r}]: {name} does not admit "
                    f"{', '.join(sorted(d.value for d in extra))}")
            ops[name] = parsed
        object.__setattr__(self, "ops", MappingProxyType(ops))
        precisions = _strings("precisions", self.precisions)
        if not precisions <= PRECISIONS or "fp32" not in precisions:
            raise AdapterContractError(f"Capabilities.precisions: {sorted(precisions)} must "
                                       f"include fp32 and lie within {sorted(PRECISIONS)}")
        object.__setattr__(self, "precisions", precisions)
        object.__setattr__(self, "tags", _strings("tags", self.tags))
        if not isinstance(self.dynamic_shapes, bool):
            raise AdapterContractError(f"Capabilities.dynamic_shapes={self.dynamic_shapes!r} "
                                       "must be True or False")
        if self.memory_bytes is not None:
            object.__setattr__(self, "memory_bytes", _integer(
                "memory_bytes", self.memory_bytes, 1, None, "a positive integer or None"))
        object.__setattr__(self, "max_rank", _integer("max_rank", self.max_rank, 0, 64,
                                                      "an integer in [0, 64]"))

    def __reduce__(self) -> tuple:
        return (Capabilities, (dict(self.ops), self.dynamic_shapes, self.precisions,
                               self.memory_bytes, self.max_rank, self.tags))

    def supports(self, op: str, dtype: DType) -> bool:
        """True when ``op`` is claimed for ``dtype``."""
        return dtype in self.ops.get(_qualify(op), frozenset())

    def uncovered_reason(self, node: Node, input_types: Iterable[TensorType | None],
                         output_types: Iterable[TensorType]) -> str | None:
        """Why ``node`` is not covered, or ``None`` when the device covers it."""
        from polyhal.ops.registry import get_op

        name = node.qualified_op
        claimed = self.ops.get(name)
        if claimed is None:
            return f"{name} is not claimed"
        op = get_op(node.op, node.domain)
        typed = [(op.input_spec(i), t) for i, t in enumerate(input_types)]
        typed += [(op.output_spec(i), t) for i, t in enumerate(output_types)]
        for spec, t in typed:
            if t is None or len(op.type_vars[spec.type_var]) == 1:
                continue
            if t.dtype not in claimed:
                return f"{name} is not claimed for {t.dtype.value} ({spec.name})"
            if t.rank > self.max_rank:
                return f"{name}: rank {t.rank} exceeds max_rank {self.max_rank}"
        return None

    @property
    def claimed_ops(self) -> list[str]:
        """Claimed op names, sorted."""
        return sorted(self.ops)
