"""polyhal new-adapter: a target that cannot be written is an error naming the path,
and a failure leaves nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from polyhal.cli import main
from polyhal.errors import PolyhalError
from polyhal.scaffold import scaffold

LINUX = sys.platform.startswith("linux")


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_file_in_the_way_of_dir_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(PolyhalError, match=r"afile/sub/polyhal-acme: .*afile/sub: Not a "
                                           "directory; nothing was written"):
        scaffold("acme", tmp_path / "afile" / "sub")
    assert _tree(tmp_path) == ["afile"]


@pytest.mark.skipif(not LINUX, reason="/proc and /sys are Linux's")
@pytest.mark.parametrize("parent", ["/proc/self", "/sys/kernel"])
def test_a_folder_that_cannot_hold_files_is_named(parent):
    with pytest.raises(PolyhalError, match=rf"package {parent}/polyhal-acme: {parent}: "):
        scaffold("acme", parent)


def test_a_name_too_long_for_the_file_system_leaves_no_folder_behind(tmp_path):
    name = "a" + "b" * 300
    with pytest.raises(PolyhalError, match="File name too long; nothing was written"):
        scaffold(name, tmp_path / "new" / "deeper")
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("points_at", ["an empty folder", "nothing"])
def test_a_symbolic_link_as_the_target_is_refused(tmp_path, points_at):
    (tmp_path / "empty").mkdir()
    link = tmp_path / "polyhal-acme"
    link.symlink_to(tmp_path / ("empty" if points_at == "an empty folder" else "absent"))
    with pytest.raises(PolyhalError, match=r"polyhal-acme is a symbolic link: nothing was "
                                           "written"):
        scaffold("acme", tmp_path)
    assert _tree(tmp_path) == ["empty", "polyhal-acme"] and link.is_symlink()


def test_the_command_reports_an_unwritable_target_in_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["new-adapter", "acme", "--dir", str(tmp_path / "afile" / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("polyhal: error: cannot write the 'acme' adapter package")
    assert err.count("\n") == 1


def test_a_name_left_out_by_polyhal_adapters_is_still_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYHAL_ADAPTERS", "nope")
    with pytest.raises(PolyhalError, match=r"adapter named 'template' is already installed "
                                           r"\(polyhal\.adapters\.template:TemplateAdapter, "
                                           "left out of this process by POLYHAL_ADAPTERS"):
        scaffold("template", tmp_path)
    assert _tree(tmp_path) == []


def test_an_empty_dir_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["new-adapter", "acme", "--dir", ""])
    assert "argument --dir: an empty path names no file" in capsys.readouterr().err
