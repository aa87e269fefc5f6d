"""Random circuits for the quantum tests: every table gate family, controlled rotations,
fixed gates, reused parameters and affine angle expressions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ONE_QUBIT = ("rx", "ry", "rz", "p")
TWO_QUBIT = ("crx", "cry", "crz", "cp", "rxx", "ryy", "rzz", "rzx")
FIXED = ("h", "sx", "t", "cx", "cz", "swap")


@dataclass(frozen=True)
class RandomCircuit:
    """A circuit, its input and weight parameters (in binding order) and observables."""

    circuit: Any
    inputs: list[Any]
    weights: list[Any]
    observables: list[str]


def random_circuit(seed: int, num_qubits: int = 3, gates: int = 14) -> RandomCircuit:
    """A seeded circuit of ``gates`` gates on ``num_qubits`` qubits; each parameterized
    gate takes a parameter (reused ones included) or an affine expression of two."""
    from qiskit import QuantumCircuit

    from polyhal.quantum.ansatz import parameter

    rng = np.random.default_rng(seed)
    inputs = [parameter(f"x{i}") for i in range(2)]
    weights = [parameter(f"w{i}") for i in range(4)]
    pool = inputs + weights
    qc = QuantumCircuit(num_qubits)
    for q in range(num_qubits):
        qc.h(q)
    for _ in range(gates):
        kind = rng.choice(["one", "two", "fixed"], p=[0.4, 0.4, 0.2])
        a, b = (int(v) for v in rng.choice(num_qubits, 2, replace=False))
        if kind == "fixed":
            name = str(rng.choice(FIXED))
            getattr(qc, name)(*([a, b] if name in ("cx", "cz", "swap") else [a]))
            continue
        first, second = (pool[int(i)] for i in rng.choice(len(pool), 2, replace=False))
        angle = first if rng.random() < 0.6 else float(rng.uniform(0.5, 2)) * first - second
        name = str(rng.choice(ONE_QUBIT if kind == "one" else TWO_QUBIT))
        getattr(qc, name)(angle, *([a] if kind == "one" else [a, b]))
    # every parameter appears at least once
    for q, p in enumerate(pool):
        qc.ry(p, q % num_qubits)
    letters = "IXYZ"
    observables = ["Z" + "I" * (num_qubits - 1),
                   "0.5*" + "".join(letters[int(i)] for i in rng.integers(1, 4, num_qubits))
                   + " - 1.5*" + "I" * (num_qubits - 1) + "X"]
    return RandomCircuit(qc, inputs, weights, observables)
