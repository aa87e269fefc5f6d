"""``polyhal gen-docs``: the op reference page and the contract reference in the HAL page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from polyhal.cli.paths import check_target
from polyhal.errors import PolyhalError
from polyhal.files import write_atomically


def cmd_gen_docs(args: argparse.Namespace) -> int:
    """Rewrite the stale pages among ``--out`` and ``--hal`` (with ``--check``, only
    list them; 1 when any is stale)."""
    from polyhal.hal.contract_doc import updated_hal_page
    from polyhal.ops.reference_doc import render_op_reference

    hal_page, out = Path(args.hal), Path(args.out)
    if not hal_page.is_file():
        raise PolyhalError(f"--hal {hal_page}: no such file")
    if out.is_dir():
        raise PolyhalError(f"--out {out}: is a folder, not the op reference page")
    if out.exists() and out.samefile(hal_page):
        raise PolyhalError(f"--out {out} and --hal {hal_page} are the same file: the op "
                           "reference and the contract reference are two pages")
    current = _read_page(hal_page, "--hal")
    if current is None:
        raise PolyhalError(f"--hal {hal_page}: not UTF-8 text")
    pages = {out: render_op_reference(), hal_page: updated_hal_page(current, hal_page)}
    stale = [path for path, text in pages.items()
             if _read_page(path, "--out" if path == out else "--hal") != text]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run `polyhal gen-docs`", file=sys.stderr)
        if not stale:
            print(f"{' and '.join(map(str, pages))} are up to date")
        return 1 if stale else 0
    for path in stale:
        option = "--out" if path == out else "--hal"
        check_target(path, option, {}, overwrite=True)
        try:
            write_atomically(path, pages[path].encode("utf-8"))
        except OSError as exc:
            raise PolyhalError(f"{option} {path}: cannot write the page "
                               f"({exc.strerror or exc})") from None
        print(f"wrote {path}")
    return 0


def _read_page(path: Path, option: str) -> str | None:
    """The text of the page ``path``; None when it is missing or not UTF-8 (stale)."""
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    except OSError as exc:
        raise PolyhalError(f"{option} {path}: cannot read the page "
                           f"({exc.strerror or exc})") from None
