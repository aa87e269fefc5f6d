"""Quantum circuits in the IR: serialization, the unrolled program, observables and the
explicit parameter binding of ``quantum.Expectation`` (see :mod:`polyhal.ops.quantum`)."""

from polyhal.quantum.binding import Binding, bind
from polyhal.quantum.circuit import MAX_QUBITS, Operation, Program, dumps, loads, program, to_qasm
from polyhal.quantum.observables import Observable, observable_text, parse_observable

__all__ = ["MAX_QUBITS", "Binding", "Observable", "Operation", "Program", "bind", "dumps",
           "loads", "observable_text", "parse_observable", "program", "to_qasm"]
