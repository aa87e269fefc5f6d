"""The ``polyhal`` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from polyhal import __version__
from polyhal.errors import PolyhalError


def _cmd_ops(args: argparse.Namespace) -> int:
    from polyhal.ops import all_ops

    table = Table(title="polyhal ops")
    for column in ("op", "ONNX opset", "kind", "dtypes"):
        table.add_column(column)
    for op in all_ops(args.domain):
        kind = "composite" if op.decompose else "primitive"
        dtypes = ", ".join(sorted(d.value for d in op.all_dtypes()))
        table.add_row(op.qualified_name, str(op.onnx_since or ""), kind, dtypes)
    Console().print(table)
    return 0


def _cmd_gen_docs(args: argparse.Namespace) -> int:
    from polyhal.ops.reference_doc import render_op_reference

    text = render_op_reference()
    path = Path(args.out)
    if args.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{path} is stale: run `polyhal gen-docs`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="polyhal", description=__doc__)
    parser.add_argument("--version", action="version", version=f"polyhal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    ops = sub.add_parser("ops", help="list the registered ops")
    ops.add_argument("--domain", help="only this domain")
    ops.set_defaults(func=_cmd_ops)
    docs = sub.add_parser("gen-docs", help="regenerate docs/ops.md from the op registry")
    docs.add_argument("--out", default="docs/ops.md", help="where to write (default: %(default)s)")
    docs.add_argument("--check", action="store_true", help="only check that the file is current")
    docs.set_defaults(func=_cmd_gen_docs)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PolyhalError as exc:
        print(f"polyhal: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
