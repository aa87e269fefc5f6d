"""L4-sparse: MatMul on 2:4 structured-sparse weights, for devices with sparse units.

Cases exist for a device whose capabilities carry the tag ``sparse-2:4``
(:data:`TAG`) and that claims ``core.MatMul`` in a float dtype; one set per
claimed float dtype. Every weight is a graph constant made 2:4 sparse by
:func:`polyhal.passes.prune_2_4`, the form a sparse unit compresses when it
compiles, and each case is graded against the reference executor running
the same pruned graph at MatMul's tolerance:

* ``L4-sparse/MatMul/<dtype>/<shape>``: ``x @ W`` for M x K x N of 1x4x1,
  5x8x3, 16x64x24 and a batched 2x3x16x8 input, K = 0 excluded (no groups);
* ``L4-sparse/MatMul/<dtype>/all-zero`` and ``.../dense-pairs``: a weight with
  no non-zero, and one with exactly two per group, the least and the most a
  compressed weight stores;
* ``L4-sparse/mlp/<dtype>/two-layer``: MatMul -> Add -> Relu -> MatMul with
  both weights pruned by the pass, run through placement with the reference
  as fallback for what the device does not claim (its MatMul nodes must run
  on the device).

Operands come from ``[seed, crc32(case id)]``, the profile's first seed (the
``full`` profile adds one more variant per further seed, ``-N`` appended).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.levels.l2 import hybrid_case
from polyhal.conformance.profiles import Profile
from polyhal.conformance.tolerances import tolerance_for
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.builder import GraphBuilder
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.passes.sparsity import prune_2_4

LEVEL = "L4-sparse"
TAG = "sparse-2:4"
"""The capability tag of a device with 2:4 sparse MatMul units."""
MATMUL = "core.MatMul"
SHAPES = {"1x4x1": ((1, 4), 1), "5x8x3": ((5, 8), 3), "16x64x24": ((16, 64), 24),
          "batched-2x3x16x8": ((2, 3, 16), 8)}
"""Case name -> (x shape, N); K is the last axis of x."""


def dtypes(caps: Capabilities) -> list[DType]:
    """The float dtypes in which L4-sparse grades ``caps`` (none without :data:`TAG`)."""
    if TAG not in caps.tags:
        return []
    return sorted((d for d in caps.ops.get(MATMUL, ()) if d in FLOAT_TYPES),
                  key=lambda d: d.value)


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L4-sparse cases of a device with ``caps``."""
    for dtype in dtypes(caps):
        for index, seed in enumerate(profile.seeds[:1] if profile.name == "ci"
                                     else profile.seeds):
            suffix = f"-{index}" if index else ""
            for name in [*SHAPES, "all-zero", "dense-pairs"]:
                case_id = f"{LEVEL}/MatMul/{dtype.value}/{name}{suffix}"
                graph, inputs = _matmul(case_id, name, dtype, seed)
                yield _case(case_id, MATMUL, dtype, name, graph, inputs)
            case_id = f"{LEVEL}/mlp/{dtype.value}/two-layer{suffix}"
            graph, inputs = _mlp(case_id, dtype, seed)
            yield hybrid_case(caps, _case(case_id, "mlp", dtype, "two-layer", graph, inputs),
                              required=[MATMUL])


def _rng(case_id: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(case_id.encode())])


def _case(case_id: str, op: str, dtype: DType, variant: str, graph: Graph,
          inputs: list[np.ndarray]) -> Case:
    return Case(case_id, LEVEL, op, dtype.value, variant, graph=graph, inputs=inputs,
                expected=reference_outputs(graph, inputs),
                tolerance=tolerance_for(MATMUL, [dtype]))


def _matmul(case_id: str, name: str, dtype: DType, seed: int
            ) -> tuple[Graph, list[np.ndarray]]:
    rng = _rng(case_id, seed)
    x_shape, n = SHAPES.get(name, ((4, 8), 6))
    k = x_shape[-1]
    weight = rng.standard_normal((k, n))
    if name == "all-zero":
        weight[:] = 0
    elif name == "dense-pairs":  # exactly two non-zeros per group: nothing left to prune
        weight[1::4] = weight[3::4] = 0
        weight[0::4] = 1 + np.abs(weight[0::4])
        weight[2::4] = -1 - np.abs(weight[2::4])
    g = GraphBuilder(name.replace("-", "_"))
    x = g.input("x", TensorType(dtype, x_shape))
    w = g.constant(weight.astype(dtype.numpy), name="w")
    g.output(x @ w, name="y")
    graph = prune_2_4(g.build(), names=["w"])
    return graph, [rng.standard_normal(x_shape).astype(dtype.numpy)]


def _mlp(case_id: str, dtype: DType, seed: int) -> tuple[Graph, list[np.ndarray]]:
    rng = _rng(case_id, seed)
    g = GraphBuilder("sparse_mlp")
    x = g.input("x", TensorType(dtype, (4, 16)))

    def const(name: str, *shape: int):
        return g.constant((rng.standard_normal(shape) / 4).astype(dtype.numpy), name=name)

    hidden = g.op("Relu", (x @ const("w1", 16, 32)) + const("b1", 32))
    g.output(hidden @ const("w2", 32, 8), name="y")
    graph = prune_2_4(g.build())
    return graph, [rng.standard_normal((4, 16)).astype(dtype.numpy)]
