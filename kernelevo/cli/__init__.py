"""The `kernelevo` command. Thin: parse, call the library, print.

This module only assembles the top-level app from the command modules; they import kernelevo.cli.common
and never this package, so the modules form no import cycle (tests/test_cli.py checks it). Heavy imports
stay inside the commands, so that `kernelevo --help` answers at once.
"""
from __future__ import annotations

import faulthandler
import signal
import sys

import typer

from kernelevo.cli import archive, bench, evaluate, info, optimize, split, whole
from kernelevo.cli import archive_files  # noqa: F401 - registers export, import and report on archive.archive_app

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Evolve fast, verified CUDA kernels for PyTorch modules.")

# Registered in this order because `kernelevo --help` lists the commands in it.
app.command()(evaluate.evaluate)
app.command()(info.doctor)
app.command()(optimize.optimize)
app.command()(split.split)
app.command()(whole.assemble)
app.command()(info.models)
app.add_typer(archive.archive_app, name="archive")
app.add_typer(bench.bench_app, name="bench")


def main() -> None:
    """The console script: an interrupt ends with exit status 130 and one line, not a traceback. A run that
    seems stuck says where: `kill -USR1 PID` prints every thread's stack to stderr and the run goes on."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
