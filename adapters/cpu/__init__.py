"""The CPU adapter: polyhal's fast backend, and the runtime's fallback device.

``compile`` optimizes the graph once, with its shapes still symbolic (constant
folding, CSE, dead-code elimination, the shared fusion rules: MatMul+Add ->
Gemm, Conv+BatchNorm folding). The first run with each concrete input shape
specializes the optimized graph, runs the same passes again for what the
shapes make possible (they return their input untouched when they find
nothing, so this is mostly a scan), and lowers it to a
:class:`~polyhal.adapters.cpu.plan.Plan`: elementwise chains fused into numba
ufuncs cached on disk, BLAS-backed MatMul/Gemm/Conv, numpy for other ops, and
a statically planned buffer arena. Plans are cached per shape binding.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

from polyhal.adapters.cpu import threads as cpu_threads
from polyhal.adapters.cpu.plan import Plan, PlanBuilder
from polyhal.errors import UnsupportedError
from polyhal.hal import (
    Adapter,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    DeviceInfo,
    Executable,
    Profile,
)
from polyhal.hal.derived import DerivedConstants
from polyhal.hal.host import HostMemoryDevice, check_known_options, check_single_device
from polyhal.ir import Graph, TensorType
from polyhal.ops import all_ops
from polyhal.passes import FUSION_RULES, apply_rules, simplify, specialize_to


@cache
def cpu_capabilities() -> Capabilities:
    """Every core, snn and quant op in every dtype it admits (snn through the
    reference's time-steppers, so that spiking graphs fall back to the CPU;
    quant.Requantize in int64 arithmetic)."""
    ops = {op.qualified_name: frozenset().union(*op.type_vars.values())
           for domain in ("core", "snn", "quant") for op in all_ops(domain)}
    return Capabilities(ops=ops, dynamic_shapes=True, max_rank=32,
                        tags=frozenset({"training", "fused", "blas"}))


MAX_PLANS = 64
"""Plans one executable keeps, one per input-shape binding: beyond that the oldest is
dropped (and built again if its shapes come back), so a server fed every batch
size from 1 to 1000 does not keep 1000 arenas."""


def optimize(graph: Graph) -> Graph:
    """The CPU pipeline's graph passes."""
    return apply_rules(simplify(graph), FUSION_RULES)


class CpuExecutable(Executable):
    """A graph optimized once, whose plans are built per concrete input shapes, on
    first use."""

    def __init__(self, device: CpuDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        self.optimized = optimize(graph)
        """``graph`` through :func:`optimize` with its shapes still symbolic: what each
        shape binding specializes."""
        self._plans: dict[tuple[tuple[int, ...], ...], Plan] = {}
        self._derived = DerivedConstants(self.optimized)
        self._lock = threading.Lock()
        self._last_plan: Plan | None = None

    def plan_for(self, shapes: tuple[tuple[int, ...], ...]) -> Plan:
        """The plan of one shape binding (built on first use; the last
        :data:`MAX_PLANS` are kept)."""
        plan = self._plans.get(shapes)
        if plan is None:
            with self._lock:
                plan = self._plans.get(shapes)
                if plan is None:
                    concrete = optimize(specialize_to(self.optimized, shapes))
                    plan = PlanBuilder(concrete, self._derived).build()
                    if len(self._plans) >= MAX_PLANS:
                        del self._plans[next(iter(self._plans))]
                    self._plans[shapes] = plan
        return plan

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        arrays = [b.handle for b in inputs]
        plan = self.plan_for(tuple(a.shape for a in arrays))
        outputs = plan.execute(arrays)
        self._last_plan = plan
        return [Buffer(self.device, TensorType.of(a), a) for a in outputs]

    def profile(self) -> Profile | None:
        plan = self._last_plan
        if plan is None:
            return None
        return Profile(nodes=dict(zip(plan.step_names, plan.last_seconds, strict=False)),
                       counters={"steps": float(len(plan.functions)),
                                 "arena_bytes": float(plan.arena_bytes),
                                 "plans": float(len(self._plans))})


class CpuDevice(HostMemoryDevice):
    """The host CPU: numpy, BLAS and numba-generated loops."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads
        if threads is not None:
            set_threads(threads)

    @property
    def capabilities(self) -> Capabilities:
        return cpu_capabilities()


    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return CpuExecutable(self, graph)


def set_threads(threads: int) -> None:
    """Use ``threads`` threads in BLAS, numba and the direct Conv kernel."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UnsupportedError(f"cpu: threads must be >= 1 (an integer), got {threads!r}")
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    cpu_threads.set_count(threads)


class CpuAdapter(Adapter):
    """``cpu``: the host processor."""

    name = "cpu"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = CpuDevice
    executable_class = CpuExecutable

    def probe(self) -> list[DeviceInfo]:
        missing = [m for m in ("numba", "threadpoolctl") if importlib.util.find_spec(m) is None]
        reason = f"needs {', '.join(missing)}: pip install 'polyhal[cpu]'" if missing else ""
        return [DeviceInfo(self.name, 0, f"host CPU ({os.cpu_count()} cores)", not missing,
                           reason, details={"cores": os.cpu_count() or 1})]

    def open(self, index: int = 0, **options: Any) -> Device:
        check_single_device(self.name, index)
        check_known_options(self.name, options, ("threads",))
        return CpuDevice(threads=options.get("threads"))
