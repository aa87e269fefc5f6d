"""The circuits conformance runs through ``quantum.Expectation``.

Each is small (1 to 3 qubits) and together they touch every gate family the
op differentiates: Pauli rotations, phase gates, two-qubit rotations,
controlled rotations (four-term shift rule), fixed gates (including an
arbitrary unitary), a multi-parameter ``U`` gate, a reused parameter and an
affine angle expression. Observables mix single Paulis with weighted sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.quantum.ansatz import parameter


@dataclass(frozen=True)
class CircuitCase:
    """A circuit, its binding and observables."""

    name: str
    circuit: Any
    input_params: list[Any]
    weight_params: list[Any]
    observables: list[str]

    @property
    def num_inputs(self) -> int:
        """Input columns."""
        return len(self.input_params)

    @property
    def num_weights(self) -> int:
        """Weights."""
        return len(self.weight_params)


def one_qubit() -> CircuitCase:
    """RY(x) RZ(w0) RX(w1) on one qubit."""
    from qiskit import QuantumCircuit

    x, w0, w1 = parameter("x"), parameter("w0"), parameter("w1")
    qc = QuantumCircuit(1)
    qc.ry(x, 0)
    qc.rz(w0, 0)
    qc.rx(w1, 0)
    return CircuitCase("one_qubit", qc, [x], [w0, w1], ["Z", "X", "0.5*Y - 0.25*Z"])


def ansatz_2q() -> CircuitCase:
    """Angle encoding, one layer of RY/RZ and a CX (the hybrid models' shape)."""
    from polyhal.quantum.ansatz import angle_encoded_ansatz, z_observables

    qc, x, w = angle_encoded_ansatz(2, 1)
    return CircuitCase("ansatz_2q", qc, x, w, [*z_observables(2), "XX"])


def controlled_3q() -> CircuitCase:
    """Controlled rotations, a reused weight, an affine angle, U, RZZ, CP and a unitary."""
    from qiskit import QuantumCircuit

    a, b = parameter("a"), parameter("b")
    w = [parameter(f"w{i}") for i in range(5)]
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.ry(a, 1)
    qc.rx(b, 2)
    qc.crx(w[0], 0, 1)
    qc.cry(w[1], 1, 2)
    qc.crz(w[2], 2, 0)
    qc.rzz(w[3], 0, 2)
    qc.u(w[4], 2 * w[0] + 0.3, -b, 1)
    qc.cp(w[1], 1, 0)
    qc.unitary(np.array([[0, 1j], [1j, 0]]), [2])
    qc.rzx(0.5 * a + 0.1, 0, 1)  # the input a reused, scaled
    qc.ry(w[0], 2)  # w0 reused a third time
    return CircuitCase("controlled_3q", qc, [a, b], w,
                       ["IIZ", "ZZI", "0.5*XIX - 1.5*IYI + 0.25*ZZZ"])


CIRCUITS = {"one_qubit": one_qubit, "ansatz_2q": ansatz_2q, "controlled_3q": controlled_3q}
"""Name -> builder, smallest first."""
