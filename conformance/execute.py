"""Running one case's graph on a device, and grading what came back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyhal.conformance.tolerances import Comparison, Tolerance, compare
from polyhal.hal.checked import CheckedExecutable
from polyhal.hal.contract import CompileOptions, Device
from polyhal.ir.graph import Graph


def run_on_device(device: Device, graph: Graph, inputs: Sequence[np.ndarray],
                  options: CompileOptions | None = None) -> list[np.ndarray]:
    """Compile ``graph`` on ``device``, run it once on ``inputs``, download the outputs
    (a checked device's executable does the last three in one call, which an isolated
    device's worker answers in one reply)."""
    executable = device.compile(graph, options or CompileOptions())
    arrays = [np.asarray(a) for a in inputs]
    if isinstance(executable, CheckedExecutable):
        return executable.run_arrays(arrays)
    return [device.download(b) for b in executable.run([device.upload(a) for a in arrays])]


def grade(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
          tol: Tolerance) -> Comparison:
    """Compare every output; the worst error and every failing output's message."""
    if len(actual) != len(expected):
        return Comparison(False, float("inf"), float("inf"),
                          f"{len(actual)} outputs, expected {len(expected)}")
    results = [compare(a, e, tol) for a, e in zip(actual, expected, strict=True)]
    messages = [f"output {i}: {r.message}" for i, r in enumerate(results) if not r.ok]
    return Comparison(all(r.ok for r in results),
                      max((r.max_abs_err for r in results), default=0.0),
                      max((r.max_rel_err for r in results), default=0.0), "; ".join(messages))
