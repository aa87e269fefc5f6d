"""Circuits of ``quantum.Expectation``: serialization and the unrolled program.

A circuit travels in the IR as QPY (qiskit's binary circuit format, which
stores data, never code), base64-encoded, in the node's ``circuit`` attribute.
:func:`program` unrolls it into a :class:`Program`: a flat list of operations
on qubit indices, each either a fixed unitary (a parameter-free gate, its
matrix from qiskit) or a table gate of :mod:`polyhal.quantum.gates` whose angle
is an affine function of the circuit's parameters,
``angle = offset + sum_p coefficient_p * p``. Gates outside the table are
unrolled through their qiskit definitions; a gate parameter that is not affine
in the circuit parameters (``sin(a)``, ``a * b``) is rejected, since neither
parameter-shift nor the chain rule here could differentiate it.

Every parameterized gate is one *occurrence* with its own angle, so a reused
parameter is shifted once per occurrence, and the occurrence circuit
(:meth:`Program.occurrence_circuit`) that the quantum adapter hands to qiskit's
primitives takes the angles themselves as parameters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock
from typing import Any

import numpy as np

from polyhal.errors import IRError, UnsupportedError
from polyhal.quantum.gates import is_parameterized_gate

MAX_QUBITS = 20
"""Largest circuit a ``quantum.Expectation`` node may carry (a 2**20 statevector)."""
MAX_OPERATIONS = 100_000
"""Largest unrolled circuit."""
_SKIPPED = frozenset({"barrier", "delay", "id", "global_phase"})
"""Instructions that do not change the state (up to a global phase)."""


def require_qiskit() -> Any:
    """The ``qiskit`` module; an :class:`UnsupportedError` naming the extra if absent."""
    try:
        import qiskit
    except ImportError as error:
        raise UnsupportedError("the quantum domain needs qiskit: "
                               "pip install 'polyhal[quantum]'") from error
    return qiskit


def dumps(circuit: Any) -> str:
    """``circuit`` (a ``qiskit.QuantumCircuit``) as base64 QPY text; the same circuit
    always gives the same text when its parameters do (see
    :func:`polyhal.quantum.ansatz.parameter`)."""
    qiskit = require_qiskit()
    if not isinstance(circuit, qiskit.QuantumCircuit):
        raise IRError(f"expected a qiskit QuantumCircuit, got {type(circuit).__name__}")
    if re.fullmatch(r"circuit-\d+", circuit.name):  # qiskit's counter: differs run to run
        circuit = circuit.copy(name="circuit")
    buffer = io.BytesIO()
    qiskit.qpy.dump(circuit, buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def to_qasm(circuit: Any) -> str:
    """Readable OpenQASM 3 text of ``circuit`` (for printing; never parsed back)."""
    qiskit = require_qiskit()
    try:
        return qiskit.qasm3.dumps(circuit)
    except Exception as error:  # qasm3 cannot express every circuit; QPY can
        return f"// OpenQASM 3 export failed: {error}"


MIN_QPY_VERSION = 13
"""The oldest QPY version read: versions 12 and older could encode parameter
expressions as sympy text, which qiskit before 1.4.2 evaluated with ``eval``
(CVE-2025-2000). Every qiskit polyhal supports (2.0 and newer) writes 13 or newer."""

_LOADED: OrderedDict[str, Any] = OrderedDict()
_PROGRAMS: OrderedDict[str, Program] = OrderedDict()
_CACHE_LOCK = Lock()
_CACHE_SIZE = 64


def _cached(cache: OrderedDict[str, Any], key: str, make: Any) -> Any:
    with _CACHE_LOCK:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = make()
    with _CACHE_LOCK:
        cache[key] = value
        if len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    return value


def digest(text: str) -> str:
    """A short stable hash of a circuit attribute (cache keys, printing)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def loads(text: str) -> Any:
    """The ``QuantumCircuit`` in base64 QPY ``text``; an :class:`IRError` if it fails to parse."""
    if not isinstance(text, str) or not text:
        raise IRError("circuit: expected base64 QPY text, got "
                      f"{type(text).__name__ if not isinstance(text, str) else 'an empty string'}")
    qiskit = require_qiskit()

    def load() -> Any:
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as error:
            raise IRError(f"circuit: not base64 text ({error})") from None
        if data[:6] == b"QISKIT" and len(data) > 6 and data[6] < MIN_QPY_VERSION:
            raise IRError(f"circuit: QPY version {data[6]} is older than {MIN_QPY_VERSION}; "
                          "older versions may hold expressions as sympy text, which some "
                          "qiskit releases evaluate as code, so polyhal does not read them")
        try:
            circuits = qiskit.qpy.load(io.BytesIO(data))
        except Exception as error:  # QPY raises many types on corrupt data
            raise IRError(f"circuit: not a readable QPY circuit ({type(error).__name__}: "
                          f"{error})") from None
        if len(circuits) != 1 or not isinstance(circuits[0], qiskit.QuantumCircuit):
            raise IRError(f"circuit: expected one QuantumCircuit in the QPY data, got "
                          f"{len(circuits)} object(s)")
        return circuits[0]

    return _cached(_LOADED, digest(text), load)


