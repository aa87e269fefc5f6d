"""The docs site (mkdocs.yml over docs/) builds with warnings as errors.

This is where CI builds the site: the test suite runs in CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(config), "--site-dir", str(site)],
                          capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)


def test_site_builds_strict(tmp_path):
    result = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    for page in (ROOT / "docs").glob("*.md"):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (tmp_path / "site" / name).is_file(), f"{page.name} was not built"


def test_config_is_strict_and_lists_every_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True and config["docs_dir"] == "docs"

    def pages(nav):
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from pages(value) if isinstance(value, list) else [value]

    assert sorted(pages(config["nav"])) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


def test_a_broken_link_fails_the_build(tmp_path):
    """Strict mode is really on: the same config over docs with one dead link fails."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "index.md").open("a") as f:
        f.write("\nSee [nowhere](no-such-page.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().replace(
        "docs_dir: docs", f"docs_dir: {docs}"))
    result = _build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr
