"""How close a device's result must be to the reference's.

One table, versioned: a report records ``TOLERANCE_VERSION`` so that two
reports can be compared. Integers and bools are exact; floats allow
``|actual - expected| <= atol + rtol * |expected|`` elementwise, with NaN
matching NaN and infinities matching exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.graph import Graph

TOLERANCE_VERSION = "3"
"""3: a float64 model (L2) with LayerNormalization is graded at float32's tolerance."""


@dataclass(frozen=True)
class Tolerance:
    """Allowed error: ``atol + rtol * |expected|`` (both 0: exact)."""

    atol: float = 0.0
    rtol: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The report's ``tolerance`` object."""
        return asdict(self)


BY_DTYPE: dict[DType, Tolerance] = {
    DType.FLOAT64: Tolerance(atol=1e-12, rtol=1e-9),
    DType.FLOAT32: Tolerance(atol=1e-5, rtol=1e-5),
    DType.FLOAT16: Tolerance(atol=2e-3, rtol=2e-3),
    DType.BFLOAT16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}
"""Per-dtype tolerances for one rounding step plus accumulation-order differences."""

LOOSER_OPS = {"core.MatMul", "core.Gemm", "core.Conv", "core.ConvTranspose", "core.ReduceSum",
              "core.ReduceMean", "core.ReduceProd", "core.Softmax", "core.LogSoftmax",
              "core.LayerNormalization", "core.BatchNormalization", "core.LRN",
              "core.AveragePool", "core.GlobalAveragePool", "core.Pow", "core.Erf", "core.Gelu",
              "core.Mean", "core.Sum", "core.ScatterElements", "core.ScatterND"}
"""Ops whose results depend on summation order or on a transcendental
approximation: tolerances are scaled by ``LOOSER_SCALE``."""

LOOSER_SCALE = 4.0


COMPUTED_IN_FLOAT32 = {"core.LayerNormalization"}
"""Ops whose specification computes float64 inputs in float32 (LayerNormalization's
``stash_type`` = 1): their float64 results carry float32 error."""


def with_float32_stash(graph: Graph, dtypes: set[DType]) -> set[DType]:
    """``dtypes``, plus float32 when one is float64 and ``graph`` has an op the
    specification computes in float32 (``COMPUTED_IN_FLOAT32``): such a graph's float64
    results carry float32 rounding that depends on summation order."""
    if DType.FLOAT64 in dtypes and any(n.qualified_op in COMPUTED_IN_FLOAT32
                                       for n in graph.nodes):
        return dtypes | {DType.FLOAT32}
    return dtypes


def tolerance_for(op: str | None, dtypes: Sequence[DType]) -> Tolerance:
    """The tolerance of a case whose outputs have ``dtypes``."""
    if op in COMPUTED_IN_FLOAT32:
        dtypes = [DType.FLOAT32 if d is DType.FLOAT64 else d for d in dtypes]
    floats = [BY_DTYPE[d] for d in dtypes if d in BY_DTYPE]
    if not floats:
        return Tolerance()
    atol = max(t.atol for t in floats)
    rtol = max(t.rtol for t in floats)
    scale = LOOSER_SCALE if op in LOOSER_OPS else 1.0
    return Tolerance(atol * scale, rtol * scale)


PRECISION_TOLERANCES: dict[str, Tolerance] = {
    "fp32": BY_DTYPE[DType.FLOAT32],
    "tf32": Tolerance(atol=1e-3, rtol=1e-3),
    "fp16": BY_DTYPE[DType.FLOAT16],
    "bf16": BY_DTYPE[DType.BFLOAT16],
}
"""What a float32 result may carry under each ``compile(..., precision=)`` mode, before
``LOOSER_SCALE``: ``tf32`` rounds MatMul/Gemm/Conv operands to a 10-bit mantissa (unit
roundoff 2^-11) and accumulates in float32; ``fp16`` and ``bf16`` store every float32
value in 16 bits and accumulate in float32, so they get those dtypes' tolerances."""


