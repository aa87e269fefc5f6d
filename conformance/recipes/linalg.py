"""Recipes of MatMul and Gemm.

MatMul walks numpy.matmul's cases: vector . vector, matrix products, batched
products with equal and broadcast batch dims, a 1-D operand on either side.
Gemm walks transA/transB, alpha/beta and the shapes of C (absent, rank 0,
(N,), (M, 1), (M, N)). 16-bit floats use [-1, 1] so sums stay comparable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample, recipe
from polyhal.conformance.recipes.generic import declare, has_specials, moderate, specials
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef


def _data(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator,
          special: bool) -> np.ndarray:
    return specials(dtype, shape, rng) if special else moderate(dtype, shape, rng)


@recipe("core.MatMul")
def matmul(op: OpDef, dtype: DType, shape_class: str,
           rng: np.random.Generator) -> OpSample | None:
    """numpy.matmul cases by class; ``symbolic`` has a batched A and a 1-D B."""
    m, k, n = (int(v) for v in rng.integers(2, 5, size=3))
    plans: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
        "rank1": ((k,), (k,)),
        "rank2": ((m, k), (k, n)),
        "rank3": ((2, m, k), (2, k, n)),
        "rank4": ((2, 1, m, k), (2, 1, k, n)),
        "rank5": ((1, 2, 1, 2, k), (2, 1, 2, k, 2)),
        "broadcast": ((2, 1, m, k), (3, k, n)),
        "empty": ((0, k), (k, n)),
        "symbolic": ((int(rng.integers(2, 4)), m, k), (k,)),
        "special": ((m, k), (k, n)),
    }
    if shape_class not in plans or (shape_class == "special" and not has_specials(dtype)):
        return None
    a_shape, b_shape = plans[shape_class]
    special = shape_class == "special"
    sample = OpSample([_data(dtype, a_shape, rng, special), _data(dtype, b_shape, rng, special)])
    if shape_class == "symbolic":
        declare(sample)
    return sample


def _scalars(dtype: DType, alpha: float, beta: float) -> dict[str, Any]:
    """alpha/beta attributes; integer dtypes need whole numbers."""
    if dtype.is_int:
        alpha, beta = float(round(alpha * 2)), float(round(beta * 2))
    attrs: dict[str, Any] = {}
    if alpha != 1.0:
        attrs["alpha"] = alpha
    if beta != 1.0:
        attrs["beta"] = beta
    return attrs


@recipe("core.Gemm")
def gemm(op: OpDef, dtype: DType, shape_class: str,
         rng: np.random.Generator) -> OpSample | None:
    """Y = alpha * A' @ B' + beta * C over transA/transB and the shapes of C."""
    m, k, n = (int(v) for v in rng.integers(2, 5, size=3))
    # class -> (transA, transB, C shape or None, alpha, beta)
    plans: dict[str, tuple[int, int, tuple[int, ...] | None, float, float]] = {
        "scalar": (1, 0, (), 0.5, 2.0),
        "rank1": (0, 1, (n,), 1.0, 1.0),
        "rank2": (1, 1, (m, n), 1.5, -0.5),
        "broadcast": (0, 0, (m, 1), 1.0, 0.5),
        "empty": (0, 1, (1, n), 2.0, 1.0),
        "symbolic": (0, 0, None, 1.0, 1.0),
        "special": (0, 0, (m, n), 1.0, 0.0),
    }
    if shape_class not in plans or (shape_class == "special" and not has_specials(dtype)):
        return None
    trans_a, trans_b, c_shape, alpha, beta = plans[shape_class]
    if shape_class == "empty":
        m = 0
    if shape_class == "symbolic":
        m = int(rng.integers(2, 5))
    special = shape_class == "special"
    a = _data(dtype, (k, m) if trans_a else (m, k), rng, special)
    b = _data(dtype, (n, k) if trans_b else (k, n), rng, special)
    inputs: list[np.ndarray | None] = [a, b]
    if c_shape is not None:
        inputs.append(_data(dtype, c_shape, rng, special))
    attrs = _scalars(dtype, alpha, beta)
    if trans_a:
        attrs["transA"] = 1
    if trans_b:
        attrs["transB"] = 1
    sample = OpSample(inputs, attrs)
    if shape_class == "symbolic":
        declare(sample)
    return sample
