"""`kernelevo doctor` and `kernelevo models`: what this machine and this configuration offer a run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kernelevo.cli.common import config_or_fail, fail


def doctor(
    as_json: bool = typer.Option(False, "--json", help="print the findings as JSON"),
    ray_address: Optional[str] = typer.Option(None, help="also list this Ray cluster's nodes and GPUs "
                                              "[default: $RAY_ADDRESS]"),
) -> None:
    """What this machine offers kernelevo: GPUs, driver, compilers, profilers, embedder, API keys, a Ray cluster."""
    from kernelevo.cli.doctor import collect, print_findings

    findings = collect(config_or_fail(None).embed_model(), ray_address)
    if as_json:
        typer.echo(json.dumps(findings, indent=2))
    else:
        print_findings(findings)


def models(
    as_json: bool = typer.Option(False, "--json", help="print the table as JSON"),
    config: Optional[Path] = typer.Option(None, help="kernelevo.toml to read [default: ./kernelevo.toml, "
                                          "then ~/.config/kernelevo/kernelevo.toml]"),
) -> None:
    """The model table (prices per million tokens, limits, edit format) and your \\[models.ALIAS] names."""
    from kernelevo.agent.models import table_rows
    from kernelevo.config import ConfigError, load_config

    try:
        rows = table_rows(load_config(config))
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from kernelevo.cli.views.tables import print_models

    print_models(rows)
