"""Observables of ``quantum.Expectation``: real sums of Pauli strings, as text.

One observable is a sum of terms, each an optional real coefficient, ``*``
and a Pauli label over ``I X Y Z``, with ``+`` or ``-`` between terms
(``"ZI + 0.5*IX"``, ``"-1.5*YY"``, ``"2*II"`` for a constant). Labels follow
qiskit's ``SparsePauliOp``: one letter per qubit, the **rightmost letter is
qubit 0**, and every label has exactly as many letters as the circuit has
qubits. :func:`observable_text` converts a qiskit ``SparsePauliOp`` (or a
label, or ``(label, coefficient)`` pairs) into this form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from polyhal.errors import IRError

_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_TERM = re.compile(rf"\s*([+-]?)\s*(?:({_NUMBER})\s*\*\s*)?([IXYZ]+)\s*")


@dataclass(frozen=True)
class Observable:
    """``sum_k coefficient_k * P_k``; labels little-endian (rightmost = qubit 0)."""

    terms: tuple[tuple[float, str], ...]

    @property
    def num_qubits(self) -> int:
        """Letters per label."""
        return len(self.terms[0][1])


def parse_observable(text: str, where: str = "observable") -> Observable:
    """Parse one observable; an :class:`IRError` naming ``where`` and the bad text."""
    if not isinstance(text, str) or not text.strip():
        raise IRError(f"{where}: expected a Pauli sum such as 'ZI + 0.5*XX', got {text!r}")
    terms: list[tuple[float, str]] = []
    position = 0
    while position < len(text):
        match = _TERM.match(text, position)
        if match is None or match.end() == position or (terms and not match.group(1)):
            raise IRError(f"{where}: cannot parse {text!r} at character {position} "
                          "(terms look like '0.5*XZ', joined by + or -)")
        sign = -1.0 if match.group(1) == "-" else 1.0
        coefficient = sign * float(match.group(2) or 1.0)
        if not math.isfinite(coefficient):
            raise IRError(f"{where}: coefficient of {match.group(3)} is not finite")
        terms.append((coefficient, match.group(3)))
        position = match.end()
    widths = {len(label) for _, label in terms}
    if len(widths) != 1:
        raise IRError(f"{where}: Pauli labels of {text!r} have different lengths "
                      f"{sorted(widths)}")
    return Observable(tuple(terms))


def observable_text(observable: Any) -> str:
    """The text form of a qiskit ``SparsePauliOp``, a Pauli label, or
    ``(label, coefficient)`` pairs; coefficients must be real."""
    if isinstance(observable, str):
        parse_observable(observable)
        return observable
    if hasattr(observable, "to_list"):
        pairs: Iterable[tuple[str, Any]] = observable.to_list()
    else:
        pairs = observable
    parts = []
    for label, coefficient in pairs:
        value = complex(coefficient)
        if abs(value.imag) > 1e-12:
            raise IRError(f"observable: coefficient {coefficient} of {label} is not real "
                          "(an expectation needs a Hermitian observable)")
        if not isinstance(label, str) or not label or set(label) - set("IXYZ"):
            raise IRError(f"observable: {label!r} is not a Pauli label over I, X, Y, Z")
        sign = "-" if value.real < 0 else "+"
        parts.append(f"{sign} {abs(value.real)!r}*{label}")
    if not parts:
        raise IRError("observable: has no terms")
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def check_observables(texts: Sequence[str], num_qubits: int) -> list[Observable]:
    """Every observable parsed and checked against the circuit's qubit count."""
    if not texts:
        raise IRError("attribute observables: expected at least one observable")
    parsed = []
    for i, text in enumerate(texts):
        obs = parse_observable(text, f"observables[{i}]")
        if obs.num_qubits != num_qubits:
            raise IRError(f"observables[{i}] {text!r} acts on {obs.num_qubits} qubits, but the "
                          f"circuit has {num_qubits}")
        parsed.append(obs)
    return parsed
