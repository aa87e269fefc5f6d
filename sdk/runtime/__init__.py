"""The runtime: capability-based placement, partitions, transfers, fallback."""

from polyhal.runtime.compiled import CompiledGraph, Outputs, RunStats, compile, shared_device
from polyhal.runtime.placement import Partition, Placement, place

__all__ = ["CompiledGraph", "Outputs", "Partition", "Placement", "RunStats", "compile", "place",
           "shared_device"]
