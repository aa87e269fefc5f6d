"""L4-quant: integer inference bit for bit against the reference (atol 0, rtol 0).

Cases exist for a device that claims ``quant.Requantize`` and/or int8
``core.MatMulInteger``, from :mod:`polyhal.conformance.quant_graphs`:

* ``L4-quant/Requantize/int8/<table>-<rounding>``: the Requantize corner tables
  (exact ties of both signs, shifts 0 and 63, multipliers 0 and 2^31 - 1,
  saturation at both ends, relu with zero points, x and bias at int32's
  extremes), each under ``half_up`` and ``half_even``; for a device that covers
  the one-op graphs (Requantize claimed).
* ``L4-quant/MatMulInteger/int8/<case>``: all -128 x -128 at the largest depth
  int32 holds (``extremes-128``) and one past it (``wrap-128``, which wraps in
  two's complement), mixed extremes, ``K = 0``, ``M = 0``, ``N = 0`` and the sizes
  1x1x1, 3x5x7, 17x9x33 (M x K x N); for a device that claims MatMulInteger in
  int8.
* ``L4-quant/chain/int8/<mlp>``: two-layer int8 MLPs, MatMulInteger ->
  Requantize(bias, relu) -> MatMulInteger -> Requantize, per-channel and per-tensor
  parameters, both roundings.
* ``L4-quant/pass/int8/<mlp>``: a float MLP quantized by
  :func:`polyhal.passes.quantize`, run end to end (float32 in, QuantizeLinear, the
  integer layers, DequantizeLinear, float32 out) and graded exactly against the
  reference executor running the same quantized graph.

Chains and quantized graphs are generated for a device that claims either op: as
L2's hybrid cases do, a graph the device does not cover runs through
``polyhal.compile`` with the reference as fallback, every node of the claimed
quantized ops on the device (a placement that moves one elsewhere fails), the
other nodes on the reference. Tables are fixed values; MatMulInteger's random
operands come from the profile's first seed, chains and quantized graphs from
``[seed, crc32(case id)]``. The ``ci`` profile takes every table and
MatMulInteger case, two chains and one quantized MLP, with the first seed;
``full`` every chain and quantized graph for every seed of the profile (``-N``
appended to the ids of seed N > 0).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import numpy as np

from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.levels.l2 import hybrid_case
from polyhal.conformance.profiles import Profile
from polyhal.conformance.quant_graphs import (
    CHAINS,
    PASS_GRAPHS,
    REQUANTIZE_TABLES,
    Built,
    matmul_cases,
)
from polyhal.conformance.tolerances import Tolerance
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.dtypes import DType
from polyhal.ops.requantize import ROUNDINGS
from polyhal.runtime.placement import covers, node_reason

LEVEL = "L4-quant"
REQUANTIZE, MATMUL = "quant.Requantize", "core.MatMulInteger"
QUANT_OPS = (REQUANTIZE, MATMUL)
EXACT = Tolerance(atol=0.0, rtol=0.0)
CI_CHAINS, CI_PASS_GRAPHS = 2, 1
"""How many of :data:`CHAINS` and :data:`PASS_GRAPHS` the ``ci`` profile takes."""


def claims(caps: Capabilities) -> list[str]:
    """The quantized ops ``caps`` claims for int8 work (MatMulInteger needs int8)."""
    found = [REQUANTIZE] if REQUANTIZE in caps.ops else []
    return found + ([MATMUL] if caps.supports(MATMUL, DType.INT8) else [])


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L4-quant cases of a device with ``caps`` (none unless it claims one of
    :data:`QUANT_OPS`)."""
    claimed = claims(caps)
    if not claimed:
        return
    if REQUANTIZE in claimed:
        for table, build in REQUANTIZE_TABLES.items():
            for rounding in ROUNDINGS:
                yield from _whole(caps, f"{LEVEL}/Requantize/int8/{table}-{rounding}",
                                  REQUANTIZE, f"{table}-{rounding}", build(rounding))
    if MATMUL in claimed:
        rng = np.random.default_rng([profile.seeds[0], zlib.crc32(b"MatMulInteger")])
        for name, built in matmul_cases(rng).items():
            yield from _whole(caps, f"{LEVEL}/MatMulInteger/int8/{name}", MATMUL, name, built)
    ci = profile.name == "ci"
    for kind, builders, ci_count in (("chain", CHAINS, CI_CHAINS),
                                     ("pass", PASS_GRAPHS, CI_PASS_GRAPHS)):
        for name, build in list(builders.items())[:ci_count if ci else None]:
            for index, seed in enumerate(profile.seeds[:1] if ci else profile.seeds):
                case_id = f"{LEVEL}/{kind}/int8/{name}" + (f"-{index}" if index else "")
                case = _placed(caps, case_id, name, build, seed)
                if case is not None:
                    yield case


def _whole(caps: Capabilities, case_id: str, op: str, variant: str,
           built: Built) -> Iterator[Case]:
    """The case of a graph the device must cover entirely (nothing when it does not)."""
    graph, inputs = built
    if covers(caps, graph):
        yield Case(case_id, LEVEL, op, "int8", variant, graph=graph, inputs=inputs,
                   expected=reference_outputs(graph, inputs), tolerance=EXACT)


def _placed(caps: Capabilities, case_id: str, name: str,
            build: Callable[[np.random.Generator], Built], seed: int) -> Case | None:
    """A chain or quantized graph: run as it is when the device covers it, else with
    the reference fallback; ``None`` when the device covers none of its quantized ops."""
    graph, inputs = build(np.random.default_rng([seed, zlib.crc32(case_id.encode())]))
    required = sorted({node.qualified_op for node in graph.nodes
                       if node.qualified_op in QUANT_OPS
                       and node_reason(caps, graph, node) is None})
    if not required:
        return None
    case = Case(case_id, LEVEL, name, "int8", case_id.split("/")[1], graph=graph,
                inputs=inputs, expected=reference_outputs(graph, inputs), tolerance=EXACT)
    return hybrid_case(caps, case, required)
