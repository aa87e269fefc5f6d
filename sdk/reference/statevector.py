"""The quantum domain's specification: a small numpy statevector simulator.

States are ``[B, 2**n]`` complex arrays in qiskit's little-endian order (bit
``q`` of the index is qubit ``q``), starting in ``|0...0>``. Each gate is
applied by contracting its matrix with the state's qubit axes. Expectations
are ``<psi|P|psi>`` summed over the observable's terms.

**Shots.** With ``shots = S``, every Pauli term of every observable of every
batch row is estimated on its own: the state is rotated into the term's
eigenbasis (``H`` for X, ``S^dagger H`` for Y), ``S`` outcomes are drawn from
the Born distribution with the caller's ``numpy.random.Generator`` (rows, then
observables, then terms, in order; the ops seed it with ``[seed, stream]``),
and the term's estimate is the mean eigenvalue (+1 or -1 by the parity of
the measured bits on its support).
Identity terms are exact. The estimate is unbiased with standard deviation at
most ``sum_k |c_k| sqrt(1 - <P_k>^2) / sqrt(S)``.

**Gradients.** The derivative of each expectation with respect to each gate
occurrence's angle follows from the parameter-shift rule of the gate's
generator (:mod:`polyhal.quantum.gates`), evaluated exactly or with shots as
above; the chain rule through the affine angle map gives the gradient with
respect to the circuit parameters.
"""

from __future__ import annotations

import numpy as np

from polyhal.quantum.circuit import Program
from polyhal.quantum.gates import generator
from polyhal.quantum.observables import Observable

_H = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
_SDG = np.diag([1, -1j])
_PAULI = {"X": np.array([[0, 1], [1, 0]], dtype=complex),
          "Y": np.array([[0, -1j], [1j, 0]]),
          "Z": np.diag([1.0, -1.0]).astype(complex)}
_TO_Z_BASIS = {"X": _H, "Y": _H @ _SDG}


def apply(state: np.ndarray, matrix: np.ndarray, qubits: tuple[int, ...], n: int) -> np.ndarray:
    """``matrix`` (``[d, d]`` or batched ``[B, d, d]``, little-endian over ``qubits``)
    applied to ``state`` ``[B, 2**n]``."""
    k = len(qubits)
    batch = state.shape[0]
    if batch == 0:
        return state
    tensor = state.reshape((batch,) + (2,) * n)
    # Axis 1 + (n - 1 - q) holds qubit q; the gate's local row/column bits are big-endian
    # over reversed(qubits).
    axes = [1 + (n - 1 - q) for q in reversed(qubits)]
    gate = matrix.reshape((*matrix.shape[:-2],) + (2,) * (2 * k))
    moved = np.moveaxis(tensor, axes, range(1, k + 1))
    flat = moved.reshape(batch, 2**k, -1)
    gate_flat = gate.reshape((*matrix.shape[:-2], 2**k, 2**k))
    result = (gate_flat @ flat).reshape(moved.shape)
    return np.moveaxis(result, range(1, k + 1), axes).reshape(batch, 2**n)


def simulate(program: Program, angles: np.ndarray) -> np.ndarray:
    """Final states ``[B, 2**n]`` for occurrence angles ``[B, n_occ]``."""
    n = program.num_qubits
    batch = angles.shape[0]
    state = np.zeros((batch, 2**n), dtype=complex)
    state[:, 0] = 1.0
    for op in program.operations:
        if op.matrix is not None:
            matrix = op.matrix
        else:
            matrix = generator(op.name).unitaries(angles[:, op.occurrence])
        state = apply(state, matrix, op.qubits, n)
    return state


def _pauli_applied(state: np.ndarray, label: str, n: int) -> np.ndarray:
    for position, letter in enumerate(label):
        if letter != "I":
            state = apply(state, _PAULI[letter], (n - 1 - position,), n)
    return state


def exact_expectations(states: np.ndarray, observables: list[Observable]) -> np.ndarray:
    """``<psi|O|psi>`` for each state and observable: ``[B, n_obs]``."""
    n = int(states.shape[1]).bit_length() - 1
    result = np.zeros((states.shape[0], len(observables)))
    for j, obs in enumerate(observables):
        for coefficient, label in obs.terms:
            value = np.einsum("bi,bi->b", states.conj(), _pauli_applied(states, label, n))
            result[:, j] += coefficient * value.real
    return result


def sampled_expectations(states: np.ndarray, observables: list[Observable], shots: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Shot estimates of ``<psi|O|psi>``, per the module docstring: ``[B, n_obs]``."""
    n = int(states.shape[1]).bit_length() - 1
    indices = np.arange(2**n)
    result = np.zeros((states.shape[0], len(observables)))
    for b in range(states.shape[0]):
        for j, obs in enumerate(observables):
            for coefficient, label in obs.terms:
                support = [n - 1 - p for p, letter in enumerate(label) if letter != "I"]
                if not support:
                    result[b, j] += coefficient
                    continue
                state = states[b:b + 1]
                for q in support:
                    letter = label[n - 1 - q]
                    if letter in _TO_Z_BASIS:
                        state = apply(state, _TO_Z_BASIS[letter], (q,), n)
                probabilities = np.abs(state[0]) ** 2
                counts = rng.multinomial(shots, probabilities / probabilities.sum())
                parity = np.zeros(2**n, dtype=np.int64)
                for q in support:
                    parity ^= (indices >> q) & 1
                eigenvalues = 1 - 2 * parity
                result[b, j] += coefficient * float(counts @ eigenvalues) / shots
    return result


def expectations(program: Program, observables: list[Observable], angles: np.ndarray,
                 shots: int | None = None, rng: np.random.Generator | None = None
                 ) -> np.ndarray:
    """Expectations ``[B, n_obs]``: exact when ``shots`` is ``None``, else sampled."""
    states = simulate(program, angles)
    if shots is None:
        return exact_expectations(states, observables)
    return sampled_expectations(states, observables, shots, rng or np.random.default_rng())


def angle_gradients(program: Program, observables: list[Observable], angles: np.ndarray,
                    shots: int | None = None, rng: np.random.Generator | None = None
                    ) -> np.ndarray:
    """``d E[b, j] / d angle[b, k]`` by the parameter-shift rule: ``[B, n_obs, n_occ]``."""
    batch, count = angles.shape
    result = np.zeros((batch, len(observables), count))
    for k in range(count):
        for coefficient, shift in generator(program.occurrence_gates[k]).rule.terms:
            shifted = angles.copy()
            shifted[:, k] += shift
            result[:, :, k] += coefficient * expectations(program, observables, shifted,
                                                          shots, rng)
    return result