@dataclass(frozen=True, eq=False)
class Operation:
    """One unrolled gate on ``qubits`` (little-endian: ``qubits[0]`` is the local LSB)."""

    qubits: tuple[int, ...]
    name: str
    matrix: np.ndarray | None
    """The fixed unitary, or ``None`` for a table gate."""
    occurrence: int | None
    """Index of this gate's angle among the program's occurrences (table gates)."""
    source: Any
    """The qiskit gate (fixed gates), rebuilt as is into the occurrence circuit."""


@dataclass(frozen=True, eq=False)
class Program:
    """An unrolled circuit: operations, parameters and the affine angle map."""

    num_qubits: int
    operations: tuple[Operation, ...]
    parameters: tuple[str, ...]
    """Circuit parameter names, in the circuit's own (sorted) order."""
    offsets: np.ndarray
    """``[n_occurrences]`` constant part of each occurrence's angle."""
    coefficients: np.ndarray
    """``[n_parameters, n_occurrences]``: d angle / d parameter."""
    occurrence_gates: tuple[str, ...]
    """The table gate of each occurrence."""

    @property
    def num_occurrences(self) -> int:
        """Parameterized gates in the program."""
        return len(self.occurrence_gates)

    def angles(self, parameters: np.ndarray) -> np.ndarray:
        """Occurrence angles ``[..., n_occ]`` from parameter values ``[..., n_parameters]``."""
        return self.offsets + np.asarray(parameters, dtype=float) @ self.coefficients

    def occurrence_circuit(self) -> Any:
        """A qiskit circuit of the program whose parameters are the occurrence angles,
        named ``a00000, a00001, ...`` so that their sorted order is occurrence order."""
        qiskit = require_qiskit()
        from qiskit.circuit import Parameter
        from qiskit.circuit.library import get_standard_gate_name_mapping

        gates = get_standard_gate_name_mapping()
        circuit = qiskit.QuantumCircuit(self.num_qubits)
        for op in self.operations:
            if op.occurrence is None:
                circuit.append(op.source, list(op.qubits))
            else:
                gate = type(gates[op.name])(Parameter(f"a{op.occurrence:05d}"))
                circuit.append(gate, list(op.qubits))
        return circuit


def program(text: str) -> Program:
    """The unrolled :class:`Program` of the base64 QPY circuit ``text`` (cached)."""
    return _cached(_PROGRAMS, digest(text), lambda: _unroll(loads(text)))


