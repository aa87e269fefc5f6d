"""L4-snn: spiking networks on the device against the reference, spike for spike.

Every neuron op the device claims runs in a small network (input spikes ->
Linear -> the population -> Linear -> LIF) for each integration method and
reset rule; then a Delay network, CubaLIF with equal time constants, a
synfire chain, and the synfire chain after a round trip through NIR (where the
``nir`` package is installed). Spike trains must be identical; membrane traces
agree within the tolerance (float64: ``atol=1e-9, rtol=1e-6``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator

from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.profiles import Profile
from polyhal.conformance.snn_networks import (
    DT,
    Network,
    delayed,
    equal_taus,
    population,
    synfire,
)
from polyhal.conformance.tolerances import Tolerance
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.dtypes import DType
from polyhal.ops.snn import FLOATS, METHODS, RESETS, SPIKING
from polyhal.runtime.placement import covers

TOLERANCES = {DType.FLOAT64: Tolerance(atol=1e-9, rtol=1e-6),
              DType.FLOAT32: Tolerance(atol=1e-5, rtol=1e-5)}
"""Trace tolerances; spikes are 0 or 1, so any differing spike exceeds them."""

POPULATIONS = ("LIF", "CubaLIF", "IF", "LI", "Integrator")
RESET_NAMES = {"v_reset": "reset", "subtract": "subtract"}


def _networks(profile: Profile) -> Iterator[tuple[str, str, Callable[[DType, int], Network]]]:
    """(op, variant, builder of dtype and seed) for every case of the level."""
    steps = 30 if profile.name == "ci" else 100
    for op in POPULATIONS:
        for method in METHODS:
            for reset in RESETS if op in SPIKING else ("v_reset",):
                variant = f"{method}-{RESET_NAMES[reset]}" if op in SPIKING else method
                yield op, variant, (lambda dtype, seed, op=op, method=method, reset=reset:
                                    population(op, dtype, seed, steps, method, reset))
    yield "Delay", "euler-reset", lambda dtype, seed: delayed(dtype, seed, steps)
    yield "CubaLIF", "exact-equal-taus", lambda dtype, seed: equal_taus(dtype, seed, steps)
    yield "IF", "synfire", lambda dtype, seed: synfire(dtype, seed, max(steps, 10))
    if importlib.util.find_spec("nir") is not None:
        yield "IF", "nir-round-trip", lambda dtype, seed: _nir_round_trip(
            synfire(dtype, seed, max(steps, 10)), dtype)


def _nir_round_trip(network: Network, dtype: DType) -> Network:
    """``network`` written as a NIR graph and read back: it must still be the same."""
    from polyhal.interop.nir import load_nir, to_nir  # the nir extra is optional

    graph, inputs = network
    return load_nir(to_nir(graph), dt=DT, method="euler", reset="v_reset", dtype=dtype), inputs


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L4-snn cases of a device with ``caps``: those whose every node it covers."""
    dtypes = sorted(frozenset().union(*caps.ops.values()) & FLOATS, key=lambda d: d.value)
    for op, variant, build in _networks(profile):
        for dtype in dtypes:
            for index, seed in enumerate(profile.seeds):
                graph, inputs = build(dtype, seed)
                if not covers(caps, graph):
                    continue
                suffix = "" if index == 0 else f"-{index}"
                yield Case(f"L4-snn/{op}/{dtype.value}/{variant}{suffix}", "L4-snn",
                           f"snn.{op}", dtype.value, variant, graph=graph, inputs=inputs,
                           expected=reference_outputs(graph, inputs),
                           tolerance=TOLERANCES[dtype])
