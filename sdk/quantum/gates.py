"""The parameterized gates polyhal differentiates, as generators.

Every parameterized gate of the table is ``U(theta) = exp(-i theta H)`` for a
fixed Hermitian generator ``H``, written in qiskit's little-endian order over
the gate's qubits (the first qubit of the instruction is the least significant
bit). From ``H`` follow its batched matrices, its derivative
``dU/dtheta = -i H U`` (adjoint differentiation) and its parameter-shift rule,
chosen from ``H``'s spectrum: eigenvalues one apart give the two-term rule,
those of a controlled rotation (``0, +-1/2``) the four-term rule. A test checks
every generator against qiskit's own gate matrix.

Gates outside the table are unrolled through their qiskit definitions until
every parameterized gate is in it (see :mod:`polyhal.quantum.circuit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

_I = np.eye(2, dtype=complex)
_X = np.array([[0, 1], [1, 0]], dtype=complex)
_Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
_Z = np.diag([1.0, -1.0]).astype(complex)
_ONE = np.diag([0.0, 1.0]).astype(complex)
"""``|1><1|``: the projector of a control qubit."""


def _on(target: np.ndarray, control: np.ndarray) -> np.ndarray:
    """A two-qubit operator: ``control`` on qubit 0 (LSB), ``target`` on qubit 1."""
    return np.kron(target, control)


@dataclass(frozen=True)
class ShiftRule:
    """``dE/dtheta = sum_k coefficient_k * E(theta + shift_k)``."""

    terms: tuple[tuple[float, float], ...]
    """(coefficient, shift) pairs."""


TWO_TERM = ShiftRule(((0.5, math.pi / 2), (-0.5, -math.pi / 2)))
"""For generators whose eigenvalues differ by 1 (Pauli rotations, phase gates)."""
_D_PLUS = (math.sqrt(2) + 1) / (4 * math.sqrt(2))
_D_MINUS = (math.sqrt(2) - 1) / (4 * math.sqrt(2))
FOUR_TERM = ShiftRule(((_D_PLUS, math.pi / 2), (-_D_PLUS, -math.pi / 2),
                       (-_D_MINUS, 3 * math.pi / 2), (_D_MINUS, -3 * math.pi / 2)))
"""For controlled rotations (eigenvalues 0 and +-1/2)."""


GENERATORS: dict[str, np.ndarray] = {
    "rx": _X / 2,
    "ry": _Y / 2,
    "rz": _Z / 2,
    "p": -_ONE,
    "rxx": np.kron(_X, _X) / 2,
    "ryy": np.kron(_Y, _Y) / 2,
    "rzz": np.kron(_Z, _Z) / 2,
    "rzx": np.kron(_X, _Z) / 2,
    "crx": _on(_X / 2, _ONE),
    "cry": _on(_Y / 2, _ONE),
    "crz": _on(_Z / 2, _ONE),
    "cp": -_on(_ONE, _ONE),
}
"""Gate name -> generator ``H`` with ``U(theta) = exp(-i theta H)``."""


@dataclass(frozen=True, eq=False)
class Generator:
    """A table gate's generator with its eigendecomposition and shift rule."""

    name: str
    matrix: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    rule: ShiftRule

    @property
    def num_qubits(self) -> int:
        """Qubits the gate acts on."""
        return int(self.matrix.shape[0]).bit_length() - 1

    def unitaries(self, angles: np.ndarray) -> np.ndarray:
        """``exp(-i theta H)`` for every angle: shape ``angles.shape + (d, d)``."""
        phases = np.exp(-1j * np.asarray(angles, dtype=float)[..., None] * self.eigenvalues)
        v = self.eigenvectors
        return np.einsum("ij,...j,kj->...ik", v, phases, v.conj())


def _rule(eigenvalues: np.ndarray) -> ShiftRule:
    gaps = {round(abs(a - b), 9) for a in eigenvalues for b in eigenvalues} - {0.0}
    if gaps == {1.0}:
        return TWO_TERM
    if gaps == {0.5, 1.0}:
        return FOUR_TERM
    raise AssertionError(f"no shift rule for the spectrum {eigenvalues}")


@cache
def generator(name: str) -> Generator:
    """The table entry for gate ``name`` (a key of :data:`GENERATORS`)."""
    h = GENERATORS[name]
    values, vectors = np.linalg.eigh(h)
    return Generator(name, h, values, vectors, _rule(values))


def is_parameterized_gate(name: str) -> bool:
    """True when ``name`` is a table gate (differentiable in its one angle)."""
    return name in GENERATORS