def precision_tolerance(op: str | None, precision: str) -> Tolerance:
    """The tolerance of a float32 result of ``op`` computed under ``precision``."""
    base = PRECISION_TOLERANCES[precision]
    scale = LOOSER_SCALE if op in LOOSER_OPS else 1.0
    return Tolerance(base.atol * scale, base.rtol * scale)


MODEL_SCALE = 10.0
"""Whole models (L2) accumulate error over layers: 10x one MatMul's tolerance."""

GRADIENT_SCALE = 4.0
"""A gradient graph (L3) is a short chain of ops per forward op (a rule's
products and differences, sums over broadcast axes, scatters), each rounding
once: an op's gradient gets this multiple of the loosest forward tolerance of
its graph. A model's gradient gets the model tolerance (``MODEL_SCALE`` already
allows for a long chain of ops)."""


def gradient_tolerance(graph: Graph, model: bool = False) -> Tolerance:
    """The tolerance of a gradient graph (L3).

    The loosest forward tolerance over the dtypes of every value the graph
    computes (a float64 gradient that rounds through float32 gets float32's)
    and over its ops (``LOOSER_SCALE`` when any is in ``LOOSER_OPS``), times ``GRADIENT_SCALE``;
    for a ``model``'s gradient (or a training step), MatMul's tolerance times
    ``MODEL_SCALE``, as for the model itself in L2.
    """
    ops = {node.qualified_op for node in graph.nodes}
    dtypes = with_float32_stash(graph, {v.type.dtype for node in graph.nodes
                                        for v in node.outputs} | {v.type.dtype
                                                                  for v in graph.outputs})
    floats = [BY_DTYPE[d] for d in dtypes & FLOAT_TYPES]
    if not floats:
        return Tolerance()
    if model:
        scale = LOOSER_SCALE * MODEL_SCALE
    else:
        scale = (LOOSER_SCALE if ops & LOOSER_OPS else 1.0) * GRADIENT_SCALE
    return Tolerance(max(t.atol for t in floats) * scale, max(t.rtol for t in floats) * scale)


@dataclass(frozen=True)
class Comparison:
    """How one actual output compares with the expected one."""

    ok: bool
    max_abs_err: float
    max_rel_err: float
    message: str = ""


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> Comparison:
    """Compare one output elementwise under ``tol``."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return Comparison(False, float("inf"), float("inf"),
                          f"got {actual.dtype}{list(actual.shape)}, expected "
                          f"{expected.dtype}{list(expected.shape)}")
    if actual.size == 0:
        return Comparison(True, 0.0, 0.0)
    if not np.issubdtype(np.dtype(expected.dtype), np.inexact) and expected.dtype.kind in "biu":
        wrong = actual != expected
        count = int(wrong.sum())
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        err = float(diff.max())
        return Comparison(count == 0, err, 0.0 if count == 0 else float("inf"),
                          "" if count == 0 else f"{count} of {actual.size} elements differ")
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    nan_mismatch = np.isnan(a) != np.isnan(e)
    inf_mismatch = (np.isinf(e) | np.isinf(a)) & (a != e) & ~np.isnan(e)
    finite = np.isfinite(a) & np.isfinite(e)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(a - e), 0.0)
    rel = np.where(finite & (e != 0), diff / np.where(e == 0, 1, np.abs(e)), 0.0)
    bad = nan_mismatch | inf_mismatch | (diff > tol.atol + tol.rtol * np.abs(np.where(finite, e,
                                                                                      0)))
    count = int(bad.sum())
    max_abs = float(diff.max()) if (~nan_mismatch & ~inf_mismatch).any() else 0.0
    if nan_mismatch.any() or inf_mismatch.any():
        max_abs = float("inf")
    message = "" if count == 0 else (
        f"{count} of {actual.size} elements outside atol={tol.atol:g} rtol={tol.rtol:g}"
        + (f" ({int(nan_mismatch.sum())} NaN mismatches)" if nan_mismatch.any() else ""))
    return Comparison(count == 0, max_abs, float(rel.max()), message)
