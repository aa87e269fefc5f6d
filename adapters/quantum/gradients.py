"""Which gradient method a node gets, and the shifted points of the shift methods.

``auto`` picks adjoint differentiation where the device computes exact
statevectors (no shots, no noise model, no backend), and the parameter-shift
rule otherwise: it is exact in expectation, needs only expectation values, so
it runs with shots and on real hardware. ``finite_diff`` (a fourth-order
central stencil) is the last resort, chosen only on request.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyhal.errors import UnsupportedError
from polyhal.quantum.circuit import Program
from polyhal.quantum.gates import generator

FD_STEP = 1e-2
"""Step of the finite-difference stencil (its error is about ``FD_STEP**4 / 30``)."""
_STENCIL = ((-2.0, 1.0 / 12), (-1.0, -8.0 / 12), (1.0, 8.0 / 12), (2.0, -1.0 / 12))


def resolve_method(requested: str, shots: int | None, exact_device: bool, where: str) -> str:
    """The method a node's gradient is computed with on this device."""
    if requested == "auto":
        return "adjoint" if shots is None and exact_device else "parameter_shift"
    if requested == "adjoint" and (shots is not None or not exact_device):
        why = f"shots={shots}" if shots is not None else "this device's estimator is not exact"
        raise UnsupportedError(f"{where}: grad_method='adjoint' needs exact statevector "
                               f"simulation ({why}); use parameter_shift")
    return requested


def points(program: Program, method: str) -> list[tuple[int, float, float]]:
    """``(occurrence, shift, coefficient)`` with ``dE/d angle_k = sum coefficient E(shifted)``."""
    result = []
    for k, gate in enumerate(program.occurrence_gates):
        if method == "parameter_shift":
            result.extend((k, shift, c) for c, shift in generator(gate).rule.terms)
        else:
            result.extend((k, step * FD_STEP, c / FD_STEP) for step, c in _STENCIL)
    return result


def shifted_vjp(evaluate: Callable[[np.ndarray], np.ndarray], program: Program,
                angles: np.ndarray, cotangent: np.ndarray, method: str) -> np.ndarray:
    """``[B, n_occ]`` angle VJP from every shifted point, evaluated in one call of
    ``evaluate`` (``[N, n_occ]`` angles -> ``[N, n_obs]`` expectations)."""
    batch, count = angles.shape
    shifts = points(program, method)
    if batch == 0 or not shifts:
        return np.zeros((batch, count))
    rows = np.repeat(angles[None], len(shifts), axis=0)
    for p, (k, shift, _) in enumerate(shifts):
        rows[p, :, k] += shift
    values = evaluate(rows.reshape(-1, count)).reshape(len(shifts), batch, -1)
    projected = np.einsum("pbo,bo->pb", values, cotangent)
    grads = np.zeros((batch, count))
    for p, (k, _, coefficient) in enumerate(shifts):
        grads[:, k] += coefficient * projected[p]
    return grads
