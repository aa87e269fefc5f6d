"""Writing a conformance report: ``report.json``, ``report.md`` and ``report.html``."""

from __future__ import annotations

import html
import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

from polyhal.conformance.runner import OUTCOMES, CaseResult, Report
from polyhal.errors import ConformanceError, PolyhalError
from polyhal.files import read_limited, write_atomically

SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "crashed": "#6a1b9a",
           "timeout": "#ef6c00", "xfail": "#607d8b", "xpass": "#ad1457",
           "not_applicable": "#9e9e9e"}


REPORT_FILES = ("report.json", "report.md", "report.html")
"""The files :func:`write_report` writes into its folder."""
MAX_REPORT_BYTES = 256 * 2**20
"""The largest ``report.json`` read back (a ``full`` run of every level is a few MB)."""


def write_report(report: Report, folder: str | Path) -> list[Path]:
    """Write the three report files into ``folder``; returns their paths.

    Each file is written atomically. An earlier report of the same adapter there
    is replaced; anything else is refused (see :func:`check_report_folder`). A
    folder or file that cannot be written is a :class:`ConformanceError` naming it."""
    folder = Path(folder)
    check_report_folder(folder, report.adapter)
    texts = {"report.json": json.dumps(report.to_dict(), indent=1),
             "report.md": render_markdown(report), "report.html": render_html(report)}
    paths = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            paths.append(folder / name)
            write_atomically(paths[-1], text.encode("utf-8"))
    except OSError as exc:
        where = paths[-1] if paths else folder
        raise ConformanceError(f"{where}: cannot write the report "
                               f"({exc.strerror or exc})") from None
    return paths


def check_report_folder(folder: str | Path, adapter: str) -> None:
    """Refuse, before any work, a ``folder`` where writing ``adapter``'s report would
    destroy something: a report file that is a symbolic link or not a plain file,
    or report files beside a ``report.json`` that is not ``adapter``'s earlier
    report. A :class:`ConformanceError` names the file."""
    folder = Path(folder)
    present = [folder / name for name in REPORT_FILES if os.path.lexists(folder / name)]
    for path in present:
        if path.is_symlink():
            raise ConformanceError(f"{path}: cannot write the report (it is a symbolic link, "
                                   "and polyhal never writes through one)")
        if not path.is_file():
            raise ConformanceError(f"{path}: cannot write the report (it exists and is not "
                                   "a file)")
    if not present:
        return
    previous = _report_adapter(folder / "report.json")
    if previous != adapter:
        found = (f"holds the report of adapter {previous!r}" if previous
                 else "holds report files that are not a polyhal conformance report")
        raise ConformanceError(f"{folder} {found}: nothing was written, to keep it; "
                               f"choose another folder for the report of {adapter!r}")


def _report_adapter(path: Path) -> str | None:
    """The adapter of the conformance report at ``path``; None when it is not one."""
    try:
        doc = read_report_json(path)
    except PolyhalError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        return None
    adapter = doc.get("adapter")
    return adapter if isinstance(adapter, str) else None


def read_report_json(path: str | Path) -> Any:
    """The JSON document in ``path``, a regular file of at most
    :data:`MAX_REPORT_BYTES`; anything else is a :class:`PolyhalError` naming it."""
    path = Path(path)
    data = read_limited(path, MAX_REPORT_BYTES, "report")  # never opens a FIFO to wait
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolyhalError(f"{path} is not JSON: {exc}") from None
    except RecursionError:
        raise PolyhalError(f"{path} is not a conformance report: its JSON is nested too "
                           "deeply") from None


def _summary_line(report: Report) -> str:
    return ", ".join(f"{report.summary[o]} {o}" for o in OUTCOMES)


