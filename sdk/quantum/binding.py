"""The explicit binding of circuit parameters to input columns and weights.

``quantum.Expectation`` never relies on parameter name order: its
``input_params`` attribute names the circuit parameter each input column binds
(column ``j`` binds ``input_params[j]``), ``weight_params`` the parameter each
weight binds. Every circuit parameter is bound exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyhal.errors import IRError
from polyhal.quantum.circuit import Program


@dataclass(frozen=True, eq=False)
class Binding:
    """Where each program parameter's value comes from."""

    program: Program
    input_params: tuple[str, ...]
    weight_params: tuple[str, ...]
    input_index: np.ndarray
    """Program parameter index of each input column."""
    weight_index: np.ndarray
    """Program parameter index of each weight."""

    @property
    def num_inputs(self) -> int:
        """Input columns."""
        return len(self.input_params)

    @property
    def num_weights(self) -> int:
        """Weights."""
        return len(self.weight_params)

    def parameters(self, inputs: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Parameter values ``[B, n_parameters]`` in program order."""
        values = np.zeros((inputs.shape[0], len(self.program.parameters)))
        values[:, self.input_index] = inputs
        values[:, self.weight_index] = weights
        return values

    def split(self, gradient: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A per-row gradient ``[B, n_parameters]`` as (inputs ``[B, n_in]``, weights ``[n_w]``)."""
        return gradient[:, self.input_index], gradient[:, self.weight_index].sum(axis=0)


def bind(program: Program, input_params: Sequence[str], weight_params: Sequence[str]
         ) -> Binding:
    """Check that every circuit parameter is bound exactly once, by name."""
    known = {name: i for i, name in enumerate(program.parameters)}
    seen: dict[str, str] = {}
    for attr, names in (("input_params", input_params), ("weight_params", weight_params)):
        for j, name in enumerate(names):
            if name not in known:
                listed = ", ".join(program.parameters) or "none"
                raise IRError(f"attribute {attr}[{j}]={name!r} is not a parameter of the "
                              f"circuit (its parameters: {listed})")
            if name in seen:
                raise IRError(f"circuit parameter {name!r} is bound twice ({seen[name]} and "
                              f"{attr}[{j}])")
            seen[name] = f"{attr}[{j}]"
    unbound = [name for name in program.parameters if name not in seen]
    if unbound:
        raise IRError(f"circuit parameter(s) {', '.join(unbound)} are bound to neither an input "
                      "column (input_params) nor a weight (weight_params)")
    return Binding(program, tuple(input_params), tuple(weight_params),
                   np.array([known[n] for n in input_params], dtype=np.intp),
                   np.array([known[n] for n in weight_params], dtype=np.intp))
