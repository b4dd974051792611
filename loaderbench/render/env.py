"""`loaderbench env`: the machine facts as a two-column table.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and len(value) > 16:
        out.append((prefix, f"{len(value)} items: {value[:8]}..."))
    else:
        out.append((prefix, "n/a" if value is None else str(value)))


def render_env(facts: dict[str, Any], warnings: list[str], console: Console) -> None:
    """`loaderbench env`: the machine facts as a two-column table, then warnings."""
    table = Table(title="loaderbench env", title_justify="left", show_header=False, pad_edge=False)
    table.add_column("fact", style="bold", no_wrap=True)
    table.add_column("value")
    rows: list[tuple[str, str]] = []
    _flatten("", facts, rows)
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    for w in warnings:
        console.print(Text(f"warning: {w}"))