def render_markdown(report: Report) -> str:
    """The report as Markdown: summary, coverage, per-level counts and every problem."""
    lines = [f"# Conformance report: {report.adapter} {report.adapter_version}", "",
             f"- verdict: **{'PASS' if report.ok else 'FAIL'}** ({_summary_line(report)})",
             f"- device: {report.device['name']} ({report.device['address']})",
             f"- polyhal {report.polyhal_version}, suite {report.suite_version}, tolerances "
             f"v{report.tolerance_version}, profile `{report.profile}`, precision "
             f"`{report.precision}`, seeds {report.seeds}",
             f"- case set: `{report.case_set_hash[:16]}`", f"- started {report.started}, took "
             f"{report.duration_s:.1f} s", "", "## Coverage", "",
             "| domain | claimed ops | of |", "| --- | --- | --- |"]
    lines += [f"| {d} | {c['claimed']} | {c['total']} |" for d, c in report.coverage.items()]
    lines += ["", "## Levels", "", "| level | " + " | ".join(OUTCOMES) + " |",
              "| --- |" + " --- |" * len(OUTCOMES)]
    for level in report.levels:
        counts = Counter(c.outcome for c in report.cases if c.level == level)
        if counts:
            lines.append(f"| {level} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
    lines += _by_op(report, "onnx")
    problems = [c for c in report.cases if c.outcome not in ("passed", "not_applicable")]
    if problems:
        lines += ["", "## Cases not passed", "", "| case | outcome | message |",
                  "| --- | --- | --- |"]
        lines += [f"| `{c.id}` | {c.outcome} | {_cell(c.message)} |" for c in problems]
    lines += _not_applicable(report)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")[:300]


def _not_applicable(report: Report) -> list[str]:
    """Cases that did not apply, by level and op: how many, and the first one's reason."""
    groups: dict[tuple[str, str], list] = {}
    for c in report.cases:
        if c.outcome == "not_applicable":
            groups.setdefault((c.level, c.op or "?"), []).append(c)
    if not groups:
        return []
    lines = ["", "## Not applicable", "", "Cases generated from what the device claims that "
             "do not apply to it (every case id is in `report.json`).", "",
             "| level | op | cases | reason (first case) |", "| --- | --- | --- | --- |"]
    for (level, op), cases in groups.items():
        lines.append(f"| {level} | {op} | {len(cases)} | `{cases[0].id}`: "
                     f"{_cell(cases[0].message)} |")
    return lines


def _by_op(report: Report, level: str) -> list[str]:
    """A per-op pass-rate table of one level (empty when the level did not run)."""
    cases = [c for c in report.cases if c.level == level]
    if not cases:
        return []
    lines = ["", f"## {level} by op", "", "| op | cases | passed | pass rate |",
             "| --- | --- | --- | --- |"]
    for op in sorted({c.op or "?" for c in cases}):
        mine = [c for c in cases if (c.op or "?") == op]
        passed = sum(c.outcome == "passed" for c in mine)
        lines.append(f"| {op} | {len(mine)} | {passed} | {100 * passed / len(mine):.0f}% |")
    return lines


SEVERITY = ("crashed", "timeout", "failed", "xpass", "xfail", "passed", "not_applicable")
"""Outcomes from worst to best: a matrix cell shows the worst outcome of its cases."""
LABELS = {"passed": "all passed", "failed": "some failed", "crashed": "some crashed",
          "timeout": "some timed out", "xfail": "expected failures (manifest)",
          "xpass": "unexpected passes (manifest stale)", "not_applicable": "not applicable"}
NO_VALUE = "(none)"
"""The row or column label of cases without an op or a dtype."""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
"""The page loads nothing from anywhere: only its inline style and script run."""

_STYLE = """body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}
th.op{text-align:left;font-weight:normal;white-space:nowrap}
td.cell{color:#fff;text-align:center;min-width:4em;cursor:default}
td.cell.filtered{visibility:hidden}tr.filtered,section.filtered{display:none}
.swatch{display:inline-block;width:1em;height:1em;vertical-align:middle;margin-right:.3em}
#filters label,#legend span.item{margin-right:1.2em;white-space:nowrap}
#filters,#legend{margin:.6em 0}"""

_SCRIPT = """(function () {
  'use strict';
  var level = document.getElementById('level-filter');
  var boxes = document.querySelectorAll('#filters input[type=checkbox]');
  function apply() {
    var shown = {};
    boxes.forEach(function (box) { shown[box.value] = box.checked; });
    document.querySelectorAll('section.level').forEach(function (section) {
      var on = level.value === '' || section.dataset.level === level.value;
      section.classList.toggle('filtered', !on);
      section.querySelectorAll('tr.op-row').forEach(function (row) {
        var any = false;
        row.querySelectorAll('td.cell').forEach(function (cell) {
          var visible = shown[cell.dataset.outcome] === true;
          cell.classList.toggle('filtered', !visible);
          any = any || visible;
        });
        row.classList.toggle('filtered', !any);
      });
    });
    document.querySelectorAll('#cases tbody tr').forEach(function (row) {
      var on = (level.value === '' || row.dataset.level === level.value)
        && shown[row.dataset.outcome] === true;
      row.classList.toggle('filtered', !on);
    });
  }
  level.addEventListener('change', apply);
  boxes.forEach(function (box) { box.addEventListener('change', apply); });
  apply();
}());"""


def _esc(value: object) -> str:
    """``value`` as HTML text or a double-quoted attribute value."""
    return html.escape(str(value), quote=True)


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _tolerance(tolerance: dict[str, float] | None) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in tolerance.items()) if tolerance else "-"


def _cell_outcome(cases: list[CaseResult]) -> str:
    """The worst outcome among ``cases``."""
    present = {c.outcome for c in cases}
    return next(o for o in SEVERITY if o in present)


