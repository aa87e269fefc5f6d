"""A batched statevector engine: exact forward passes and adjoint differentiation.

States are ``[B, 2**n]`` (qiskit's little-endian order). Fixed gates use
qiskit's own matrices (carried by the unrolled program), table gates the
matrices of their generators (:mod:`polyhal.quantum.gates`, each checked
against qiskit's in the tests), batched over the rows. Observables are applied
as Pauli strings: a bit-flip permutation and a phase per basis state.

Adjoint differentiation (Jones and Gacon, 2020) computes every angle's
derivative of ``sum_o c[b, o] <O_o>`` in one backward sweep: with
``phi = psi`` and ``lam = (sum_o c[b, o] O_o) psi``, for each gate from last to
first, ``d/d theta_k = 2 Re <lam| -i H_k |phi>``, then ``phi`` and ``lam`` are
un-applied (``U_k^dagger``). Three gate applications per gate, whatever the
number of parameters and observables.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from polyhal.quantum.circuit import Program
from polyhal.quantum.gates import generator
from polyhal.quantum.observables import Observable


def apply(state: np.ndarray, matrix: np.ndarray, qubits: tuple[int, ...], n: int) -> np.ndarray:
    """``matrix`` (``[d, d]`` or ``[B, d, d]``, little-endian over ``qubits``) on ``state``."""
    batch = state.shape[0]
    if len(qubits) == 1:
        (q,) = qubits
        view = state.reshape(batch, 1 << (n - 1 - q), 2, 1 << q)
        if matrix.ndim == 2:
            out = np.einsum("ij,bhjl->bhil", matrix, view)
        else:
            out = np.einsum("bij,bhjl->bhil", matrix, view)
        return out.reshape(batch, -1)
    k = len(qubits)
    tensor = state.reshape((batch,) + (2,) * n)
    axes = [1 + (n - 1 - q) for q in reversed(qubits)]
    moved = np.moveaxis(tensor, axes, range(1, k + 1)).reshape(batch, 1 << k, -1)
    result = matrix @ moved
    shape = (batch,) + (2,) * k + tuple(tensor.shape[i] for i in range(1, n + 1)
                                          if i not in axes)
    return np.moveaxis(result.reshape(shape), range(1, k + 1), axes).reshape(batch, -1)


@dataclass(frozen=True, eq=False)
class PauliTerms:
    """Every Pauli term of a list of observables, as permutations and phases."""

    coefficients: np.ndarray
    """``[n_obs, n_terms]``: each observable's coefficient of each term."""
    permutations: np.ndarray
    """``[n_terms, 2**n]``: ``(P psi)[i] = phase[i] * psi[perm[i]]``."""
    phases: np.ndarray
    """``[n_terms, 2**n]``."""

    @classmethod
    def of(cls, observables: list[Observable], n: int) -> PauliTerms:
        """The terms of ``observables`` on ``n`` qubits (shared terms computed once)."""
        labels = sorted({label for obs in observables for _, label in obs.terms})
        index = {label: i for i, label in enumerate(labels)}
        coefficients = np.zeros((len(observables), len(labels)))
        for o, obs in enumerate(observables):
            for c, label in obs.terms:
                coefficients[o, index[label]] += c
        basis = np.arange(1 << n)
        permutations = np.empty((len(labels), 1 << n), dtype=np.intp)
        phases = np.empty((len(labels), 1 << n), dtype=complex)
        for t, label in enumerate(labels):
            flip = sum(1 << (n - 1 - p) for p, c in enumerate(label) if c in "XY")
            source = basis ^ flip
            phase = np.ones(1 << n, dtype=complex)
            for p, letter in enumerate(label):
                bit = (source >> (n - 1 - p)) & 1  # the bit P acts on, before the flip
                if letter == "Z":
                    phase *= 1 - 2 * bit
                elif letter == "Y":  # Y|0> = i|1>, Y|1> = -i|0>
                    phase *= np.where(bit == 0, 1j, -1j)
            permutations[t], phases[t] = source, phase
        return cls(coefficients, permutations, phases)

    def values(self, states: np.ndarray) -> np.ndarray:
        """``<psi|P_t|psi>`` for each state and term: ``[B, n_terms]``."""
        applied = self.phases[None] * states[:, self.permutations]
        return np.einsum("bi,bti->bt", states.conj(), applied).real

    def combination(self, states: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """``(sum_t weights[b, t] P_t) psi_b`` for each row: ``[B, 2**n]``."""
        applied = self.phases[None] * states[:, self.permutations]
        return np.einsum("bt,bti->bi", weights, applied)


@dataclass(frozen=True, eq=False)
class StatevectorEngine:
    """Exact expectations and their adjoint gradients for one program and its observables."""

    program: Program
    observables: list[Observable]

    @cached_property
    def terms(self) -> PauliTerms:
        """The observables' Pauli terms."""
        return PauliTerms.of(self.observables, self.program.num_qubits)

    def _matrices(self, angles: np.ndarray) -> list[np.ndarray]:
        return [op.matrix if op.matrix is not None
                else generator(op.name).unitaries(angles[:, op.occurrence])
                for op in self.program.operations]

    def _forward(self, matrices: list[np.ndarray], batch: int) -> np.ndarray:
        n = self.program.num_qubits
        state = np.zeros((batch, 1 << n), dtype=complex)
        state[:, 0] = 1.0
        for op, matrix in zip(self.program.operations, matrices, strict=True):
            state = apply(state, matrix, op.qubits, n)
        return state

    def expectations(self, angles: np.ndarray) -> np.ndarray:
        """``[B, n_obs]`` exact expectations for occurrence angles ``[B, n_occ]``."""
        if angles.shape[0] == 0:
            return np.zeros((0, len(self.observables)))
        state = self._forward(self._matrices(angles), angles.shape[0])
        return self.terms.values(state) @ self.terms.coefficients.T

    def angle_vjp(self, angles: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
        """``sum_o cotangent[b, o] dE[b, o] / d angle[b, k]``: ``[B, n_occ]``, by adjoint."""
        batch, n = angles.shape[0], self.program.num_qubits
        grads = np.zeros((batch, self.program.num_occurrences))
        if batch == 0 or not self.program.num_occurrences:
            return grads
        matrices = self._matrices(angles)
        phi = self._forward(matrices, batch)
        lam = self.terms.combination(phi, cotangent @ self.terms.coefficients)
        for op, matrix in zip(reversed(self.program.operations), reversed(matrices),
                              strict=True):
            if op.occurrence is not None:
                h = generator(op.name).matrix
                grads[:, op.occurrence] = 2 * np.einsum(
                    "bi,bi->b", lam.conj(), apply(phi, -1j * h, op.qubits, n)).real
            inverse = np.conj(np.swapaxes(matrix, -1, -2))
            phi = apply(phi, inverse, op.qubits, n)
            lam = apply(lam, inverse, op.qubits, n)
        return grads
