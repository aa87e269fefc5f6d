"""Profiling: a per-device, per-node timeline, exported as Chrome trace JSON.

While a :func:`recording` is active, the runtime records what it does as timed
**spans** and point-in-time **instants**; ``Trace.save`` writes them as Chrome
trace event JSON, which https://ui.perfetto.dev and ``chrome://tracing`` open.
Nothing is recorded, and :func:`span` costs next to nothing, when no recording
is active.

Every event has a **lane**: the device address it happened on (``cpu:0``) or
``host``; each lane is one trace *process*, and each ``thread`` label (default:
the Python thread's name) one *thread* in it. Categories used across polyhal:

- ``compile``: a graph placed on devices (lane ``host``), a partition's graph
  compiled for its device.
- ``transfer``: a value uploaded to or downloaded from a device (args ``value``,
  ``bytes``, ``from_device``, ``to_device``; ``host`` for host memory).
- ``run``: a partition run on its device; a partition placed on a fallback device
  is ``run,fallback`` (Chrome's category lists are comma-separated).
- ``node``: one node within a run, laid out from the device's per-node seconds.
- ``fallback``: work that ran on a fallback device.
- ``queue``: time a micro-batch waited for a device.
- ``fault``: a device fault (an instant).
- ``recovery``: probing a faulted device, or a micro-batch that completed after faults.
- ``counter``: device counters. An instant of this category is exported as a Chrome
  counter event (``ph: "C"``): its numeric args are the counter values.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from polyhal._version import __version__
from polyhal.errors import PolyhalError
from polyhal.files import write_atomically

HOST = "host"
"""The lane of work done in host memory."""

_MAX_DEPTH = 8  # nested args deeper than this are stringified


@dataclass(frozen=True)
class Event:
    """One recorded span (``end`` after ``start``) or instant (``end is None``).

    Times are ``time.perf_counter()`` seconds; ``args`` are JSON-safe.
    """

    name: str
    category: str
    lane: str
    thread: str
    start: float
    end: float | None = None
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def categories(self) -> tuple[str, ...]:
        """The comma-separated ``category``, split."""
        return tuple(self.category.split(","))


class Trace:
    """Recorded events; thread-safe. ``started`` is the ``time.perf_counter()`` of
    its creation: exported times count from there (or from an earlier event)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def add_span(self, name: str, category: str, lane: str, start: float, end: float,
                 thread: str | None = None, **args: Any) -> None:
        """Record a complete event from ``start`` to ``end`` (``time.perf_counter()`` s)."""
        self._add(_event(name, category, lane, thread, start, max(start, end), args))

    def add_instant(self, name: str, category: str, lane: str, at: float,
                    thread: str | None = None, **args: Any) -> None:
        """Record an instant at ``at`` (``time.perf_counter()`` seconds)."""
        self._add(_event(name, category, lane, thread, at, None, args))

    def _add(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def _sorted(self) -> list[Event]:
        with self._lock:
            return sorted(self._events, key=lambda e: e.start)

    def spans(self, category: str | None = None) -> list[Event]:
        """The recorded spans (of ``category``, when given), in start order."""
        return [e for e in self._sorted() if e.end is not None
                and (category is None or category in e.categories)]

    def to_chrome(self) -> dict[str, Any]:
        """The events as a Chrome trace JSON object (``ts``/``dur`` in microseconds
        from the trace's start)."""
        events = self._sorted()
        origin = min([self.started, *(e.start for e in events)])
        pids: dict[str, int] = {}
        tids: dict[str, int] = {}
        named: dict[tuple[int, int], str] = {}
        body = []
        for event in events:
            pid = pids.setdefault(event.lane, len(pids) + 1)
            tid = tids.setdefault(event.thread, len(tids) + 1)
            named[(pid, tid)] = event.thread
            body.append(_chrome_event(event, pid, tid, origin))
        metadata = [_metadata("process_name", pid, 0, lane) for lane, pid in pids.items()]
        metadata += [_metadata("thread_name", pid, tid, thread)
                     for (pid, tid), thread in named.items()]
        return {"traceEvents": metadata + body, "displayTimeUnit": "ms",
                "otherData": {"producer": f"polyhal {__version__}",
                              "clock": "time.perf_counter",
                              "origin_s": f"{origin:.6f}"}}

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Write :meth:`to_chrome` as JSON to ``path``, atomically: a failure leaves no
        partial file and ``path`` as it was; raises :class:`PolyhalError` naming the
        path when it cannot be written."""
        path = pathlib.Path(path)
        text = json.dumps(self.to_chrome(), allow_nan=False)
        try:
            write_atomically(path, text.encode())
        except OSError as exc:
            raise PolyhalError(f"{path}: cannot write the trace ({exc.strerror or exc})"
                               ) from None
        return path


_recordings: tuple[Trace, ...] = ()  # replaced, never mutated: read without the lock
_recordings_lock = threading.Lock()


@contextlib.contextmanager
def recording() -> Iterator[Trace]:
    """Record every span and instant, from any thread of the process, into a new
    :class:`Trace` while the block runs (each of several active recordings gets
    every event)."""
    global _recordings
    trace = Trace()
    with _recordings_lock:
        _recordings = (*_recordings, trace)
    try:
        yield trace
    finally:
        with _recordings_lock:
            _recordings = tuple(t for t in _recordings if t is not trace)


def active() -> bool:
    """True while at least one recording is active (no lock taken)."""
    return bool(_recordings)


def add_span(name: str, category: str, lane: str, start: float, end: float,
             thread: str | None = None, **args: Any) -> None:
    """:meth:`Trace.add_span` into every active recording: for work timed elsewhere
    (a device's per-node seconds, say)."""
    if _recordings:
        _broadcast(_event(name, category, lane, thread, start, max(start, end), args))


def span(name: str, category: str, lane: str, thread: str | None = None,
         **args: Any) -> contextlib.AbstractContextManager[dict[str, Any]]:
    """Time the block as a span of every active recording; the yielded dict holds
    the span's args, for the block to add to. An exception leaving the block is
    recorded as the ``error`` arg. With no recording active, nothing is timed."""
    if not _recordings:
        return contextlib.nullcontext(args)
    return _timed(name, category, lane, thread, args)


@contextlib.contextmanager
def _timed(name: str, category: str, lane: str, thread: str | None,
           args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    start = time.perf_counter()
    try:
        yield args
    except BaseException as exc:
        args["error"] = type(exc).__name__
        raise
    finally:
        _broadcast(_event(name, category, lane, thread, start, time.perf_counter(), args))


def instant(name: str, category: str, lane: str, thread: str | None = None,
            **args: Any) -> None:
    """Record an instant, now, into every active recording."""
    if _recordings:
        _broadcast(_event(name, category, lane, thread, time.perf_counter(), None, args))


def _broadcast(event: Event) -> None:
    for trace in _recordings:
        trace._add(event)


def _event(name: str, category: str, lane: str, thread: str | None, start: float,
           end: float | None, args: Mapping[str, Any]) -> Event:
    return Event(str(name), str(category), str(lane),
                 threading.current_thread().name if thread is None else str(thread),
                 float(start), None if end is None else float(end),
                 {str(k): _json_safe(v) for k, v in args.items()})


def _json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON can hold it: numpy scalars as numbers, containers as lists
    and objects, non-finite floats and anything else as strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if depth < _MAX_DEPTH:
        if isinstance(value, Mapping):
            return {_text(k): _json_safe(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [_json_safe(v, depth + 1) for v in value]
        item = getattr(value, "item", None)  # numpy scalars and 0-d arrays
        if callable(item) and getattr(value, "ndim", None) == 0:
            with contextlib.suppress(Exception):
                return _json_safe(item(), depth + 1)
    return _text(value)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _nanoseconds(seconds: float, origin: float) -> int:
    return round((seconds - origin) * 1e9)


def _chrome_event(event: Event, pid: int, tid: int, origin: float) -> dict[str, Any]:
    # Whole nanoseconds, written in microseconds: a reader that rounds to nanoseconds
    # (Perfetto) gets spans within spans, and spans that touch, exactly as recorded.
    start = _nanoseconds(event.start, origin)
    common = {"name": event.name, "cat": event.category, "pid": pid, "tid": tid,
              "ts": start / 1000}
    if event.end is not None:
        return {**common, "ph": "X", "dur": (_nanoseconds(event.end, origin) - start) / 1000,
                "args": dict(event.args)}
    if "counter" in event.categories:
        return {**common, "ph": "C", "args": {k: float(v) for k, v in event.args.items()
                                              if isinstance(v, int | float)}}
    return {**common, "ph": "i", "s": "t", "args": dict(event.args)}


def _metadata(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