def _unroll(circuit: Any) -> Program:
    from qiskit.circuit import Gate

    if circuit.num_qubits > MAX_QUBITS:
        raise IRError(f"circuit: {circuit.num_qubits} qubits exceed the limit of {MAX_QUBITS}")
    if circuit.num_qubits == 0:
        raise IRError("circuit: has no qubits")
    parameters = tuple(p.name for p in circuit.parameters)
    if len(set(parameters)) != len(parameters):
        raise IRError(f"circuit: parameter names repeat: {sorted(parameters)}")
    index = {name: i for i, name in enumerate(parameters)}
    operations: list[Operation] = []
    offsets: list[float] = []
    columns: list[np.ndarray] = []
    gates: list[str] = []

    def visit(op: Any, qubits: tuple[int, ...], where: str) -> None:
        if len(operations) >= MAX_OPERATIONS:
            raise IRError(f"circuit: more than {MAX_OPERATIONS} operations once unrolled")
        if op.name in _SKIPPED:
            return
        if not isinstance(op, Gate) or getattr(op, "condition", None) is not None:
            raise IRError(f"circuit: {where} is {op.name!r}, which is not a unitary gate "
                          "(measurements, resets and classical control have no expectation "
                          "semantics here)")
        free = [p for p in op.params if _is_expression(p) and p.parameters]
        if not free:
            try:
                matrix = np.asarray(op.to_matrix(), dtype=complex)
            except Exception:
                matrix = None
            if matrix is not None:
                operations.append(Operation(qubits, op.name, matrix, None, op))
                return
        elif (is_parameterized_gate(op.name) and len(op.params) == 1
              and getattr(op, "ctrl_state", 1) == 1):
            offset, column = _affine(op.params[0], index, where)
            operations.append(Operation(qubits, op.name, None, len(gates), op))
            offsets.append(offset)
            columns.append(column)
            gates.append(op.name)
            return
        if op.name == "u":  # qiskit's U has no definition: U = RZ(phi) RY(theta) RZ(lam)
            from qiskit.circuit.library import RYGate, RZGate

            theta, phi, lam = op.params
            for k, inner in enumerate((RZGate(lam), RYGate(theta), RZGate(phi))):
                visit(inner, qubits, f"{where}/{k} {inner.name}")
            return
        definition = op.definition
        if definition is None:
            raise IRError(f"circuit: {where} ({op.name!r}) has no matrix and no definition")
        for k, inner in enumerate(definition.data):
            local = tuple(qubits[definition.find_bit(q).index] for q in inner.qubits)
            visit(inner.operation, local, f"{where}/{k} {inner.operation.name}")

    for k, instruction in enumerate(circuit.data):
        qubits = tuple(circuit.find_bit(q).index for q in instruction.qubits)
        visit(instruction.operation, qubits, f"instruction {k} ({instruction.operation.name})")
    coefficients = (np.stack(columns, axis=1) if columns
                    else np.zeros((len(parameters), 0)))
    for op in operations:
        if op.matrix is not None:
            op.matrix.setflags(write=False)
    return Program(circuit.num_qubits, tuple(operations), parameters,
                   np.array(offsets, dtype=float), coefficients, tuple(gates))


def _is_expression(value: Any) -> bool:
    from qiskit.circuit import ParameterExpression

    return isinstance(value, ParameterExpression)


def _affine(expr: Any, index: dict[str, int], where: str) -> tuple[float, np.ndarray]:
    """``expr`` as ``offset + coefficients @ parameters``; an error unless affine."""
    column = np.zeros(len(index))
    for p in expr.parameters:
        slope = expr.gradient(p)
        if _is_expression(slope) and slope.parameters:
            raise IRError(f"circuit: {where}: the angle {expr} is not affine in the "
                          f"circuit parameters (d/d{p.name} = {slope})")
        column[index[p.name]] = _real(complex(slope), expr, where)
    offset = expr.bind({p: 0.0 for p in expr.parameters})
    return _real(complex(offset), expr, where), column


def _real(value: complex, expr: Any, where: str) -> float:
    if abs(value.imag) > 1e-12 or not np.isfinite(value.real):
        raise IRError(f"circuit: {where}: the angle {expr} is not a finite real function "
                      "of the parameters")
    return float(value.real)
