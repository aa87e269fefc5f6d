"""Grading several adapters at once: each in a process of its own, a few at a time.

Most of one adapter's run is the grader and the device's worker process waiting
for each other (a request, then its reply, for every call), so a second run
beside it keeps an idle core busy. On 2 cores, ``polyhal conformance`` over
every built-in adapter (full profile) took 132 s two at a time, where one after
the other took 195 s (the same hour). The command runs its adapters this way (``--jobs``).
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from polyhal.conformance.runner import BAD_OUTCOMES, Report, run_suite
from polyhal.errors import ConformanceError, PolyhalError
from polyhal.hal.channel import describe_exit
from polyhal.hal.registry import adapters as registered_adapters
from polyhal.hal.registry import get_adapter
from polyhal.hal.wire import encode_error, rebuild_error
from polyhal.hal.worker import load_adapter_class

ProgressCallback = Callable[[str, int, "int | None", int], None]
"""``(adapter, cases done, cases in all (None until counted), cases not passed)``."""

PROGRESS_INTERVAL = 0.1
"""Seconds between one run's progress messages (its last case is always reported)."""


def run_suites(adapters: Sequence[str], jobs: int,
               on_progress: ProgressCallback | None = None, **options: Any
               ) -> Iterator[tuple[str, Report]]:
    """:func:`~polyhal.conformance.runner.run_suite` of each of ``adapters`` (with
    ``options``), up to ``jobs`` at a time, each in a new ``spawn`` process; with
    ``jobs`` 1 (or one adapter), here, one after another.

    Yields ``(adapter, report)`` in the order of ``adapters``, each as soon as it
    and every run before it are done; ``on_progress`` is called here, in the
    caller's thread. An error of one run is raised at its turn, as the same
    :class:`~polyhal.errors.PolyhalError` class with the same message; a process
    that dies is a :class:`~polyhal.errors.ConformanceError` naming how. Either,
    an interrupt, or leaving the loop early stops the other runs.

    >>> for name, report in run_suites(["cpu", "reference"], jobs=2,
    ...                                levels=["L0"]):              # doctest: +SKIP
    ...     print(name, "PASS" if report.ok else "FAIL")
    cpu PASS
    reference PASS
    """
    if jobs < 1:
        raise PolyhalError(f"run_suites: jobs={jobs!r} must be at least 1")
    twice = sorted(name for name, count in Counter(adapters).items() if count > 1)
    if twice:
        raise PolyhalError(f"run_suites: adapter(s) {', '.join(twice)} given twice")
    if min(jobs, len(adapters)) == 1:
        yield from _run_here(adapters, on_progress, options)
    else:
        yield from _run_side_by_side(adapters, jobs, on_progress, options)


def _run_side_by_side(adapters: Sequence[str], jobs: int,
                      on_progress: ProgressCallback | None, options: dict[str, Any]
                      ) -> Iterator[tuple[str, Report]]:
    """:func:`run_suites` with a process per adapter, ``jobs`` at a time."""
    # An adapter registered at run time (not through an entry point) is registered
    # again in its grading process, from its class's import path.
    paths = {name: f"{type(a).__module__}:{type(a).__qualname__}"
             for name, a in ((name, get_adapter(name)) for name in adapters)}
    context = multiprocessing.get_context("spawn")
    waiting = list(adapters)
    running: dict[Connection, tuple[str, BaseProcess]] = {}
    finished: dict[str, tuple[str, Any]] = {}
    try:
        for name in adapters:
            while name not in finished:
                while waiting and len(running) < jobs:
                    starting = waiting.pop(0)
                    reader, writer = context.Pipe(duplex=False)
                    process = context.Process(
                        target=_grade, args=(starting, paths[starting], options, writer),
                        name=f"polyhal-conformance-{starting}")
                    process.start()
                    writer.close()  # the process holds the other copy: EOF when it ends
                    running[reader] = (starting, process)
                for reader in wait(list(running)):
                    _receive(reader, running, finished, on_progress)
            kind, value = finished.pop(name)
            if kind == "error":
                raise rebuild_error(value, f"conformance of {name}")
            if kind == "died":
                raise ConformanceError(f"conformance of {name}: {value} before it sent "
                                       "a report")
            yield name, value
    finally:
        for _, process in running.values():
            process.terminate()  # its device workers see their parent gone and exit
        for reader, (_, process) in running.items():
            process.join()
            reader.close()


def _run_here(adapters: Sequence[str], on_progress: ProgressCallback | None,
              options: dict[str, Any]) -> Iterator[tuple[str, Report]]:
    """:func:`run_suites` in this process, one adapter after another."""
    for name in adapters:
        def report(*progress: Any, name: str = name) -> None:
            if on_progress is not None:
                on_progress(name, *progress)

        yield name, _run_suite_reporting(name, options, report)


def _run_suite_reporting(name: str, options: dict[str, Any],
                         report: Callable[[int, int, int], None], interval: float = 0.0
                         ) -> Report:
    """``run_suite(name, **options)``, calling ``report(cases done, cases in all,
    cases not passed)`` once the cases are counted and after a case, at most every
    ``interval`` seconds (the last case always)."""
    not_passed = 0
    last = 0.0

    def on_result(result: Any, index: int, count: int) -> None:
        nonlocal not_passed, last
        not_passed += result.outcome in BAD_OUTCOMES
        now = time.monotonic()
        if index + 1 == count or now - last >= interval:
            last = now
            report(index + 1, count, not_passed)

    return run_suite(name, on_result=on_result, on_cases=lambda count: report(0, count, 0),
                     **options)


def _receive(reader: Connection, running: dict[Connection, tuple[str, BaseProcess]],
             finished: dict[str, tuple[str, Any]], on_progress: ProgressCallback | None
             ) -> None:
    """Handle one message from a grading process; at its end (EOF), a process that
    sent no result is recorded as ``died``."""
    name, process = running[reader]
    try:
        kind, *value = reader.recv()
    except (EOFError, OSError):
        del running[reader]
        reader.close()
        process.join()
        finished.setdefault(name, ("died", describe_exit(process.exitcode,
                                                          "grading process")))
        return
    if kind == "progress":
        if on_progress is not None:
            on_progress(name, *value)
    else:
        finished[name] = (kind, value[0])


def _grade(name: str, adapter_path: str, options: dict[str, Any], messages: Connection
           ) -> None:
    """A grading process: runs the suite of adapter ``name`` (class at
    ``adapter_path``, registered here if it is not) and sends its progress and then
    its report (or its error) to ``messages``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        if name not in registered_adapters():
            load_adapter_class(adapter_path, f"conformance of {name}")
        report = _run_suite_reporting(
            name, options, lambda *progress: messages.send(("progress", *progress)),
            PROGRESS_INTERVAL)
    except Exception as exc:
        messages.send(("error", encode_error(exc)))
    else:
        messages.send(("report", report))
    messages.close()
