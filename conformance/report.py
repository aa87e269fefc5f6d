"""Writing a conformance report: ``report.json``, ``report.md`` and ``report.html``."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

from polyhal.conformance.runner import OUTCOMES, Report

SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "crashed": "#6a1b9a",
           "timeout": "#ef6c00", "xfail": "#607d8b", "xpass": "#ad1457",
           "not_applicable": "#9e9e9e"}


def write_report(report: Report, folder: str | Path) -> list[Path]:
    """Write the three report files into ``folder``; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    doc = report.to_dict()
    paths = [folder / "report.json", folder / "report.md", folder / "report.html"]
    paths[0].write_text(json.dumps(doc, indent=1))
    paths[1].write_text(render_markdown(report))
    paths[2].write_text(render_html(report))
    return paths


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


def render_html(report: Report) -> str:
    """A self-contained HTML page: summary and the table of every case."""
    rows = []
    for c in report.cases:
        err = "" if c.max_abs_err is None else f"{c.max_abs_err:.3g}"
        rows.append(
            f"<tr data-level='{html.escape(c.level)}' data-outcome='{c.outcome}'>"
            f"<td><code>{html.escape(c.id)}</code></td><td>{html.escape(c.level)}</td>"
            f"<td style='color:{COLOURS[c.outcome]}'>{c.outcome}</td><td>{err}</td>"
            f"<td>{html.escape(c.message[:300])}</td></tr>")
    verdict = "PASS" if report.ok else "FAIL"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>polyhal conformance: {html.escape(report.adapter)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}</style></head>
<body><h1>Conformance report: {html.escape(report.adapter)}
{html.escape(report.adapter_version)}</h1>
<p><b>{verdict}</b>: {html.escape(_summary_line(report))}. Device
{html.escape(str(report.device['name']))}; polyhal {report.polyhal_version}; suite
{report.suite_version}; profile {report.profile}; precision {report.precision}; case set
<code>{report.case_set_hash[:16]}</code>.</p>
<table><thead><tr><th>case</th><th>level</th><th>outcome</th><th>max abs err</th>
<th>message</th></tr></thead><tbody>
{''.join(rows)}
</tbody></table></body></html>
"""
