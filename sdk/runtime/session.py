"""``Session``: one graph over several devices, with load balancing and fault recovery.

A call is split into fixed-size **micro-batches** along the graph's batch
symbol, when each output row comes from its own input row alone (else it runs
whole: :mod:`polyhal.runtime.batching`); each is one item of a work queue
that every device's thread takes from as soon as it is free, so faster
devices take more (``schedule="static"`` deals the items out evenly instead,
for comparison). Results are reassembled in order; calls return futures.

**Faults.** A ``DeviceError`` from a device (an error it reports, a crash or a
hang of its worker process, data that fails its checksum) marks the device
``unhealthy``; the micro-batch goes back to the front of the queue for a
healthy device that can run it, or, after ``max_attempts`` faults or when no
session device is healthy, to the ``fallback`` device. Each micro-batch
completes exactly once: no result is lost or duplicated. An unhealthy device
is probed (at once after a first fault, then after a back-off that doubles
with each consecutive fault) and, when the probe passes, readmitted. Without
a fallback, a micro-batch fails with a ``DeviceError`` after ``max_attempts``
faults, and every waiting one fails when no device has been healthy for
``give_up_after`` seconds: a call never hangs.

Devices given by address are opened isolated, each in its own worker process
(``host="ray"`` puts the workers on Ray, see :mod:`polyhal.hal.remote`), with
``timeout`` seconds per call; the workers start with the session, and a device
that cannot be opened with its address and options raises there. A device
thread that stops on an unexpected error marks its device ``failed`` and fails
what no other device can take.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.errors import DeviceError, InputBindingError, PolyhalError, UnsupportedError
from polyhal.hal.capabilities import PRECISIONS
from polyhal.hal.contract import Device
from polyhal.hal.registry import open_device, parse_address
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph
from polyhal.reference.executor import bind_inputs
from polyhal.runtime import tracing
from polyhal.runtime.batching import BatchLayout
from polyhal.runtime.compiled import CompiledGraph, Outputs, device_address
from polyhal.runtime.compiled import compile as compile_graph
from polyhal.runtime.health import (
    CLOSED,
    FAILED,
    HEALTHY,
    UNHEALTHY,
    DeviceHealth,
    SessionStats,
)

DeviceSpec = str | Device | tuple[str, Mapping[str, Any]]
"""A session device: an address (opened isolated), an opened device, or an address
with ``Adapter.open`` options (``("faulty:0", {"inner": "cpu", "error_rate": 0.1})``)."""

SCHEDULES = ("dynamic", "static")
_WAKE = 0.05  # seconds an idle device thread waits before looking at the queue again


@dataclass(eq=False)
class _Item:
    """One micro-batch of one call."""

    call: _Call
    index: int
    arrays: dict[str, np.ndarray]
    assigned: str | None = None
    faults: list[str] = field(default_factory=list)
    incapable: dict[str, str] = field(default_factory=dict)
    first_fault: float | None = None


@dataclass(eq=False)
class _Call:
    """One call of a :class:`SessionGraph`: its micro-batches and its future."""

    work: SessionGraph
    parts: int
    future: concurrent.futures.Future[Outputs]
    results: dict[int, Outputs] = field(default_factory=dict)


class _Lane:
    """One device of the session and its thread's state."""

    def __init__(self, device: Device, owned: bool, fallback: bool = False) -> None:
        self.device = device
        self.address = device.address
        self.owned = owned
        self.fallback = fallback
        self.state = HEALTHY
        self.completed = self.faults = self.probes = self.streak = 0
        self.busy = 0.0
        self.last_error = ""
        self.retry_at = 0.0
        self.thread: threading.Thread | None = None

    def health(self) -> DeviceHealth:
        return DeviceHealth(self.address, self.state, self.completed, self.faults,
                            self.probes, self.busy, self.last_error)


