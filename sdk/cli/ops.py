"""``polyhal ops``: the registered ops."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from polyhal.cli.tables import add_row
from polyhal.errors import PolyhalError


def cmd_ops(args: argparse.Namespace) -> int:
    """List the registered ops (of ``--domain``) as a table."""
    from polyhal.ops import all_ops
    from polyhal.ops.registry import domains

    if args.domain is not None and args.domain not in domains():
        raise PolyhalError(f"--domain {args.domain!r}: no such op domain "
                           f"(domains: {', '.join(domains())})")
    table = Table(title="polyhal ops")
    for column in ("op", "ONNX opset", "kind", "dtypes"):
        table.add_column(column)
    for op in all_ops(args.domain):
        kind = "composite" if op.decompose else "primitive"
        dtypes = ", ".join(sorted(d.value for d in op.all_dtypes()))
        add_row(table, op.qualified_name, str(op.onnx_since or ""), kind, dtypes)
    Console().print(table)
    return 0
