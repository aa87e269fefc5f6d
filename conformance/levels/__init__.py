"""Case generators by level: each maps a device's capabilities to its cases."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from polyhal.conformance.cases import Case
from polyhal.conformance.levels import (
    l0,
    l1,
    l2,
    l3,
    l4_quant,
    l4_quantum,
    l4_snn,
    l4_sparse,
    l5,
    onnx_node,
)
from polyhal.conformance.profiles import Profile
from polyhal.hal.capabilities import Capabilities

Generator = Callable[[Capabilities, Profile], Iterator[Case]]

GENERATORS: dict[str, Generator] = {
    "L0": l0.generate,
    "L1": l1.generate,
    "L2": l2.generate,
    "L3": l3.generate,
    "L4-snn": l4_snn.generate,
    "L4-quantum": l4_quantum.generate,
    "L4-quant": l4_quant.generate,
    "L4-sparse": l4_sparse.generate,
    "L5": l5.generate,
    "onnx": onnx_node.generate,
}
"""Every level's generator, in run order (:data:`~polyhal.conformance.profiles.LEVELS`)."""

_AVAILABILITY: dict[str, Callable[[], str | None]] = {"onnx": onnx_node.unavailable}


def unavailable_levels() -> dict[str, str]:
    """Levels that cannot run in this environment (an optional package is missing), each
    with why: a run of every level leaves them out, naming them; asking for one is an
    error."""
    return {level: why for level, check in _AVAILABILITY.items() if (why := check())}

__all__ = ["GENERATORS", "Generator", "unavailable_levels"]
