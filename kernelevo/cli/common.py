"""What more than one `kernelevo` command module needs: exits, devices, messages, archive access and the
options several commands share.

Imports no other kernelevo.cli module, so every command module can import it without a cycle; heavy
imports (torch, rich, the archive store) stay inside the functions, so `kernelevo --help` answers at once.
Data goes to stdout, notes and errors to stderr, so a pipe receives only data.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer

if TYPE_CHECKING:
    from kernelevo.archive.store import Archive

# Options shared by several commands, declared once so that they read the same everywhere.
ArchiveOpt = Annotated[Optional[Path], typer.Option(
    "--archive", help="archive file (default: archive = in kernelevo.toml, else ~/.local/share/kernelevo/archive.sqlite)")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="kernelevo.toml (default: ./kernelevo.toml)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON on stdout")]
CsvOpt = Annotated[bool, typer.Option("--csv", help="print CSV on stdout")]
CacheDirOpt = Annotated[Optional[Path], typer.Option(
    help="build and baseline cache [default: ~/.cache/kernelevo]")]
CompileBaselineOpt = Annotated[bool, typer.Option(help="also compare with torch.compile (cached per task and GPU)")]
BaselineOpt = Annotated[Optional[str], typer.Option(
    help="what kernels must beat, the speedup the search ranks them by: compile (torch.compile, where it runs) or "
         "eager [default: baseline = in kernelevo.toml, else compile]")]
ShapesOpt = Annotated[str, typer.Option(
    help="general: also check shapes the judge derives (other batch and inner sizes); a kernel that refuses them "
         "cleanly is marked specialized; exact: the task's shapes only")]

# The search's options, shared by optimize and bench (whose limits apply per task).
ModelOpt = Annotated[Optional[list[str]], typer.Option(
    "--model", help="anthropic:MODEL, openai:MODEL, local:MODEL@URL or a \\[models.ALIAS] of kernelevo.toml; repeat it "
    "for an ensemble, each call's model chosen by what its replies earn \\[default: kernelevo.toml's ensemble, else "
    "by the API key set; resuming: the run's own]")]
ModelForOpt = Annotated[Optional[list[str]], typer.Option(
    "--model-for", help="OPERATOR=MODEL: every call of that operator goes to MODEL, e.g. reflect=smart (repeatable) "
    "[default: kernelevo.toml's \\[model_for]]")]
DeviceOpt = Annotated[Optional[str], typer.Option(
    help="cuda or cpu (C kernels on the CPU backend) [default: cuda if present]")]
GpusOpt = Annotated[str, typer.Option(help="GPUs to judge on: all, or indices such as 0,1 (one judge worker each)")]
ExecutorOpt = Annotated[Optional[str], typer.Option(
    help="where judge jobs run: local (this machine) or ray (the GPUs of a Ray cluster) "
         "[default: kernelevo.toml's executor, else local]")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    help="with --executor ray: the cluster's address [default: $RAY_ADDRESS, else a cluster started here]")]
FormatOpt = Annotated[Optional[str], typer.Option("--format", help="candidate format asked for: nvrtc (default on a "
                                                  "GPU), inline, triton, c (the CPU), or auto (CUDA and Triton "
                                                  "side by side, the search learns which pays) "
                                                  "[default: kernelevo.toml's format]")]
GenerationsOpt = Annotated[Optional[int], typer.Option(help="stop after this many generations")]
PlateauOpt = Annotated[Optional[int], typer.Option(help="stop after this many generations without a new best")]
ChildrenOpt = Annotated[int, typer.Option(min=1, help="judged children per generation")]
IslandsOpt = Annotated[int, typer.Option(min=1, help="islands (sub-populations that exchange their best)")]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, help="LLM calls in flight at once")]
ProfileTopOpt = Annotated[int, typer.Option(min=0, help="new bests profiled per generation, for the prompts (0: none)")]
NcuOpt = Annotated[bool, typer.Option(help="profiles include Nsight Compute metrics when ncu is installed")]
SeedOpt = Annotated[int, typer.Option(help="seed of the search's random choices and of the judge's inputs")]
PolicyOpt = Annotated[str, typer.Option(help="mixed or strict (see `kernelevo evaluate --help`)")]
TrialsOpt = Annotated[int, typer.Option(min=1, help="correctness trials per candidate, each with fresh inputs")]
TimingSecondsOpt = Annotated[float, typer.Option(min=0.05, help="seconds spent timing each candidate (less: faster, "
                                                 "noisier)")]


EXIT_INTERRUPTED = 130  # Ctrl-C: everything stored, resumable


def exit_interrupted() -> NoReturn:
    """Exit with EXIT_INTERRUPTED, also where a thread did not stop (a bench task's search stuck where it never
    looks at the key): the interpreter would wait for it at exit forever. What it did is stored as it went, and a
    resume takes it up as after a kill; the judge's processes end on their own once this one is gone."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_INTERRUPTED)
EXIT_NOTHING_PLACED = 3  # a whole model's assembly placed no kernel: its line says which compile mode to run


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, a non-zero exit: every usage error ends here."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def check_choice(option: str, value: Optional[str], choices: Sequence[str]) -> None:
    """Fail unless VALUE is one of CHOICES: for string options whose values typer does not check."""
    if value not in choices:
        fail(f"{option} {value}: use {', '.join(choices[:-1])} or {choices[-1]}")


def note(text: str) -> None:
    """A plain line on stderr: a count or a hint beside the data, never mixed into it."""
    typer.echo(text, err=True)


def say(text: str) -> None:
    """A message on stderr, wrapped to the terminal's width."""
    from rich.console import Console

    Console(stderr=True).print(text, markup=False, highlight=False)