class SessionGraph:
    """A graph bound to a session: call it like a compiled graph, or ``submit`` for a future."""

    def __init__(self, session: Session, graph: Graph, batch_dim: str | None) -> None:
        self.session = session
        self.graph = graph
        self.layout = BatchLayout.of(graph, batch_dim)
        self._compiled: dict[str, CompiledGraph | UnsupportedError] = {}
        self._lock = threading.Lock()

    def compiled_on(self, lane: _Lane) -> CompiledGraph:
        """The graph compiled for ``lane``'s device (nodes it lacks on the fallback)."""
        with self._lock:
            known = self._compiled.get(lane.address)
        if isinstance(known, UnsupportedError):
            raise known
        if known is not None:
            return known
        session = self.session
        fallback = session._fallback
        if lane.fallback or fallback is None or fallback.address == lane.address:
            fallback = None
        try:
            compiled = compile_graph(self.graph, device=lane.device,
                                     fallback=None if fallback is None else fallback.device,
                                     precision=session.precision)
        except UnsupportedError as exc:
            with self._lock:
                self._compiled[lane.address] = exc
            raise
        with self._lock:
            return self._compiled.setdefault(lane.address, compiled)

    def submit(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Outputs]:
        """Queue a call on arrays given by position or by name; a future of its outputs."""
        arrays, _ = bind_inputs(self.graph, args, kwargs)
        session = self.session
        if self.layout.splittable and session.micro_batch is not None:
            parts = self.layout.split(arrays, session.micro_batch)
        else:
            parts = [arrays]
        call = _Call(self, len(parts), concurrent.futures.Future())
        session._enqueue([_Item(call, i, part) for i, part in enumerate(parts)])
        return call.future

    def warm_up(self, *args: Any, **kwargs: Any) -> None:
        """Compile on every healthy device and run one micro-batch of the given inputs on
        each, in this thread, so that the first calls pay no compile time (best effort: a
        device that cannot run the graph or faults is left to the queue's handling)."""
        arrays, _ = bind_inputs(self.graph, args, kwargs)
        size = self.session.micro_batch
        first = (self.layout.split(arrays, size)[0] if self.layout.splittable and size
                 else arrays)
        for lane in self.session._lanes:
            if lane.state == HEALTHY:
                with contextlib.suppress(UnsupportedError, DeviceError):
                    self.compiled_on(lane)(**first)

    def __call__(self, *args: Any, **kwargs: Any) -> Outputs:
        """Run a call and wait for its outputs."""
        return self.submit(*args, **kwargs).result()

    def map(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[Outputs]:
        """Run many calls (each a mapping of input name to array) and return their
        outputs in order."""
        if isinstance(requests, str | bytes | Mapping | np.ndarray) or not isinstance(
                requests, Iterable):
            raise InputBindingError(f"SessionGraph.map: requests must be a list of mappings of "
                                    f"input name to array, got {type(requests).__name__}")
        requests = list(requests)
        for index, request in enumerate(requests):
            if not isinstance(request, Mapping):
                raise InputBindingError(f"SessionGraph.map: request {index} is a "
                                        f"{type(request).__name__}, not a mapping of input "
                                        "name to array")
        futures = [self.submit(**request) for request in requests]
        return [f.result() for f in futures]


class Session:
    """Runs graphs over several devices; see the module docstring.

    ``micro_batch``: rows per micro-batch (``None``: a call is never split).
    ``fallback``: where micro-batches go that no session device can take, and
    where nodes a device lacks run (``None``: nowhere). ``max_attempts``: device
    faults one micro-batch may meet before it goes to the fallback (or fails).
    ``probe_interval``: the first back-off before probing a faulted device.
    """

    def __init__(self, devices: Sequence[DeviceSpec], *, micro_batch: int | None = 32,
                 fallback: str | Device | None = "reference", precision: str = "fp32",
                 timeout: float | None = None, host: Any = None, schedule: str = "dynamic",
                 max_attempts: int = 4, probe_interval: float = 0.5,
                 max_backoff: float = 30.0, give_up_after: float = 120.0) -> None:
        _check_arguments(devices, micro_batch, precision, schedule, max_attempts)
        _check_seconds(timeout=timeout, probe_interval=probe_interval, max_backoff=max_backoff,
                       give_up_after=give_up_after)
        self.micro_batch = micro_batch
        self.precision = precision
        self.schedule = schedule
        self.max_attempts = max_attempts
        self.probe_interval = probe_interval
        self.max_backoff = max_backoff
        self.give_up_after = give_up_after
        self.stats = SessionStats()
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._dealt = itertools.count()
        self._all_down_since: float | None = None
        self._lanes: list[_Lane] = []
        self._fallback: _Lane | None = None
        try:
            for spec in devices:
                self._lanes.append(_open_lane(spec, timeout, host))
            addresses = [lane.address for lane in self._lanes]
            if len(set(addresses)) != len(addresses):
                raise PolyhalError(f"Session: a device is listed twice ({', '.join(addresses)})")
            if fallback is not None:
                self._fallback = _open_lane(fallback, None, None, as_fallback=True)
            self._start_devices()
        except BaseException:
            self._close_devices()
            raise
        for lane in self._every_lane():
            lane.thread = threading.Thread(target=self._serve, args=(lane,), daemon=True,
                                           name=f"polyhal-session-{lane.address}")
            lane.thread.start()

    # -- public API

    @property
    def devices(self) -> list[str]:
        """The addresses of the session's devices, in order."""
        return [lane.address for lane in self._lanes]

    def compile(self, graph: Graph, batch_dim: str | None = None) -> SessionGraph:
        """``graph`` bound to this session, split along ``batch_dim`` (default: the
        leading symbol of its first input; a graph that cannot be split runs whole)."""
        if not isinstance(graph, Graph):
            raise PolyhalError(f"Session.compile: expected a Graph, got {type(graph).__name__}")
        return SessionGraph(self, graph, batch_dim)

    def run(self, graph: Graph, *args: Any, **kwargs: Any) -> Outputs:
        """Compile and run ``graph`` once (prefer :meth:`compile` for repeated calls)."""
        return self.compile(graph)(*args, **kwargs)

    def health(self) -> dict[str, DeviceHealth]:
        """Every device's health, by address (the fallback's too, as ``"ADDRESS
        (fallback)"`` when a session device has its address)."""
        with self._cond:
            health = {lane.address: lane.health() for lane in self._lanes}
            if self._fallback is not None:
                key = self._fallback.address
                health[f"{key} (fallback)" if key in health else key] = self._fallback.health()
            return health

    def close(self) -> None:
        """Fail what is still queued, stop the threads and close the devices opened here."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for item in pending:
            self._fail(item, PolyhalError("the session was closed before this call ran"))
        for lane in self._every_lane():
            if lane.thread is not None:
                lane.thread.join(timeout=1.0)
        self._close_devices()

    def __enter__(self) -> Session:
        return self

    def _start_devices(self) -> None:
        """Start every device now, in parallel (an isolated one starts its worker, which
        opens the device). A device that cannot be opened with its address and options is
        the caller's error, raised here; one whose worker faults (a ``DeviceError``) starts
        unhealthy, to be probed and readmitted like any faulted device."""
        with concurrent.futures.ThreadPoolExecutor(len(self._lanes)) as pool:
            errors = list(pool.map(_start_error, self._lanes))
        for lane, error in zip(self._lanes, errors, strict=True):
            if isinstance(error, DeviceError):
                lane.state, lane.last_error = UNHEALTHY, f"start: {error}"
                lane.faults = lane.streak = 1
                self.stats.faults += 1
            elif error is not None:
                kind = UnsupportedError if isinstance(error, UnsupportedError) else PolyhalError
                raise kind(f"Session: device {lane.address} cannot be opened: {error}"
                           ) from error

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the queue

    def _enqueue(self, items: list[_Item]) -> None:
        with self._cond:
            if self._closed:
                raise PolyhalError("Session: the session is closed")
            if self.schedule == "static":
                for item in items:
                    item.assigned = self._lanes[next(self._dealt) % len(self._lanes)].address
            self._queue.extend(items)
            self.stats.micro_batches += len(items)
            orphans = self._take_orphans(items)  # what was queued before was checked then
            self._cond.notify_all()
        self._fail_orphans(orphans)

    def _servable(self, item: _Item) -> bool:
        """True while a device that has not failed may still take ``item``."""
        if self._fallback is not None and self._fallback.state != FAILED:
            return True
        return len(item.faults) < self.max_attempts and any(
            lane.state != FAILED and lane.address not in item.incapable for lane in self._lanes)

    def _take_orphans(self, candidates: Sequence[_Item] | None = None) -> list[_Item]:
        """Remove from the queue what no device is left to run (under the lock), among
        ``candidates`` (default: the whole queue, after a device failed)."""
        queued = self._queue if candidates is None else candidates
        orphans = [item for item in queued if not self._servable(item)]
        for item in orphans:
            self._queue.remove(item)
        return orphans

    def _fail_orphans(self, orphans: list[_Item]) -> None:
        failed = "; ".join(f"{lane.address}: {lane.last_error}"
                           for lane in self._every_lane() if lane.state == FAILED)
        for item in orphans:
            self._fail(item, PolyhalError(
                f"Session: no device is left to run micro-batch {item.index} of "
                f"{item.call.work.graph.name!r} ({failed})"))

    def _capable(self, lane: _Lane, item: _Item) -> bool:
        return lane.state == HEALTHY and lane.address not in item.incapable

    def _takes(self, lane: _Lane, item: _Item) -> bool:
        if lane.fallback:  # only what no session device can take
            return len(item.faults) >= self.max_attempts or not any(
                self._capable(other, item) for other in self._lanes)
        if len(item.faults) >= self.max_attempts or lane.address in item.incapable:
            return False
        return item.assigned is None or item.assigned == lane.address

    def _next(self, lane: _Lane) -> _Item | None:
        """The next micro-batch for ``lane`` (``None`` once the session closes); probes the
        device first when it is unhealthy."""
        with self._cond:
            while not self._closed:
                if lane.state == UNHEALTHY:
                    wait = lane.retry_at - time.monotonic()
                    if wait > 0:
                        self._cond.wait(min(wait, _WAKE * 10))
                        continue
                    self._cond.release()
                    try:
                        self._probe(lane)
                    finally:
                        self._cond.acquire()
                    continue
                for item in self._queue:
                    if not item.call.future.done() and self._takes(lane, item):
                        self._queue.remove(item)
                        return item
                self._drop_finished_calls()
                self._cond.wait(_WAKE)
        return None

    def _drop_finished_calls(self) -> None:
        # Items of a call that already failed are not run.
        if any(item.call.future.done() for item in self._queue):
            self._queue = deque(i for i in self._queue if not i.call.future.done())

    # -- running

    def _serve(self, lane: _Lane) -> None:
        held: _Item | None = None
        try:
            while (item := self._next(lane)) is not None:
                held = item
                self._execute(lane, item)
                held = None
        except BaseException as exc:  # a bug must not leave calls waiting forever
            self._stop_lane(lane, held, exc)

    def _stop_lane(self, lane: _Lane, held: _Item | None, exc: BaseException) -> None:
        """``lane``'s thread stopped on an unexpected error: the device takes no more work
        (``failed``); the micro-batch it held fails, and so does every waiting one that no
        other device can take."""
        error = PolyhalError(f"Session: the thread of device {lane.address} stopped on "
                             f"{type(exc).__name__}: {exc}")
        with self._cond:
            lane.state = FAILED
            lane.last_error = str(error)
            for item in self._queue:
                if item.assigned == lane.address:
                    item.assigned = None
            orphans = self._take_orphans()
            self._cond.notify_all()
        if held is not None:
            self._fail(held, error)
        self._fail_orphans(orphans)

    def _execute(self, lane: _Lane, item: _Item) -> None:
        work = item.call.work
        started = time.perf_counter()
        try:
            category = "run,fallback" if lane.fallback else "run"
            with tracing.span(f"{work.graph.name} #{item.index}", category, lane.address,
                              thread="session",
                              micro_batch=item.index, attempt=len(item.faults) + 1):
                outputs = work.compiled_on(lane)(**item.arrays)
        except UnsupportedError as exc:
            self._unsupported(lane, item, exc)
        except DeviceError as exc:
            lane.busy += time.perf_counter() - started
            if lane.fallback:
                self._fail(item, exc)
            else:
                self._fault(lane, item, exc)
        except PolyhalError as exc:  # the data's fault (e.g. ExecutionError): not the device's
            self._fail(item, exc)
        except Exception as exc:
            self._fail(item, DeviceError(f"{lane.address}: running {work.graph.name!r} raised "
                                         f"{type(exc).__name__}: {exc}"))
        else:
            lane.busy += time.perf_counter() - started
            self._complete(lane, item, outputs)

    def _complete(self, lane: _Lane, item: _Item, outputs: Outputs) -> None:
        call = item.call
        with self._cond:
            lane.completed += 1
            lane.streak = 0
            self.stats.completed += 1
            if lane.fallback:
                self.stats.fallbacks += 1
            if item.first_fault is not None:
                recovered = time.perf_counter() - item.first_fault
                self.stats.recoveries.append(recovered)
                tracing.instant("recovered", "recovery", lane.address, thread="session",
                                micro_batch=item.index, seconds=recovered,
                                faults=len(item.faults))
            if call.future.done() or item.index in call.results:
                return  # cannot happen: each item is taken once; kept as a guard
            call.results[item.index] = outputs
            finished = len(call.results) == call.parts
        if finished:
            parts = [call.results[i] for i in range(call.parts)]
            joined = parts[0] if call.parts == 1 else Outputs(BatchLayout.join(parts))
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                call.future.set_result(joined)  # unless another micro-batch failed first

    def _fault(self, lane: _Lane, item: _Item, exc: DeviceError) -> None:
        tracing.instant(type(exc).__name__, "fault", lane.address, thread="session",
                        micro_batch=item.index, error=str(exc)[:200])
        with self._cond:
            lane.faults += 1
            lane.streak += 1
            lane.last_error = str(exc)
            lane.state = UNHEALTHY
            lane.retry_at = time.monotonic() + self._backoff(lane)
            self.stats.faults += 1
            item.faults.append(f"{lane.address}: {exc}")
            if item.first_fault is None:
                item.first_fault = time.perf_counter()
            if len(item.faults) >= self.max_attempts and self._fallback is None:
                failed = True
            else:
                failed = False
                item.assigned = None
                self.stats.retries += 1
                self._queue.appendleft(item)
                self._cond.notify_all()
        if failed:
            self._fail(item, DeviceError(
                f"micro-batch {item.index} of {item.call.work.graph.name!r} failed on "
                f"{len(item.faults)} attempts:\n  " + "\n  ".join(item.faults)))

    def _unsupported(self, lane: _Lane, item: _Item, exc: UnsupportedError) -> None:
        with self._cond:
            item.incapable[lane.address] = str(exc)
            nowhere = self._fallback is None and all(
                other.address in item.incapable for other in self._lanes)
            if lane.fallback or nowhere:
                reasons = "\n  ".join(f"{a}: {r}" for a, r in item.incapable.items())
                error: PolyhalError | None = UnsupportedError(
                    f"no device of the session can run {item.call.work.graph.name!r}:\n  "
                    f"{reasons}")
            else:
                error = None
                self._queue.appendleft(item)
                self._cond.notify_all()
        if error is not None:
            self._fail(item, error)

    def _fail(self, item: _Item, exc: BaseException) -> None:
        with self._cond:
            self.stats.failed += 1
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            item.call.future.set_exception(exc)  # unless another micro-batch failed first

    # -- health

    def _backoff(self, lane: _Lane) -> float:
        """Seconds before probing a device after ``lane.streak`` faults in a row: none
        after the first (most faults are transient), then ``probe_interval``, doubling."""
        if lane.streak <= 1:
            return 0.0
        return min(self.probe_interval * 2 ** (lane.streak - 2), self.max_backoff)

    def _probe(self, lane: _Lane) -> None:
        """Check an unhealthy device (its worker restarts if it died): an upload and a
        download of a claimed dtype (float32 where claimed: other dtypes may import
        libraries). Readmits it, or backs off further."""
        lane.probes += 1
        try:
            with tracing.span("probe", "recovery", lane.address, thread="session"):
                claimed = {d for dtypes in lane.device.capabilities.ops.values() for d in dtypes}
                dtype = DType.FLOAT32 if DType.FLOAT32 in claimed else min(
                    claimed, key=lambda d: d.value, default=None)
                if dtype is not None:
                    probe = np.zeros(1, dtype.numpy)
                    lane.device.download(lane.device.upload(probe))
        except PolyhalError as exc:
            with self._cond:
                lane.streak += 1
                lane.last_error = f"probe: {exc}"
                lane.retry_at = time.monotonic() + self._backoff(lane)
                self._give_up_if_stuck()
            return
        with self._cond:
            lane.state = HEALTHY
            self._all_down_since = None
            self._cond.notify_all()

    def _give_up_if_stuck(self) -> None:
        """Without a fallback, fail what waits once no device was healthy for
        ``give_up_after`` seconds (called under the lock)."""
        if self._fallback is not None or any(lane.state == HEALTHY for lane in self._lanes):
            self._all_down_since = None
            return
        now = time.monotonic()
        if self._all_down_since is None:
            self._all_down_since = now
        if now - self._all_down_since < self.give_up_after:
            return
        waiting = list(self._queue)
        self._queue.clear()
        errors = "; ".join(f"{lane.address}: {lane.last_error}" for lane in self._lanes)
        for item in waiting:
            error = DeviceError(f"no device of the session has been healthy for "
                                f"{self.give_up_after:g} s: {errors}")
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                item.call.future.set_exception(error)
            self.stats.failed += 1

    def _every_lane(self) -> list[_Lane]:
        """The session's devices, then the fallback (when there is one)."""
        return self._lanes + ([self._fallback] if self._fallback is not None else [])

    def _close_devices(self) -> None:
        for lane in self._every_lane():
            lane.state = CLOSED
            if lane.owned:
                with contextlib.suppress(PolyhalError):  # the worker is stopped either way
                    lane.device.close()


def _open_lane(spec: DeviceSpec | Any, timeout: float | None, host: Any,
               as_fallback: bool = False) -> _Lane:
    """A lane for ``spec``; addresses are opened isolated, except the fallback's, which
    runs in this process."""
    if isinstance(spec, Device):
        device_address(spec, "Session")
        return _Lane(spec, owned=False, fallback=as_fallback)
    if isinstance(spec, str):
        address, options = spec, {}
    elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], Mapping):
        address, options = spec[0], dict(spec[1])
    else:
        raise PolyhalError(f"Session: a device must be an address, an opened Device or "
                           f"(address, options), got {spec!r}")
    parse_address(address)
    _check_open_options(spec, options)
    extra = {} if host is None else {"host": host}
    device = open_device(address, isolate=not as_fallback, timeout=timeout, **extra, **options)
    return _Lane(device, owned=True, fallback=as_fallback)


