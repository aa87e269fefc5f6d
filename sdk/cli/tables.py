"""Tables of plain text, as the commands print them."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table


def add_row(table: Table, *cells: str) -> None:
    """A table row of plain text: brackets in a cell (``pip install 'polyhal[cpu]'``)
    are not rich markup."""
    table.add_row(*(escape(cell) for cell in cells))
