"""L5 robustness: concurrent runs of one executable, asynchronous runs,
repeated compile/run cycles without growth in memory or open handles, and
faults: the device behind two ``faulty`` wrappers in a runtime ``Session``
(injected run errors and corrupted transfers caught by checksums) gives every
result, right, exactly once.

Every call of every level also runs under the per-case timeout, so a hang is
graded ``timeout`` rather than stopping the run.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from functools import partial

from polyhal.conformance.cases import Case
from polyhal.conformance.execute import grade
from polyhal.conformance.profiles import Profile
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import CompileOptions, Device

from .l0 import _first_case


def _threads(case: Case, threads: int, device: Device) -> tuple[bool, str]:
    executable = device.compile(case.graph, CompileOptions())  # type: ignore[arg-type]
    failures: list[str] = []

    def worker() -> None:
        try:
            for _ in range(10):
                buffers = [device.upload(a) for a in case.inputs]
                actual = [device.download(b) for b in executable.run(buffers)]
                result = grade(actual, case.expected, case.tolerance)  # type: ignore[arg-type]
                if not result.ok:
                    failures.append(result.message)
        except Exception as exc:  # graded below: any error in a thread fails the case
            failures.append(f"{type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return not failures, "; ".join(sorted(set(failures)))[:500]


def _async(case: Case, device: Device) -> tuple[bool, str]:
    executable = device.compile(case.graph, CompileOptions())  # type: ignore[arg-type]
    futures = [executable.run_async([device.upload(a) for a in case.inputs]) for _ in range(8)]
    for future in futures:
        actual = [device.download(b) for b in future.result()]
        result = grade(actual, case.expected, case.tolerance)  # type: ignore[arg-type]
        if not result.ok:
            return False, result.message
    return True, ""


def _resources(device: Device) -> dict[str, int] | None:
    inner = getattr(device, "inner", device)
    stats = getattr(inner, "worker_stats", None)
    return stats() if callable(stats) else None


def _cycles(case: Case, cycles: int, device: Device) -> tuple[bool, str]:
    def cycle() -> None:
        executable = device.compile(case.graph, CompileOptions())  # type: ignore[arg-type]
        buffers = [device.upload(a) for a in case.inputs]
        [device.download(b) for b in executable.run(buffers)]

    for _ in range(20):  # warm up caches and allocator pools before measuring
        cycle()
    gc.collect()
    before = _resources(device)
    for _ in range(cycles):
        cycle()
    gc.collect()
    after = _resources(device)
    if before is None or after is None:
        return True, "device is not isolated: growth not measured"
    growth = {k: after[k] - before[k] for k in before if k in after}
    limits = {"rss_bytes": 64 << 20, "open_fds": 2, "buffers": 16, "executables": 4}
    over = {k: v for k, v in growth.items() if k in limits and v > limits[k]}
    if over:
        return False, f"grew over {cycles} cycles: {over} (limits {limits})"
    return True, f"growth over {cycles} cycles: {growth}"


FAULT_REQUESTS = 12


def _faults(case: Case, device: Device) -> tuple[bool, str]:
    from polyhal.runtime import Session

    adapter = type(device.adapter)
    inner = {"inner": device.address, "inner_adapter": f"{adapter.__module__}:"
                                                        f"{adapter.__qualname__}"}
    wrappers = [("faulty:0", {**inner, "error_at": [0, 2, 5]}),
                ("faulty:1", {**inner, "corrupt_rate": 0.25, "checksum": True})]
    timeout = getattr(getattr(device, "inner", None), "timeout", None)
    with Session(wrappers, fallback=None, max_attempts=8, probe_interval=0.01,
                 timeout=timeout) as session:
        compiled = session.compile(case.graph)  # type: ignore[arg-type]
        futures = [compiled.submit(*case.inputs) for _ in range(FAULT_REQUESTS)]
        for future in futures:
            result = grade(list(future.result().values()), case.expected,
                           case.tolerance)  # type: ignore[arg-type]
            if not result.ok:
                return False, f"a result after recovery is wrong: {result.message}"
        stats = session.stats
    if stats.completed != FAULT_REQUESTS:
        return False, f"{stats.completed} of {FAULT_REQUESTS} requests completed"
    return True, (f"{FAULT_REQUESTS} requests right, {stats.faults} injected faults "
                  f"recovered (mean {stats.mean_recovery_seconds * 1e3:.1f} ms)")


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L5 cases of a device with ``caps``."""
    case = _first_case(caps, True)
    if case is None:
        return
    where = f"{case.op}/{case.dtype}"
    for label, check in (("threads", partial(_threads, case, profile.threads)),
                         ("async", partial(_async, case)),
                         ("cycles", partial(_cycles, case, profile.cycles)),
                         ("faults", partial(_faults, case))):
        yield Case(f"L5/{label}/{where}", "L5", case.op, case.dtype, label, check=check)
