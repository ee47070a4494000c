"""`kernelevo optimize --show-settings`: a search's resolved settings (kernelevo.evolution.settings.Resolved),
branch by branch, each with where its value came from (a flag, kernelevo.toml, the environment, or the
default), as the search would be given them."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ", ".join(_text(v) if not isinstance(v, tuple) else "=".join(map(str, v)) for v in value) or "-"
    return "-" if value is None else str(value)


def print_settings(resolved: Any) -> None:
    path = resolved.options.config.path
    read = f"; kernelevo.toml read from {path}" if path else "; no kernelevo.toml found"
    table = Table(title=f"settings as the search is given them{read}", title_justify="left")
    for column in ("setting", "value", "from"):
        table.add_column(column, overflow="fold")
    for setting, value, origin in resolved.rows():
        table.add_row(setting, _text(value), origin)
    Console().print(table)
