"""Running the suite against one adapter and grading every case."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from polyhal._version import __version__
from polyhal.conformance.cases import Case
from polyhal.conformance.execute import grade, run_on_device
from polyhal.conformance.levels import GENERATORS, unavailable_levels
from polyhal.conformance.levels.l1 import sharing_op_cases
from polyhal.conformance.manifest import Entry, load_manifest, unsettled
from polyhal.conformance.precision import (
    PRECISION_LEVELS,
    PrecisionDevice,
    check_precision,
    graded_in,
)
from polyhal.conformance.profiles import get_profile, parse_levels
from polyhal.conformance.tolerances import TOLERANCE_VERSION, Comparison
from polyhal.errors import (
    ConformanceError,
    DeviceCrashError,
    DeviceTimeoutError,
    PolyhalError,
)
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import Device
from polyhal.hal.registry import get_adapter, open_device
from polyhal.ops.registry import all_ops, domains

SUITE_VERSION = "1.2"
"""1.2: level L4-sparse (MatMul on 2:4-sparse weights, for devices tagged sparse-2:4)."""
OUTCOMES = ("passed", "failed", "crashed", "timeout", "xfail", "xpass", "not_applicable")
"""``not_applicable``: the case did not run (L3: no gradient, or one the device cannot run)."""
BAD_OUTCOMES = ("failed", "crashed", "timeout", "xpass")


@dataclass
class CaseResult:
    """The graded outcome of one case, as the report records it."""

    id: str
    level: str
    op: str | None
    dtype: str | None
    shape_class: str | None
    outcome: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    tolerance: dict[str, float] | None = None
    duration_s: float = 0.0
    message: str = ""


@dataclass
class Report:
    """Everything one conformance run found; ``report.json`` is its dict."""

    adapter: str
    adapter_version: str
    polyhal_version: str
    suite_version: str
    case_set_hash: str
    tolerance_version: str
    seeds: list[int]
    profile: str
    precision: str
    """The ``compile`` precision every case ran in (``fp32`` unless asked otherwise)."""
    levels: list[str]
    device: dict[str, Any]
    started: str
    duration_s: float
    coverage: dict[str, dict[str, Any]]
    summary: dict[str, int]
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing failed, crashed, timed out or passed unexpectedly."""
        return not any(self.summary[o] for o in BAD_OUTCOMES)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (see ``report.schema.json``)."""
        doc = asdict(self)
        for case in doc["cases"]:
            for key in ("max_abs_err", "max_rel_err"):
                value = case[key]
                if value is not None and not np.isfinite(value):
                    case[key] = None if np.isnan(value) else "inf"
        return doc


def case_set_hash(cases: Sequence[Case]) -> str:
    """A digest of the case set: ids, graphs and inputs (stable across runs)."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(case.id.encode())
        if case.graph is not None:
            digest.update(str(case.graph).encode())
        for array in case.inputs:
            digest.update(str(array.dtype).encode() + str(array.shape).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def coverage(caps: Capabilities) -> dict[str, dict[str, Any]]:
    """Claimed ops over all ops, per domain."""
    result = {}
    for domain in domains():
        names = [op.qualified_name for op in all_ops(domain)]
        claimed = [n for n in names if n in caps.ops]
        result[domain] = {"claimed": len(claimed), "total": len(names),
                          "claimed_ops": claimed,
                          "unclaimed_ops": [n for n in names if n not in caps.ops]}
    return result


def generate_cases(caps: Capabilities, levels: Sequence[str], profile_name: str) -> list[Case]:
    """Every case of ``levels`` that a device with ``caps`` must pass."""
    profile = get_profile(profile_name)
    cases: list[Case] = []
    with sharing_op_cases():
        for level in levels:
            generator = GENERATORS.get(level)
            if generator is None:
                continue
            try:
                cases.extend(generator(caps, profile))
            except PolyhalError as exc:
                raise ConformanceError(f"generating {level} cases failed: {exc}") from exc
    return cases


def execute_case(case: Case, device: Device) -> CaseResult:
    """Run one case and grade it (before the manifest is applied)."""
    start = time.perf_counter()
    result = CaseResult(case.id, case.level, case.op, case.dtype, case.shape_class, "passed",
                        tolerance=case.tolerance.as_dict() if case.tolerance else None)
    if case.not_applicable:
        result.outcome, result.message, result.tolerance = ("not_applicable",
                                                            case.not_applicable, None)
        return result
    try:
        if case.check is None:
            actual = run_on_device(device, case.graph, case.inputs)  # type: ignore[arg-type]
            checked = grade(actual, case.expected, case.tolerance)  # type: ignore[arg-type]
        else:
            checked = case.check(device)
        if isinstance(checked, Comparison):
            result.max_abs_err = checked.max_abs_err
            result.max_rel_err = checked.max_rel_err
            ok, result.message = checked.ok, checked.message
        else:
            ok, result.message = checked
        result.outcome = "passed" if ok else "failed"
    except DeviceTimeoutError as exc:
        result.outcome, result.message = "timeout", str(exc)
    except DeviceCrashError as exc:
        result.outcome, result.message = "crashed", str(exc)
    except PolyhalError as exc:
        result.outcome, result.message = "failed", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a device that escapes the contract is graded, not fatal
        result.outcome, result.message = "failed", f"{type(exc).__name__}: {exc}"
    result.duration_s = time.perf_counter() - start
    return result


def apply_expectations(result: CaseResult, expected: Entry | None,
                       open_question: Entry | None) -> CaseResult:
    """Turn failures the manifest or the shared list expects into xfail/xpass (a case
    that does not apply stays ``not_applicable``)."""
    entry = expected or open_question
    if entry is None or result.outcome == "not_applicable":
        return result
    if result.outcome == "passed":
        if expected is not None:
            result.outcome = "xpass"
            result.message = f"expected to fail ({entry.reason}) but passed: update the manifest"
    elif result.outcome != "xpass":
        result.message = f"{entry.reason} [{result.outcome}: {result.message}]"
        result.outcome = "xfail"
    return result


ProgressCallback = Callable[[CaseResult, int, int], None]


def device_timeout(timeout: float | None, default: float) -> float:
    """The per-call timeout of a device under test: ``timeout``, else
    ``POLYHAL_DEVICE_TIMEOUT`` when set, else ``default``; a value that is not a
    positive number of seconds is a :class:`PolyhalError` naming where it came from."""
    from polyhal.hal.isolation import TIMEOUT_ENV, check_timeout, default_timeout

    if timeout is not None:
        return check_timeout("run_suite", timeout)
    return default_timeout() if os.environ.get(TIMEOUT_ENV, "").strip() else default


def run_suite(adapter: str, levels: Sequence[str] | None = None, profile: str = "ci",
              isolate: bool = True, timeout: float | None = None,
              on_result: ProgressCallback | None = None,
              on_cases: Callable[[int], None] | None = None,
              precision: str = "fp32") -> Report:
    """Grade ``adapter`` (device 0) against the reference; returns the report.

    ``precision`` other than ``fp32`` compiles every case in that mode and grades
    levels L0-L2 only (all of them when ``levels`` is None), float32 cases at the
    mode's tolerance (:mod:`polyhal.conformance.precision`). With ``levels`` None,
    levels that cannot run here (:func:`~polyhal.conformance.levels.unavailable_levels`)
    are left out; the report's ``levels`` lists what ran.

    ``timeout`` is the device's per-call timeout in seconds; without it,
    ``POLYHAL_DEVICE_TIMEOUT``, else the profile's ``case_timeout_s``."""
    settings = get_profile(profile)
    call_timeout = device_timeout(timeout, settings.case_timeout_s)
    if precision != "fp32" and levels is None:
        levels = PRECISION_LEVELS
    if levels is None:
        missing = unavailable_levels()
        levels = [level for level in parse_levels(None) if level not in missing]
    chosen = parse_levels(levels)
    adapter_obj = get_adapter(adapter)
    manifest = load_manifest(type(adapter_obj))
    shared = unsettled()
    started = dt.datetime.now(dt.UTC)
    clock = time.perf_counter()
    device = open_device(adapter, isolate=isolate, timeout=call_timeout)
    try:
        caps = device.capabilities
        check_precision(precision, chosen, caps, adapter)
        if precision != "fp32":
            device = PrecisionDevice(device, precision)
        cases = [graded_in(c, precision) for c in generate_cases(caps, chosen, profile)]
        if on_cases is not None:
            on_cases(len(cases))
        results = []
        for index, case in enumerate(cases):
            result = execute_case(case, device)
            result = apply_expectations(result, manifest.match(case.id),
                                        next((e for e in shared if e.matches(case.id)), None))
            results.append(result)
            if on_result is not None:
                on_result(result, index, len(cases))
        info = next((d for d in adapter_obj.probe() if d.index == 0), None)
    finally:
        device.close()
    summary = {o: sum(1 for r in results if r.outcome == o) for o in OUTCOMES}
    return Report(
        adapter=adapter, adapter_version=str(type(adapter_obj).version),
        polyhal_version=__version__, suite_version=SUITE_VERSION,
        case_set_hash=case_set_hash(cases), tolerance_version=TOLERANCE_VERSION,
        seeds=list(settings.seeds), profile=profile, precision=precision, levels=list(chosen),
        device={"address": f"{adapter}:0", "name": info.name if info else adapter,
                "details": {k: str(v) for k, v in (info.details if info else {}).items()},
                "isolated": isolate},
        started=started.isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - clock, 3), coverage=coverage(caps),
        summary=summary, cases=results)