def resolve_device(device: Optional[str]) -> str:
    """--device as the judge takes it: cuda:N or cpu, checked against the devices this machine has."""
    from kernelevo.evolution.settings import SettingsError, device_of

    try:
        return device_of(device)
    except SettingsError as exc:
        fail(str(exc))


def duration(text: Optional[str]) -> Optional[float]:
    """'90', '90s', '30m', '2h' as seconds."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except ValueError:
        fail(f"--max-wall-time {text}: use seconds, or a number with s, m or h (e.g. 30m)")


def config_or_fail(path: Optional[Path]) -> Any:
    """kernelevo.toml (--config, else the default places), or its one-line error and exit 2."""
    from kernelevo.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(str(exc))


def archive_path(archive: Optional[Path], config: Optional[Path]) -> Path:
    """Where the archive is, as `kernelevo optimize` finds it: --archive, kernelevo.toml, the default."""
    return config_or_fail(config).archive_path(archive)


@contextmanager
def opened(archive: Optional[Path], config: Optional[Path]) -> Iterator[Archive]:
    """The archive, found as `kernelevo optimize` finds it, opened read-only: looking never changes a run's
    record, even while a run writes."""
    import sqlite3

    from kernelevo.archive.store import Archive

    path = archive_path(archive, config)
    if not path.is_file():
        fail(f"{path}: no such archive file; `kernelevo optimize TASK` creates one (or pass --archive PATH)")
    try:
        store = Archive.open_readonly(path)
    except (ValueError, sqlite3.Error) as exc:
        fail(f"{path}: cannot read it as an archive: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    with store:
        yield store


def task_ids(store: Archive, task: str) -> set[int]:
    """The ids of the stored tasks that --task names, by name or id; several when a task's source changed."""
    ids = {t.id for t in store.tasks() if task in (t.name, str(t.id))}
    if not ids:
        fail(f"no task {task!r} in {store.path}; `kernelevo archive ls tasks` lists them")
    return ids


def emit(rows: Any, fmt: str, fields: Sequence[str] = ()) -> None:
    """Write data to stdout: any JSON value for "json"; a list of dicts as CSV or a rich table."""
    if fmt == "json":
        # default=str: a stored config may hold values JSON has no type for; show their text
        typer.echo(json.dumps(rows, indent=2, default=str))
    elif fmt == "csv":
        import csv
        import sys

        writer = csv.DictWriter(sys.stdout, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in row.items()})
    else:
        from kernelevo.cli.views.tables import print_rows

        print_rows(rows, fields)


def models_text(models: tuple[str, ...], pins: Optional[tuple[tuple[str, str], ...]], default: str) -> str:
    """'fast, smart (reflect -> smart)': a search's models and pins as the start-up echo says them."""
    text = ", ".join(models) or default
    return text + (" (" + ", ".join(f"{op} -> {m}" for op, m in pins) + ")" if pins else "")


def model_pins(given: list[str]) -> tuple[tuple[str, str], ...]:
    """--model-for OPERATOR=MODEL as (operator, model) pairs, each operator checked."""
    from kernelevo.evolution.scheduling import OPERATORS

    pins = []
    for item in given:
        operator, sep, name = (part.strip() for part in item.partition("="))
        if not sep or not name or operator not in OPERATORS or operator == "tune":
            fail(f"--model-for {item}: use OPERATOR=MODEL with one of "
                 f"{', '.join(o for o in OPERATORS if o != 'tune')}, e.g. reflect=smart")
        pins.append((operator, name))
    return tuple(pins)


def given_flags(ctx: Any) -> frozenset[str]:
    """The command's parameters set on its command line, not left to their defaults (click's own record; by the
    source's name, since typer may carry its own copy of click)."""
    return frozenset(name for name in ctx.params
                     if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE")


# A search's flags -> the leaf of the settings tree each sets (kernelevo.evolution.settings); `optimize` and `bench`
# add their own. A flag left to its default sets nothing: the tree's default stands (tests/test_settings.py checks
# that the two agree, so --help never names another default).
SEARCH_FLAGS = {
    "model": "run.models", "model_for": "run.model_for", "device": "run.device", "gpus": "run.gpus",
    "fmt": "run.fmt", "baseline": "run.baseline", "archive": "run.archive_path", "out": "run.out_dir",
    "cache_dir": "run.cache_dir", "resume": "run.resume",
    "children": "search.children_per_generation", "islands": "search.islands", "concurrency": "search.llm_concurrency",
    "profile_top": "search.profile_per_generation", "ncu": "search.ncu",
    "generations": "budget.generations", "plateau": "budget.plateau_generations",
    "seed": "judge.seed", "policy": "judge.policy", "trials": "judge.trials", "shapes": "judge.shapes",
    "compile_baseline": "judge.compile_baseline", "timing_seconds": "judge.timing.max_seconds",
    "executor": "judge.executor", "ray_address": "judge.ray_address",
}
# How a flag's text becomes its leaf's value, where they differ.
_VALUE = {"model": tuple, "model_for": model_pins, "seed_from": tuple, "max_wall_time": duration,
          "max_wall_time_per_task": duration}


def flag_overrides(ctx: Any, flags: dict[str, str]) -> dict[str, Any]:
    """The settings tree's overrides from the flags given on the command line: {leaf path: value}."""
    given = given_flags(ctx)
    return {path: _VALUE.get(name, lambda v: v)(ctx.params[name]) for name, path in flags.items() if name in given}


def resolved(task: Path, overrides: dict[str, Any], config: Optional[Path], search: bool = True) -> Any:
    """The search's settings resolved by the library (kernelevo.evolution.settings.resolve), or a usage error;
    `search` False where the judge alone runs (no model, no candidate format)."""
    from kernelevo.config import ConfigError
    from kernelevo.evolution.settings import resolve

    try:
        return resolve(task, overrides, config, search=search)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
