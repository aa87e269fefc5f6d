"""Conformance under a compile precision mode (``polyhal conformance --precision MODE``).

Every ``compile`` of the run asks for the mode, and every case with a float32
output that compares a graph with the reference is graded at the mode's tolerance
(:func:`~polyhal.conformance.tolerances.precision_tolerance`; a model's is
``MODEL_SCALE`` times MatMul's) when that is looser than its own. Cases of
other dtypes are unchanged: a mode changes how float32 computes. In fp16 and
bf16 float32 ``special`` cases do not apply (16 bits cannot hold float32's
extremes), nor in tf32 those of MatMul, Gemm and Conv (TF32 rounds float32's
largest values to infinity). The levels
are L0-L2: L3's gradient checks and L5's repeatability carry tolerances of
their own, set for fp32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from polyhal.conformance.cases import Case
from polyhal.conformance.tolerances import MODEL_SCALE, Tolerance, precision_tolerance
from polyhal.errors import ConformanceError
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import Buffer, CompileOptions, Device, Executable
from polyhal.ir.graph import Graph

PRECISION_LEVELS = ("L0", "L1", "L2")
"""The levels a run in a precision mode other than fp32 grades."""


class PrecisionDevice(Device):
    """A device whose every compile asks for ``precision``."""

    def __init__(self, inner: Device, precision: str) -> None:
        self.inner = inner
        self.adapter = inner.adapter
        self.index = inner.index
        self.precision = precision

    @property
    def address(self) -> str:
        return self.inner.address

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def upload(self, array: np.ndarray) -> Buffer:
        return self.inner.upload(array)

    def download(self, buffer: Buffer) -> np.ndarray:
        return self.inner.download(buffer)

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return self.inner.compile(graph, dataclasses.replace(options, precision=self.precision))

    def close(self) -> None:
        self.inner.close()


def check_precision(precision: str, levels: Sequence[str], caps: Capabilities,
                    adapter: str) -> None:
    """Raise :class:`ConformanceError` unless a run of ``levels`` in ``precision`` can be
    graded on a device with ``caps``."""
    if precision == "fp32":
        return
    if precision not in caps.precisions:
        raise ConformanceError(f"{adapter} does not offer precision {precision!r} "
                               f"(Capabilities.precisions: {', '.join(sorted(caps.precisions))})")
    others = [lv for lv in levels if lv not in PRECISION_LEVELS]
    if others:
        raise ConformanceError(f"precision {precision!r} grades levels "
                               f"{', '.join(PRECISION_LEVELS)} only, not {', '.join(others)}")


def _looser(a: Tolerance, b: Tolerance) -> Tolerance:
    return Tolerance(max(a.atol, b.atol), max(a.rtol, b.rtol))


SIXTEEN_BIT = ("fp16", "bf16")
"""Modes that store float32 values in 16 bits."""
TF32_OPS = ("core.MatMul", "core.Gemm", "core.Conv")
"""The ops whose float32 operands ``tf32`` rounds."""


def graded_in(case: Case, precision: str) -> Case:
    """``case`` with its tolerance for ``precision`` when it has a float32 output
    (unchanged in fp32 and for cases that grade themselves). A float32 ``special``
    case does not apply in a 16-bit mode, nor to a TF32 op in ``tf32``: its float32
    extremes (+-3.4e38) lie outside the storage, or round to infinity."""
    if (precision == "fp32" or case.tolerance is None or case.check is not None
            or not any(e.dtype == np.float32 for e in case.expected)):
        return case
    if case.dtype == "float32" and case.shape_class == "special" and (
            precision in SIXTEEN_BIT or case.op in TF32_OPS):
        return dataclasses.replace(case, not_applicable=(
            f"precision {precision}: the float32 extremes of 'special' (+-3.4e38) are "
            "outside its storage or round to infinity"))
    if case.level == "L2":
        base = precision_tolerance("core.MatMul", precision)
        mode = Tolerance(base.atol * MODEL_SCALE, base.rtol * MODEL_SCALE)
    else:
        mode = precision_tolerance(case.op, precision)
    return dataclasses.replace(case, tolerance=_looser(case.tolerance, mode))
