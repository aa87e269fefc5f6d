"""Comparing two conformance results: what one passes that the other does not.

Each side is an adapter name (the suite runs against it) or a report: a
``report.json`` file, or a folder holding one, as ``--report`` writes it. The
name of an adapter is the adapter, even where a folder of that name exists
(``./NAME`` is the folder); anything else is a path."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyhal.errors import AdapterContractError, PolyhalError
from polyhal.hal.checks import ADAPTER_NAME

MISSING = "missing"
"""The outcome shown for a case id that the other side does not have."""


@dataclass
class Side:
    """One side of a comparison: its name and every case's outcome, by case id."""

    name: str
    outcomes: dict[str, str]
    groups: dict[str, tuple[str, str]]
    """Every case id's (op, dtype), ``-`` where the case has none."""


@dataclass
class Comparison:
    """Case ids that ``a`` passes and ``b`` does not (``a_only``), and the reverse."""

    a: Side
    b: Side
    a_only: list[str]
    b_only: list[str]

    def render(self) -> str:
        """The comparison as text: both directions, grouped by op and dtype, with counts."""
        lines = [f"{self.a.name}: {len(self.a.outcomes)} cases, "
                 f"{_passed(self.a)} passed; {self.b.name}: {len(self.b.outcomes)} cases, "
                 f"{_passed(self.b)} passed"]
        for winner, loser, ids in ((self.a, self.b, self.a_only),
                                   (self.b, self.a, self.b_only)):
            lines.append(f"{winner.name} passes {len(ids)} case(s) that {loser.name} does not"
                         + (":" if ids else "."))
            grouped: dict[tuple[str, str], list[str]] = {}
            for case_id in ids:
                grouped.setdefault(winner.groups[case_id], []).append(case_id)
            for (op, dtype), members in sorted(grouped.items()):
                lines.append(f"  {op} {dtype} ({len(members)}):")
                lines += [f"    {case_id} [{loser.name}: "
                          f"{loser.outcomes.get(case_id, MISSING)}]" for case_id in members]
        return "\n".join(lines)


def _passed(side: Side) -> int:
    return sum(o == "passed" for o in side.outcomes.values())


def compare(a: Side, b: Side) -> Comparison:
    """Which case ids each side passes that the other does not pass (or lacks)."""
    def only(x: Side, y: Side) -> list[str]:
        return [i for i, o in x.outcomes.items()
                if o == "passed" and y.outcomes.get(i) != "passed"]

    return Comparison(a, b, only(a, b), only(b, a))


def side_from_report(doc: dict[str, Any], name: str) -> Side:
    """A side from a ``report.json`` document (already valid against the schema)."""
    cases = doc["cases"]
    return Side(name, {c["id"]: c["outcome"] for c in cases},
                {c["id"]: (c["op"] or "-", c["dtype"] or "-") for c in cases})


def load_report(path: str | Path) -> dict[str, Any]:
    """Read ``path`` (a ``report.json`` or a folder holding one) and check it against
    the report schema; a missing, unreadable, oversized or malformed file is a
    ``PolyhalError``."""
    import jsonschema

    from polyhal.conformance.report import SCHEMA_PATH, read_report_json

    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    doc = read_report_json(path)
    schema = json.loads(SCHEMA_PATH.read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise PolyhalError(f"{path} is not a conformance report: at {where}: "
                           f"{error.message[:200]}")
    return doc


def is_report_path(source: str) -> bool:
    """Whether the side ``source`` is a report path rather than an adapter name: it is
    when it cannot be an adapter name (it holds ``/``, ``.``, a capital...), or names
    no adapter but a file or folder that exists. The name of an adapter is always the
    adapter, even where a folder of that name exists: ``./NAME`` is the folder."""
    from polyhal.hal import adapters

    if not ADAPTER_NAME.fullmatch(source):
        return True
    return source not in adapters() and Path(source).exists()


def resolve_sides(sources: Sequence[str], levels: Sequence[str] | None, profile: str,
                  jobs: int = 1, **run_options: Any) -> list[Side]:
    """The sides ``sources`` name: a report path is loaded; an adapter name is run with
    ``levels``, ``profile`` and ``run_options`` (see :func:`run_suite`), two at a time
    when ``jobs`` allows (:func:`~polyhal.conformance.parallel.run_suites`), once
    when named twice. Every report is read and every adapter name checked before
    the first run."""
    from polyhal.conformance.parallel import run_suites
    from polyhal.conformance.profiles import parse_levels

    loaded = {}
    for source in sources:
        if is_report_path(source):
            doc = load_report(source)
            loaded[source] = side_from_report(doc, f"{doc['adapter']} ({source})")
        else:
            _check_adapter(source)
    if levels and len(loaded) < len(sources):
        parse_levels(levels)
    names = list(dict.fromkeys(s for s in sources if s not in loaded))
    for name, report in run_suites(names, jobs, levels=levels, profile=profile,
                                   **run_options):
        loaded[name] = side_from_report(report.to_dict(), name)
    return [loaded[source] for source in sources]


def _check_adapter(name: str) -> None:
    """A :class:`PolyhalError` unless adapter ``name`` exists (no file or folder of
    that name does: :func:`is_report_path`)."""
    from polyhal.hal import get_adapter

    try:
        get_adapter(name)
    except AdapterContractError:
        raise
    except PolyhalError as exc:
        raise PolyhalError(f"{exc}; nor is there a report file or folder {name!r}") from None
