"""Fast CPU kernels: drop-in replacements for the reference kernels of the hot ops.

Every kernel has its reference kernel's calling convention,
``kernel(*inputs, **attrs) -> array | tuple`` (inputs ``None`` where an
optional input is absent, every attribute given, float16/bfloat16 inputs
already converted to float32, results in the computed dtype) and agrees with
it within the conformance tolerances on every dtype, attribute combination and
edge case (NaN, inf, empty tensors); it never writes its inputs.

- :mod:`.conv`: Conv (im2col through strided views + one matmul per group and
  cache-sized tile; depthwise by broadcast multiply-adds), and the plan's 2-D
  lowering (shifted GEMMs or im2col, channels-last);
- :mod:`.pool`: MaxPool, AveragePool (strided views over cache-sized blocks of
  planes), GlobalAveragePool, GlobalMaxPool;
- :mod:`.norm`: Softmax, LogSoftmax, LayerNormalization (bit-for-bit the
  reference on contiguous input), BatchNormalization (inference and
  training), LRN;
- :mod:`.linalg`: MatMul, Gemm (BLAS without materialized transposes);
- :mod:`.quant`: ``quant.Requantize`` in int64 arithmetic.

The plan's own lowerings (not kernels of this calling convention) live here
too: :mod:`.direct_conv` (register-blocked 2-D Conv) and :mod:`.packed_gemm`
(products of a few rows by constant weights packed once), both micro-kernels
emitted as LLVM IR (:mod:`.simd`) and split between threads (:mod:`.crew`).

:data:`FAST_KERNELS` maps qualified op names to them. :data:`FIRST_OUTPUT_KERNELS`
holds cheaper variants that return only the first output, for nodes that do not
use the others (MaxPool without Indices: no second pass over the windows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polyhal.adapters.cpu.kernels import conv, linalg, norm, pool, quant

Kernel = Callable[..., Any]

FAST_KERNELS: dict[str, Kernel] = {
    "core.Conv": conv.conv,
    "core.MaxPool": pool.max_pool,
    "core.AveragePool": pool.average_pool,
    "core.GlobalAveragePool": pool.global_average_pool,
    "core.GlobalMaxPool": pool.global_max_pool,
    "core.Softmax": norm.softmax,
    "core.LogSoftmax": norm.log_softmax,
    "core.LayerNormalization": norm.layer_norm,
    "core.BatchNormalization": norm.batch_norm,
    "core.LRN": norm.lrn,
    "core.MatMul": linalg.matmul,
    "core.Gemm": linalg.gemm,
    "quant.Requantize": quant.requantize,
}
"""Qualified op name -> fast kernel."""

FIRST_OUTPUT_KERNELS: dict[str, Kernel] = {
    "core.MaxPool": pool.max_pool_values,
}
"""Qualified op name -> a kernel returning only the op's first output (a single
array), for nodes whose other outputs are absent."""

__all__ = ["FAST_KERNELS", "FIRST_OUTPUT_KERNELS", "Kernel"]