def _max_err(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return max(known) if known else None


def _matrix_cell(cases: list[CaseResult], op: str, dtype: str) -> str:
    """One matrix cell: the worst outcome's colour, passed/total, details on hover."""
    outcome = _cell_outcome(cases)
    counts = Counter(c.outcome for c in cases)
    tolerances = sorted({_tolerance(c.tolerance) for c in cases if c.tolerance})
    title = "\n".join([f"{op} / {dtype}: {LABELS[outcome]}",
                       ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]),
                       f"max abs err {_err(_max_err([c.max_abs_err for c in cases]))}, "
                       f"max rel err {_err(_max_err([c.max_rel_err for c in cases]))}",
                       f"tolerance {'; '.join(tolerances) or '-'}"])
    return (f'<td class="cell" data-outcome="{_esc(outcome)}" '
            f'style="background:{COLOURS[outcome]}" title="{_esc(title)}">'
            f'{counts["passed"]}/{len(cases)}</td>')


def _matrix(report: Report, level: str, index: int) -> str:
    """The op x dtype matrix of one level (empty when the level has no case)."""
    cells: dict[tuple[str, str], list[CaseResult]] = {}
    for case in report.cases:
        if case.level == level:
            cells.setdefault((case.op or NO_VALUE, case.dtype or NO_VALUE), []).append(case)
    if not cells:
        return ""
    ops = sorted({op for op, _ in cells})
    dtypes = sorted({dtype for _, dtype in cells})
    head = "".join(f"<th>{_esc(d)}</th>" for d in dtypes)
    rows = []
    for op in ops:
        row = "".join(_matrix_cell(cells[op, d], op, d) if (op, d) in cells else "<td></td>"
                      for d in dtypes)
        rows.append(f'<tr class="op-row"><th class="op">{_esc(op)}</th>{row}</tr>')
    count = sum(len(v) for v in cells.values())
    return (f'<section class="level" id="level-{index}" data-level="{_esc(level)}">'
            f"<h2>{_esc(level)}</h2><p>{count} cases; a cell shows passed/total of its "
            f"op and dtype, coloured by its worst outcome.</p>"
            f'<table class="matrix"><thead><tr><th>op \\ dtype</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></section>")


def render_html(report: Report) -> str:
    """A self-contained HTML page (no external assets): summary, legend, filters, an
    op x dtype matrix per level and the list of every case."""
    levels = [lv for lv in report.levels if any(c.level == lv for c in report.cases)]
    legend = "".join(f'<span class="item"><span class="swatch" style="background:'
                     f'{COLOURS[o]}"></span>{_esc(o)}: {_esc(LABELS[o])}</span>'
                     for o in SEVERITY)
    options = "".join(f'<option value="{_esc(lv)}">{_esc(lv)}</option>' for lv in levels)
    boxes = "".join(f'<label><input type="checkbox" value="{_esc(o)}" checked> {_esc(o)}'
                    f" ({report.summary[o]})</label>" for o in SEVERITY)
    matrices = "".join(_matrix(report, lv, i) for i, lv in enumerate(levels))
    rows = "".join(
        f'<tr data-level="{_esc(c.level)}" data-outcome="{_esc(c.outcome)}">'
        f"<td><code>{_esc(c.id)}</code></td><td>{_esc(c.level)}</td>"
        f'<td style="color:{COLOURS[c.outcome]}">{_esc(c.outcome)}</td>'
        f"<td>{_err(c.max_abs_err)}</td><td>{_err(c.max_rel_err)}</td>"
        f"<td>{_esc(_tolerance(c.tolerance))}</td><td>{_esc(c.message[:300])}</td></tr>"
        for c in report.cases)
    verdict = "PASS" if report.ok else "FAIL"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>polyhal conformance: {_esc(report.adapter)}</title>
<style>{_STYLE}</style></head>
<body><h1>Conformance report: {_esc(report.adapter)} {_esc(report.adapter_version)}</h1>
<p><b>{verdict}</b>: {_esc(_summary_line(report))}. Device
{_esc(report.device['name'])} ({_esc(report.device['address'])}); polyhal
{_esc(report.polyhal_version)}; suite {_esc(report.suite_version)}; tolerances
v{_esc(report.tolerance_version)}; profile {_esc(report.profile)}; precision
{_esc(report.precision)}; seeds {_esc(report.seeds)}; case set
<code>{_esc(report.case_set_hash[:16])}</code>; started {_esc(report.started)}, took
{report.duration_s:.1f} s.</p>
<div id="legend">{legend}</div>
<form id="filters" onsubmit="return false"><label>level <select id="level-filter">
<option value="">all levels</option>{options}</select></label>{boxes}</form>
{matrices}
<details id="cases"><summary>All {len(report.cases)} cases</summary>
<table><thead><tr><th>case</th><th>level</th><th>outcome</th><th>max abs err</th>
<th>max rel err</th><th>tolerance</th><th>message</th></tr></thead><tbody>
{rows}
</tbody></table></details>
<script>{_SCRIPT}</script></body></html>
"""
