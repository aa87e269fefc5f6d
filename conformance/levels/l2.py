"""L2: model graphs (MLP, small CNN, attention block; a spiking MLP and CNN) in every
claimed float dtype.

A model is generated when the device covers every node of it, after the
composites it lacks are decomposed (as the runtime would).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.levels.l4_snn import TOLERANCES as SNN_TOLERANCES
from polyhal.conformance.models import MODELS
from polyhal.conformance.profiles import Profile
from polyhal.conformance.snn_networks import NETWORKS
from polyhal.conformance.tolerances import MODEL_SCALE, Tolerance, tolerance_for
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.dtypes import FLOAT_TYPES, DType
from polyhal.ops.snn import FLOATS as SNN_FLOATS
from polyhal.runtime.placement import covers, decompose_for


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
                base = tolerance_for("core.MatMul", [DType.from_numpy(e.dtype) for e in expected])
                tol = Tolerance(base.atol * MODEL_SCALE, base.rtol * MODEL_SCALE)
                yield Case(f"L2/{name}/{dtype.value}/batch-{variant}", "L2", name, dtype.value,
                           "model", graph=graph, inputs=inputs, expected=expected,
                           tolerance=tol)
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