_OPEN_ARGUMENTS = tuple(parameter.name
                        for parameter in inspect.signature(open_device).parameters.values()
                        if parameter.kind is not parameter.VAR_KEYWORD)
"""The arguments of ``open_device`` itself: no ``Adapter.open`` option may take their names."""
_SET_BY_SESSION = {
    "address": "give the address as the entry's first item",
    "isolate": "the session opens addresses isolated; pass an opened Device to use one in "
               "this process",
    "timeout": "pass Session(timeout=...)",
    "host": "pass Session(host=...)",
}


def _check_open_options(spec: Any, options: Mapping[Any, Any]) -> None:
    """Raise unless every option of the device entry ``spec`` is named by a string that
    is not an argument of ``open_device`` (the session sets ``isolate``, ``timeout``
    and ``host`` itself)."""
    for key in options:
        if not isinstance(key, str):
            raise PolyhalError(f"Session: device {spec!r}: option name {key!r} "
                               f"({type(key).__name__}) is not a string")
        if key in _OPEN_ARGUMENTS:
            hint = _SET_BY_SESSION.get(key, "the session sets it")
            raise PolyhalError(f"Session: device {spec!r}: {key!r} is an argument of "
                               f"open_device, not an Adapter.open option: {hint}")


def _start_error(lane: _Lane) -> PolyhalError | None:
    """What starting ``lane``'s device raised (``None``: it started)."""
    try:
        lane.device.capabilities  # noqa: B018  (an isolated device starts its worker here)
    except PolyhalError as exc:
        return exc
    return None


