"""Checking gradient graphs against finite differences.

:func:`check_gradients` compares the vjp of a graph (run on the reference
executor) with a fourth-order central difference of the forward graph, element
by element. An element whose difference quotient changes with the step (a
kink, a tie or a discontinuity within reach of the stencil), or whose input's
dtype cannot hold the shifted values (the spacing of a bfloat16 near 1 is wider
than the step), cannot be checked numerically: it is counted as ``rough``, not
compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from polyhal.autodiff.reverse import check_differentiable
from polyhal.errors import IRError
from polyhal.ir.dtypes import FLOAT_TYPES
from polyhal.ir.graph import Graph
from polyhal.reference import ReferenceExecutor


@dataclass(frozen=True)
class Mismatch:
    """One element whose gradient disagrees with finite differences."""

    input: str
    index: tuple[int, ...]
    analytic: float
    numeric: float

    def __str__(self) -> str:
        return (f"d/d{self.input}{list(self.index)}: graph {self.analytic:.12g}, "
                f"finite differences {self.numeric:.12g}")


@dataclass
class GradientCheck:
    """The outcome of :func:`check_gradients`."""

    checked: int = 0
    """Elements compared."""
    rough: int = 0
    """Elements where the function is not smooth enough, or the input's dtype too coarse,
    to compare."""
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every compared element agreed."""
        return not self.mismatches

    def __str__(self) -> str:
        head = (f"{self.checked} elements checked, {self.rough} not smooth, "
                f"{len(self.mismatches)} mismatched")
        return "\n".join([head, *map(str, self.mismatches[:10])])


def _stencil(loss: object, base: Mapping[str, np.ndarray], name: str,
             index: tuple[int, ...], step: float) -> float | None:
    """Fourth-order central difference of ``loss`` along one element; ``None`` where the
    input's dtype cannot hold the shifted values (a bfloat16 near 1 rounds a step of
    1e-3 away: the difference would be 0, whatever the gradient)."""
    values = []
    origin = float(base[name][index])
    for offset in (-2, -1, 1, 2):
        shifted = dict(base)
        array = base[name].copy()
        array[index] += offset * step
        if abs(float(array[index]) - origin - offset * step) > 0.01 * step:
            return None
        shifted[name] = array
        values.append(loss(shifted))  # type: ignore[operator]
    low2, low1, high1, high2 = values
    return (low2 - 8 * low1 + 8 * high1 - high2) / (12 * step)


def check_gradients(graph: Graph, inputs: Mapping[str, np.ndarray],
                    wrt: Sequence[str] | None = None, of: Sequence[str] | None = None, *,
                    rtol: float = 1e-6, atol: float = 1e-9, max_elements: int = 16,
                    step: float = 1e-3, seed: int = 0) -> GradientCheck:
    """Compare ``graph``'s vjp with finite differences at ``inputs`` (float64 advised).

    The scalar differentiated is ``sum over outputs o of sum(c_o * o)`` with fixed
    random cotangents ``c_o``, so every Jacobian entry counts. At most
    ``max_elements`` elements of each input in ``wrt`` (default: every float
    input) are checked, chosen at random from ``seed``; an element agrees when
    ``|analytic - numeric| <= atol + rtol * |numeric|``.
    """
    from polyhal.autodiff import vjp

    if not isinstance(graph, Graph):
        raise IRError(f"check_gradients: expected a Graph, got {type(graph).__name__}")
    if not isinstance(inputs, Mapping):
        raise IRError(f"check_gradients: inputs must map input names to arrays, got a "
                      f"{type(inputs).__name__}")
    rng = np.random.default_rng(seed)
    names = list(wrt) if wrt is not None else [
        v.name for v in graph.inputs if v.type.dtype in FLOAT_TYPES]
    check_differentiable(graph, names, "input")
    outputs = list(of) if of is not None else [
        v.name for v in graph.outputs if v.type.dtype in FLOAT_TYPES]
    check_differentiable(graph, outputs, "output")
    forward = ReferenceExecutor(graph)
    base = {k: np.asarray(v) for k, v in inputs.items()}
    first = forward(**base)
    cotangents = {o: rng.standard_normal(first[o].shape).astype(first[o].dtype)
                  for o in outputs}

    def loss(values: Mapping[str, np.ndarray]) -> float:
        out = forward(**values)
        return float(sum(np.sum(cotangents[o].astype(np.float64) * out[o].astype(np.float64))
                         for o in outputs))

    gradient_graph = vjp(graph, wrt=names, of=outputs)
    feeds = dict(base)
    cotangent_inputs = [v.name for v in gradient_graph.inputs if v.name not in base]
    for name, o in zip(cotangent_inputs, outputs, strict=True):
        feeds[name] = cotangents[o]
    got = ReferenceExecutor(gradient_graph)(**feeds)
    grad_outputs = [v.name for v in gradient_graph.outputs][len(graph.outputs):]
    report = GradientCheck()
    for name, grad_name in zip(names, grad_outputs, strict=True):
        analytic = np.asarray(got[grad_name], dtype=np.float64)
        size = base[name].size
        chosen = rng.choice(size, size=min(size, max_elements), replace=False)
        for flat in np.sort(chosen):
            index = tuple(int(i) for i in np.unravel_index(flat, base[name].shape))
            scale = max(1.0, abs(float(base[name][index])))
            coarse = _stencil(loss, base, name, index, step * scale)
            fine = _stencil(loss, base, name, index, step * scale / 2)
            if coarse is None or fine is None or abs(coarse - fine) > atol + rtol * abs(fine):
                report.rough += 1
                continue
            report.checked += 1
            if abs(analytic[index] - fine) > atol + rtol * abs(fine):
                report.mismatches.append(Mismatch(name, index, float(analytic[index]), fine))
    return report
