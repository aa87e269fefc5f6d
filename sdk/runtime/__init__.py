"""The runtime: capability-based placement, partitions, transfers, fallback; sessions over
several devices with load balancing and fault recovery; tracing."""

from polyhal.runtime.compiled import CompiledGraph, Outputs, RunStats, compile, shared_device
from polyhal.runtime.health import DeviceHealth, SessionStats
from polyhal.runtime.placement import Partition, Placement, place
from polyhal.runtime.session import Session, SessionGraph

__all__ = ["CompiledGraph", "DeviceHealth", "Outputs", "Partition", "Placement", "RunStats",
           "Session", "SessionGraph", "SessionStats", "compile", "place", "shared_device"]