def _check_arguments(devices: Sequence[Any], micro_batch: int | None, precision: str,
                     schedule: str, max_attempts: int) -> None:
    if isinstance(devices, str | Device) or not isinstance(devices, Sequence) or not devices:
        raise PolyhalError(f"Session: devices must be a non-empty list, got {devices!r}")
    if micro_batch is not None and (isinstance(micro_batch, bool)
                                    or not isinstance(micro_batch, int) or micro_batch < 1):
        raise PolyhalError(f"Session: micro_batch={micro_batch!r} must be a positive integer "
                           "or None")
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise UnsupportedError(f"Session: precision {precision!r} is not one of "
                               f"{', '.join(sorted(PRECISIONS))}")
    if schedule not in SCHEDULES:
        raise PolyhalError(f"Session: schedule={schedule!r} must be one of "
                           f"{', '.join(SCHEDULES)}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise PolyhalError(f"Session: max_attempts={max_attempts!r} must be a positive integer")


def _check_seconds(**durations: Any) -> None:
    """Each duration must be a positive, finite number of seconds (``timeout`` may be
    ``None``: the default)."""
    for name, value in durations.items():
        if name == "timeout" and value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not 0 < value < math.inf):
            raise PolyhalError(f"Session: {name}={value!r} must be a positive, finite number "
                               "of seconds" + (" or None" if name == "timeout" else ""))
