"""Ready-made circuits: angle encoding followed by layers of rotations and entanglers."""

from __future__ import annotations

import uuid
from typing import Any

from polyhal.quantum.circuit import require_qiskit

_NAMESPACE = uuid.UUID("6f1c3d2e-9a4b-5c7d-8e0f-1a2b3c4d5e6f")


def parameter(name: str) -> Any:
    """A qiskit ``Parameter`` whose identity follows from its name alone, so that a circuit
    built twice serializes to the same QPY text (graphs, hashes and caches stay stable)."""
    require_qiskit()
    from qiskit.circuit import Parameter

    return Parameter(name, uuid=uuid.uuid5(_NAMESPACE, name))


def angle_encoded_ansatz(num_qubits: int, layers: int, *, entangler: str = "cx_ring"
                         ) -> tuple[Any, list[Any], list[Any]]:
    """``RY(x_i)`` on qubit ``i``, then ``layers`` x [``RY(w)`` on each qubit, ``RZ(w)`` on
    each qubit, an entangler]; returns ``(circuit, input_params, weight_params)``.

    ``entangler`` is ``"cx_ring"`` (``CX(i, i+1 mod n)`` for every ``i``; one ``CX`` for
    two qubits, none for one) or ``"none"``. Weights are ordered layer by layer, the
    ``RY`` angles of the qubits, then their ``RZ`` angles: ``2 * num_qubits * layers`` in
    all, named ``w0..`` (zero-padded, so name order is weight order) after the inputs
    ``x0..``.
    """
    qiskit = require_qiskit()
    if not (isinstance(num_qubits, int) and num_qubits >= 1):
        raise ValueError(f"num_qubits={num_qubits!r} must be a positive integer")
    if not (isinstance(layers, int) and layers >= 0):
        raise ValueError(f"layers={layers!r} must be a non-negative integer")
    if entangler not in ("cx_ring", "none"):
        raise ValueError(f"entangler={entangler!r} must be 'cx_ring' or 'none'")
    count = 2 * num_qubits * layers
    x = [parameter(f"x{i:0{len(str(num_qubits - 1))}d}") for i in range(num_qubits)]
    w = [parameter(f"w{i:0{len(str(max(count - 1, 0)))}d}") for i in range(count)]
    circuit = qiskit.QuantumCircuit(num_qubits)
    for i in range(num_qubits):
        circuit.ry(x[i], i)
    for layer in range(layers):
        base = 2 * num_qubits * layer
        for i in range(num_qubits):
            circuit.ry(w[base + i], i)
        for i in range(num_qubits):
            circuit.rz(w[base + num_qubits + i], i)
        if entangler == "cx_ring" and num_qubits > 1:
            pairs = [(0, 1)] if num_qubits == 2 else [(i, (i + 1) % num_qubits)
                                                      for i in range(num_qubits)]
            for a, b in pairs:
                circuit.cx(a, b)
    return circuit, x, w


def z_observables(num_qubits: int) -> list[str]:
    """``Z`` on each qubit, qubit 0 first (``"IIIZ"``, ``"IIZI"``, ... for four qubits)."""
    return ["I" * (num_qubits - 1 - i) + "Z" + "I" * i for i in range(num_qubits)]
