"""L2: model graphs (MLP, small CNN, attention block; a spiking MLP and CNN; hybrid
quantum-classical models) in every claimed float dtype.

A model is generated when the device covers every node of it, after the
composites it lacks are decomposed (as the runtime would).

**Hybrid models** (:data:`~polyhal.conformance.models.HYBRID_MODELS`) are
generated for a device that claims ``quantum.Expectation`` in the dtype,
whether or not it covers their classical nodes: a quantum device is not
expected to run a ``MatMul``. When it does not cover the whole graph, the case
runs the graph as an application would, through ``polyhal.compile`` with the
reference as the fallback device (:func:`placed_check`): every node the device
covers (at least the quantum ones) runs on it, the rest on the reference, and
the outputs are graded as for any model. A device that claims no quantum op
gets no hybrid case, as it gets no case of a model it does not cover.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial

import numpy as np

from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.execute import grade
from polyhal.conformance.levels.l4_snn import TOLERANCES as SNN_TOLERANCES
from polyhal.conformance.models import HYBRID_MODELS, MODELS
from polyhal.conformance.profiles import Profile
from polyhal.conformance.snn_networks import NETWORKS
from polyhal.conformance.tolerances import (
    MODEL_SCALE,
    Comparison,
    Tolerance,
    tolerance_for,
    with_float32_stash,
)
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import Device
from polyhal.hal.registry import open_device
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ir.graph import Graph
from polyhal.ops.snn import FLOATS as SNN_FLOATS
from polyhal.runtime.placement import covers, decompose_for

FALLBACK = "reference"
"""The device that runs the nodes of a hybrid case the device under test does not cover."""
QUANTUM_OPS = ("quantum.Expectation", "quantum.ExpectationVJP")


def model_tolerance(expected: Sequence[np.ndarray], graph: Graph) -> Tolerance:
    """A model's tolerance: ``MODEL_SCALE`` times MatMul's, over its outputs' dtypes
    (float32's too for a float64 model with LayerNormalization, see
    :func:`~polyhal.conformance.tolerances.with_float32_stash`)."""
    dtypes = with_float32_stash(graph, {DType.from_numpy(e.dtype) for e in expected})
    base = tolerance_for("core.MatMul", sorted(dtypes, key=lambda d: d.value))
    return Tolerance(base.atol * MODEL_SCALE, base.rtol * MODEL_SCALE)


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L2 cases of a device with ``caps``."""
    dtypes = sorted(frozenset().union(*caps.ops.values()) & FLOAT_TYPES, key=lambda d: d.value)
    for name, build in MODELS.items():
        for dtype in dtypes:
            for variant, seed in enumerate(profile.seeds):
                graph, inputs = build(dtype, np.random.default_rng(seed))
                graph = decompose_for(graph, caps)
                if not covers(caps, graph):
                    continue
                expected = reference_outputs(graph, inputs)
                yield Case(f"L2/{name}/{dtype.value}/batch-{variant}", "L2", name, dtype.value,
                           "model", graph=graph, inputs=inputs, expected=expected,
                           tolerance=model_tolerance(expected, graph))
    yield from _hybrid(caps, profile)
    steps = 20 if profile.name == "ci" else 50
    for name, network in NETWORKS.items():
        for dtype in (d for d in dtypes if d in SNN_FLOATS):
            for variant, seed in enumerate(profile.seeds):
                graph, inputs = network(dtype, seed, steps)
                if not covers(caps, graph):
                    continue
                yield Case(f"L2/{name}/{dtype.value}/batch-{variant}", "L2", name, dtype.value,
                           "model", graph=graph, inputs=inputs,
                           expected=reference_outputs(graph, inputs),
                           tolerance=SNN_TOLERANCES[dtype])


def quantum_dtypes(caps: Capabilities, ops: Sequence[str] = QUANTUM_OPS[:1]) -> list[DType]:
    """The float dtypes in which ``caps`` claims every one of ``ops``, sorted."""
    claimed = [caps.ops.get(op, frozenset()) for op in ops]
    return sorted(frozenset.intersection(*claimed) & FLOAT_TYPES, key=lambda d: d.value)


def _hybrid(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The hybrid models in every dtype the device claims ``quantum.Expectation`` in."""
    for name, build in HYBRID_MODELS.items():
        for dtype in quantum_dtypes(caps):
            for variant, seed in enumerate(profile.seeds):
                graph, inputs = build(dtype, np.random.default_rng(seed))
                expected = reference_outputs(graph, inputs)
                yield hybrid_case(caps, Case(f"L2/{name}/{dtype.value}/batch-{variant}", "L2",
                                             name, dtype.value, "hybrid", graph=graph,
                                             inputs=inputs, expected=expected,
                                             tolerance=model_tolerance(expected, graph)))


def hybrid_case(caps: Capabilities, case: Case,
                required: Sequence[str] = QUANTUM_OPS) -> Case:
    """``case`` as it is when ``caps`` covers its graph, else run through placement with
    the :data:`FALLBACK` device (:func:`placed_check`); the nodes of the ``required`` ops
    must run on the device."""
    assert case.graph is not None and case.tolerance is not None
    graph = decompose_for(case.graph, caps)
    if covers(caps, graph):
        case.graph = graph
    else:
        case.check = partial(placed_check, case.graph, case.inputs, case.expected,
                             case.tolerance, required=tuple(required))
    return case


def run_placed(device: Device, graph: Graph, inputs: Sequence[np.ndarray],
               required: Sequence[str] = QUANTUM_OPS) -> tuple[list[np.ndarray], str]:
    """``graph`` compiled over ``device`` with the :data:`FALLBACK` device behind it, run
    once; its outputs, and a problem with the placement ("" when the device runs every
    node of the ``required`` ops, the quantum ones by default, as it must when it claims
    them)."""
    from polyhal.runtime import compile as compile_graph

    with open_device(FALLBACK) as fallback:
        compiled = compile_graph(graph, device=device, fallback=fallback)
        outputs = list(compiled(*inputs).values())
    mine = set(compiled.placement.nodes_on(device.address))
    elsewhere = [n.name for n in compiled.graph.nodes
                 if n.qualified_op in required and n.name not in mine]
    kind = "quantum " if tuple(required) == QUANTUM_OPS else ""
    problem = (f"placement put the {kind}node(s) {', '.join(elsewhere)} on {FALLBACK}"
               if elsewhere else "")
    return outputs, problem


def placed_check(graph: Graph, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                 tolerance: Tolerance, device: Device,
                 required: Sequence[str] = QUANTUM_OPS) -> Comparison:
    """Grade ``graph`` run on ``device`` with the fallback (see :func:`run_placed`)."""
    actual, problem = run_placed(device, graph, inputs, required)
    result = grade(actual, expected, tolerance)
    if problem:
        return Comparison(False, result.max_abs_err, result.max_rel_err, problem)
    return Comparison(result.ok, result.max_abs_err, result.max_rel_err,
                      result.message or f"uncovered nodes on the {FALLBACK} fallback")
