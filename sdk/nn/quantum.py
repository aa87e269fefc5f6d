"""``QuantumLayer``: a parameterized circuit as a layer of an ordinary model.

The layer holds the circuit's weights as one :class:`~polyhal.nn.Parameter`
and emits a ``quantum.Expectation`` node: inputs ``[batch, n_in]`` bind the
circuit's input parameters column by column, the weights bind its weight
parameters in order, and the outputs are the observables' expectations
``[batch, n_obs]``. Training differentiates it like any layer (the gradient
is a ``quantum.ExpectationVJP`` node), and ``polyhal.compile`` or
``polyhal.train.fit`` with ``device="quantum", fallback="cpu"`` place the
circuit on the quantum device and everything else on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from polyhal.errors import VerificationError
from polyhal.ir.builder import Var
from polyhal.nn import checks
from polyhal.nn.init import uniform
from polyhal.nn.module import Module
from polyhal.nn.parameter import InitFunction, Parameter
from polyhal.ops import apply
from polyhal.ops.quantum import expectation_attrs, node_spec


class QuantumLayer(Module):
    """Expectations of ``circuit`` with ``input_params`` bound to the input columns and
    ``weight_params`` to this layer's ``weight`` (uniform in ``[0, 2 pi)`` by default).

    >>> from polyhal import nn
    >>> from polyhal.quantum.ansatz import angle_encoded_ansatz, z_observables
    >>> qc, x, w = angle_encoded_ansatz(4, 2)
    >>> nn.QuantumLayer(qc, z_observables(4), x, w)
    QuantumLayer(qubits=4, inputs=4, weights=16, observables=4, shots=None, dtype=float64)
    """

    def __init__(self, circuit: Any, observables: Sequence[Any], input_params: Sequence[Any],
                 weight_params: Sequence[Any], *, shots: int | None = None,
                 seed: int | None = None, grad_method: str = "auto",
                 weight_init: InitFunction | None = None, dtype: str = "float64") -> None:
        self.attrs = expectation_attrs(circuit, observables, input_params, weight_params,
                                       shots=shots, seed=seed, grad_method=grad_method)
        spec = node_spec(self.attrs)  # checks the circuit, binding and observables now
        self.num_qubits = spec.program.num_qubits
        self.in_features = spec.binding.num_inputs
        self.out_features = len(spec.observables)
        self.shots = shots
        self.dtype = checks.float_dtype(dtype, "QuantumLayer")
        self.weight = Parameter((spec.binding.num_weights,),
                                weight_init or uniform(0.0, 2 * math.pi), dtype=self.dtype)

    def forward(self, x: Var) -> Var:
        """``x [batch, n_in] -> [batch, n_obs]``."""
        checks.graph_value(x)
        checks.matching_dtype(x, self.dtype)
        if x.type.rank != 2:
            raise VerificationError(f"QuantumLayer: input {x.type} must be [batch, "
                                    f"{self.in_features}]")
        return apply("Expectation", x, self.weight, domain="quantum", **self.attrs)

    def extra_repr(self) -> str:
        return (f"qubits={self.num_qubits}, inputs={self.in_features}, "
                f"weights={self.weight.shape[0]}, observables={self.out_features}, "
                f"shots={self.shots}, dtype={self.dtype.value}")
