"""Recipes for the quantum domain: the conformance circuits, exact expectations.

Shape classes pick the circuit and batch: ``rank1`` one qubit and one row,
``rank2`` the two-qubit ansatz with 4 rows, ``rank3`` the three-qubit circuit
with controlled rotations and reused parameters, ``empty`` zero rows,
``symbolic`` a symbolic batch. There is no ``special`` sample: non-finite
angles are errors by definition. Shot statistics are L4-quantum's business.
"""

from __future__ import annotations

import numpy as np

from polyhal.conformance.quantum_circuits import CIRCUITS, CircuitCase
from polyhal.conformance.recipes.base import OpSample, recipe
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops.registry import OpDef

_CLASSES = {"rank1": ("one_qubit", 1), "rank2": ("ansatz_2q", 4),
            "rank3": ("controlled_3q", 3), "empty": ("ansatz_2q", 0),
            "symbolic": ("one_qubit", 3)}


def attrs_of(case: CircuitCase) -> dict:
    """The node attributes of ``case`` (exact mode)."""
    from polyhal.ops.quantum import expectation_attrs

    return expectation_attrs(case.circuit, case.observables, case.input_params,
                             case.weight_params)


def angles(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Angles in [-pi, pi]."""
    return rng.uniform(-np.pi, np.pi, shape).astype(dtype.numpy)


@recipe("quantum.Expectation", "quantum.ExpectationVJP")
def expectation(op: OpDef, dtype: DType, shape_class: str, rng: np.random.Generator
                ) -> OpSample | None:
    """A conformance circuit on random angles (and a random cotangent for the VJP)."""
    if shape_class not in _CLASSES:
        return None
    name, rows = _CLASSES[shape_class]
    case = CIRCUITS[name]()
    inputs = [angles(dtype, (rows, case.num_inputs), rng), angles(dtype, (case.num_weights,), rng)]
    if op.name == "ExpectationVJP":
        inputs.append(rng.uniform(-1, 1, (rows, len(case.observables))).astype(dtype.numpy))
    declared = {}
    if shape_class == "symbolic":
        declared = {0: TensorType(dtype, ("batch", case.num_inputs))}
        if op.name == "ExpectationVJP":
            declared[2] = TensorType(dtype, ("batch", len(case.observables)))
    return OpSample(inputs, attrs_of(case), input_types=declared)
