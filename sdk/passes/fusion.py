"""Fusion rules shared by the adapters, written as declarative rewrites."""

from __future__ import annotations

import numpy as np

from polyhal.ir import dims as D
from polyhal.passes.rewrite import Computed, Match, P, R, Rule, V


def _bias_fits_gemm(match: Match) -> bool:
    """``x @ w + b`` is a Gemm when x and w are matrices and b broadcasts to the result."""
    x, w, b = match.type("x"), match.type("w"), match.type("b")
    if x.rank != 2 or w.rank != 2 or b.rank > 2:
        return False
    n = w.shape[1]
    return b.rank == 0 or (b.rank == 1 and D.dims_equal(b.shape[0], n)) or (
        b.rank == 2 and b.shape[0] == 1 and D.dims_equal(b.shape[1], n))


MATMUL_ADD_TO_GEMM = Rule(
    "matmul-add-to-gemm",
    source=P("Add", P("MatMul", V("x"), V("w")), V("b")),
    constraints=(_bias_fits_gemm,),
    result=R("Gemm", "x", "w", "b"),
)
"""``Add(MatMul(x, w), b)`` -> ``Gemm(x, w, b)`` for matrices."""


def _bn_params(match: Match) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel scale and shift of a BatchNormalization, in float64."""
    eps = match.attrs("bn")["epsilon"]
    scale, shift, mean, var = (match.const(n).astype(np.float64)  # type: ignore[union-attr]
                               for n in ("scale", "shift", "mean", "var"))
    factor = scale / np.sqrt(var + eps)
    return factor, shift - mean * factor


def _folded_weight(match: Match) -> np.ndarray:
    w = match.const("w")
    factor, _ = _bn_params(match)
    shape = (-1,) + (1,) * (w.ndim - 1)  # type: ignore[union-attr]
    return (w.astype(np.float64) * factor.reshape(shape)).astype(w.dtype)  # type: ignore[union-attr]


def _folded_bias(match: Match) -> np.ndarray:
    w = match.const("w")
    factor, shift = _bn_params(match)
    bias = match.const("bias") if "bias" in match.values else np.zeros(1)
    bias = bias.astype(np.float64)  # type: ignore[union-attr]
    return (bias * factor + shift).astype(w.dtype)  # type: ignore[union-attr]


def _bn_is_inference_on_constants(match: Match) -> bool:
    attrs = match.attrs("bn")
    return attrs.get("training_mode", 0) == 0 and len(match.nodes["bn"].outputs) == 1


_BN_PARAMS = (V("scale", const=True), V("shift", const=True), V("mean", const=True),
              V("var", const=True))

CONV_BATCHNORM_FOLD = Rule(
    "conv-batchnorm-fold",
    source=P("BatchNormalization", P("Conv", V("x"), V("w", const=True), name="conv"),
             *_BN_PARAMS, name="bn"),
    constraints=(_bn_is_inference_on_constants,),
    result=R("Conv", "x", Computed(_folded_weight), Computed(_folded_bias), attrs_of="conv"),
)
"""``BatchNormalization(Conv(x, w))`` with constant parameters -> one Conv."""

CONV_BIAS_BATCHNORM_FOLD = Rule(
    "conv-bias-batchnorm-fold",
    source=P("BatchNormalization", P("Conv", V("x"), V("w", const=True), V("bias", const=True),
                                     name="conv"), *_BN_PARAMS, name="bn"),
    constraints=(_bn_is_inference_on_constants,),
    result=R("Conv", "x", Computed(_folded_weight), Computed(_folded_bias), attrs_of="conv"),
)
"""The same with a Conv bias."""

FUSION_RULES = (CONV_BIAS_BATCHNORM_FOLD, CONV_BATCHNORM_FOLD, MATMUL_ADD_TO_GEMM)
"""Every shared fusion rule, most specific first."""
