"""The HTML report in headless Chromium: no console errors, the filters change the
matrix, hostile strings are escaped; a screenshot is saved."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from polyhal.conformance.report import write_report
from polyhal.conformance.runner import run_suite


@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    report = run_suite("template", levels=["L0", "L1"], profile="ci")
    hostile = dataclasses.replace(report.cases[-1], id="L1/<script>alert(1)</script>/x",
                                  op="<script>alert(1)</script>", outcome="failed",
                                  message="<img src=x onerror=alert(2)>", max_abs_err=0.5)
    report.cases.append(hostile)
    paths = write_report(report, tmp_path_factory.mktemp("report"))
    return next(p for p in paths if p.suffix == ".html")


def test_the_report_opens_and_filters_in_headless_chromium(report_html, tmp_path):
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Chromium is missing: scripts/test.sh installs it (apt package chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: errors.append(f"a dialog opened: {d.message}"))
        page.goto(report_html.as_uri())

        def visible(selector: str) -> int:
            return page.locator(selector).evaluate_all(
                "els => els.filter(e => e.offsetParent !== null"
                " && getComputedStyle(e).visibility !== 'hidden').length")

        cells = visible("section.level td.cell")
        assert cells > 10
        assert page.locator("th.op", has_text="<script>alert(1)</script>").count() == 1
        page.uncheck("#filters input[value=passed]")  # only the failed cell stays
        assert visible("section.level td.cell") == 1
        page.check("#filters input[value=passed]")
        page.select_option("#level-filter", "L0")
        l0_cells = visible("section.level td.cell")
        assert 0 < l0_cells < cells
        screenshot = tmp_path / "report.png"
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert errors == []
