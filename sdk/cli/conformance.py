"""``polyhal conformance``: grading adapters against the reference, and ``--compare``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from polyhal.cli.adapters import is_builtin
from polyhal.cli.paths import writable_folder
from polyhal.errors import PolyhalError

if TYPE_CHECKING:
    from polyhal.conformance.runner import Report


def cmd_conformance(args: argparse.Namespace) -> int:
    """Grade the adapters (or ``--compare`` two sides); 1 when any adapter fails."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from polyhal.conformance.parallel import run_suites
    from polyhal.conformance.profiles import parse_levels
    from polyhal.conformance.report import write_report
    from polyhal.hal import get_adapter
    from polyhal.hal.host import host_cores

    if args.compare is not None:
        return _compare(args)
    left_out: dict[str, str] = {}
    names = args.adapters or _available_builtins(left_out)
    # Everything a run needs is checked before the first case: a typo must not
    # cost a full run, nor a report folder that cannot be written the run's results.
    for name in names:
        if names.count(name) > 1:
            raise PolyhalError(f"conformance: adapter {name!r} given twice")
        get_adapter(name)
    if args.level:
        parse_levels(args.level)
    folders = {name: _report_folder(Path(args.report) / name if len(names) > 1
                                    else Path(args.report), name)
               for name in names} if args.report is not None else {}
    console = Console(width=args.width)
    for name, why in left_out.items():
        console.print(f"adapter {name} left out: {why}", markup=False)
    if not args.level:
        from polyhal.conformance.levels import unavailable_levels

        for level, why in unavailable_levels().items():
            console.print(f"level {level} left out: {why}", markup=False)
    options = {"levels": args.level, "profile": args.profile, "precision": args.precision,
               "isolate": not args.no_isolate, "timeout": args.timeout}
    jobs = args.jobs or host_cores()
    all_ok = True
    with Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failures]} not passed"), console=console,
                  disable=args.quiet) as progress:
        tasks = {name: progress.add_task(name, total=None, failures=0) for name in names}

        def on_progress(name: str, done: int, total: int | None, failures: int) -> None:
            progress.update(tasks[name], completed=done, total=total, failures=failures)

        for name, report in run_suites(names, jobs, on_progress, **options):
            _print_report(progress.console, name, report)
            if args.report is not None:
                paths = write_report(report, folders[name])
                progress.console.print(f"  report: {', '.join(str(p) for p in paths)}",
                                       markup=False)
            all_ok &= report.ok
    return 0 if all_ok else 1


def _print_report(console: Console, name: str, report: Report) -> None:
    """The verdict, the counts per level and every case that did not pass."""
    from polyhal.conformance.runner import BAD_OUTCOMES

    summary = ", ".join(f"{v} {k}" for k, v in report.summary.items())
    verdict = "PASS" if report.ok else "FAIL"
    console.print(f"{name}: {verdict} ({summary}) in {report.duration_s:.1f} s; coverage "
                  + ", ".join(f"{d} {c['claimed']}/{c['total']}"
                              for d, c in report.coverage.items()), markup=False)
    for level in report.levels:
        cases = [c for c in report.cases if c.level == level]
        skipped = sum(c.outcome == "not_applicable" for c in cases)
        ran = len(cases) - skipped
        if cases:
            passed = sum(c.outcome == "passed" for c in cases)
            listed = sum(c.outcome == "xfail" for c in cases)
            console.print(f"  {level}: {ran} cases run, {passed} passed "
                          f"({100 * passed / max(ran, 1):.1f}%), {listed} listed as expected "
                          f"failures, {ran - passed - listed} other"
                          + (f"; {skipped} not applicable (see the report)" if skipped
                             else ""), markup=False)
    for case in report.cases:
        if case.outcome in BAD_OUTCOMES:
            console.print(f"  {case.outcome:8} {case.id}: {case.message[:200]}", markup=False)


def _available_builtins(left_out: dict[str, str]) -> list[str]:
    """The built-in adapters with an available device, each other one put in
    ``left_out`` with why its devices are unavailable; none is an error naming
    ``POLYHAL_ADAPTERS`` when it narrowed the set."""
    from polyhal.hal import adapters, get_adapter

    names = []
    for name in (n for n in adapters() if is_builtin(n)):
        devices = get_adapter(name).probe()
        if any(d.available for d in devices):
            names.append(name)
        else:
            reasons = dict.fromkeys(d.reason for d in devices if d.reason)
            left_out[name] = "; ".join(reasons) or "it has no device"
    if not names:
        wanted = os.environ.get("POLYHAL_ADAPTERS", "").strip()
        raise PolyhalError(f"conformance: POLYHAL_ADAPTERS={wanted!r} selects no built-in "
                           "adapter with an available device: name adapters to grade, or "
                           "fix or unset the variable" if wanted else
                           "conformance: no built-in adapter has an available device: name "
                           "the adapters to grade")
    return names


def _report_folder(folder: Path, adapter: str) -> Path:
    """``folder``, made, once it is clear that ``adapter``'s report may be written
    there (:func:`~polyhal.conformance.report.check_report_folder`)."""
    from polyhal.conformance.report import check_report_folder
    from polyhal.errors import ConformanceError

    folder = writable_folder(folder, "--report")
    try:
        check_report_folder(folder, adapter)
    except ConformanceError as exc:
        raise ConformanceError(f"--report {exc}") from None
    return folder


def _compare(args: argparse.Namespace) -> int:
    from polyhal.conformance.compare import compare, resolve_sides
    from polyhal.hal.host import host_cores

    if args.adapters or args.report is not None:
        raise PolyhalError("conformance --compare A B takes its two sides only (adapter names "
                           "or report.json paths), not NAME arguments or --report")
    options = {"precision": args.precision, "isolate": not args.no_isolate,
               "timeout": args.timeout}
    a, b = resolve_sides(args.compare, args.level, args.profile,
                         jobs=args.jobs or host_cores(), **options)
    print(compare(a, b).render())
    return 0
