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
from dataclasses import dataclass
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
    import torch

    if device in (None, "auto"):
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        device = "cuda:0"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            fail("no CUDA device is visible here; use --device cpu to judge C/C++ candidates on the CPU")
        index = device.split(":", 1)[1] if ":" in device else "0"
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            fail(f"{device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return device
    if device != "cpu":
        fail(f"--device {device}: use cuda, cuda:N or cpu")
    return device


def devices(device: Optional[str], gpus: str) -> tuple[str, ...]:
    """The judge's devices: the CPU, the one GPU --device cuda:N names, or the --gpus list."""
    dev = resolve_device(device)
    if dev == "cpu":
        return ("cpu",)
    if device not in (None, "auto", "cuda") and gpus == "all":
        return (dev,)
    import torch

    count = torch.cuda.device_count()
    if gpus == "all":
        return tuple(f"cuda:{i}" for i in range(count))
    picked = [g.strip() for g in gpus.split(",") if g.strip()]
    if not picked or not all(g.isdigit() and int(g) < count for g in picked):
        fail(f"--gpus {gpus}: use all, or indices below {count} such as 0,1")
    return tuple(f"cuda:{g}" for g in picked)


def executor_choice(given: Optional[str], config: Any) -> str:
    """--executor, else `executor =` in kernelevo.toml, else local."""
    chosen = given or str(config.raw.get("executor") or "local")
    check_choice("--executor", chosen, ("local", "ray"))
    return chosen


def judge_devices(executor: str, device: Optional[str], gpus: str, address: Optional[str]) -> tuple[str, ...]:
    """The judge's devices: this machine's (`devices`), or on a Ray cluster one per GPU of it (the CPU
    backend: "cpu", its jobs spread over the nodes' CPUs)."""
    if executor == "local":
        return devices(device, gpus)
    if device not in (None, "auto", "cuda", "cpu"):
        fail(f"--device {device}: with --executor ray use cuda or cpu; Ray places each job on a free GPU")
    if gpus != "all":
        fail("--gpus picks this machine's GPUs; with --executor ray every GPU of the cluster is used")
    from kernelevo.judge.api import ray_connect, ray_slots

    try:
        ray_connect(address)
        return ray_slots("cpu" if device == "cpu" else "cuda")
    except RuntimeError as exc:
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


def model_spec(model: Optional[str], config: Any) -> str:
    """The model to use: --model, else the config's default_model, else the provider whose key is set."""
    from kernelevo.config import DEFAULT_MODELS

    chosen = model or config.raw.get("default_model")
    if chosen:
        return chosen
    for variable, spec in DEFAULT_MODELS:
        if os.environ.get(variable):
            return spec
    fail("no model and no API key: export ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass "
         "--model local:MODEL@http://host:port/v1 for a local server")


def model_names(given: Optional[list[str]], config: Any, resuming: bool) -> tuple[str, ...]:
    """The run's models: --model (repeated: an ensemble), else () when resuming (the run's own), else
    kernelevo.toml's ensemble, else the one model_spec picks."""
    if given:
        return tuple(given)
    if resuming:
        return ()
    return config.ensemble() or (model_spec(None, config),)


def models_text(models: tuple[str, ...], pins: Optional[tuple[tuple[str, str], ...]], default: str) -> str:
    """'fast, smart (reflect -> smart)': a search's models and pins as the start-up echo says them."""
    text = ", ".join(models) or default
    return text + (" (" + ", ".join(f"{op} -> {m}" for op, m in pins) + ")" if pins else "")


def model_pins(given: Optional[list[str]], config: Any, resuming: bool) -> Optional[tuple[tuple[str, str], ...]]:
    """--model-for OPERATOR=MODEL pairs, else None when resuming (the run's own), else kernelevo.toml's."""
    from kernelevo.evolution.scheduling import OPERATORS

    if not given:
        return None if resuming else tuple(config.model_for().items())
    pins = []
    for item in given:
        operator, sep, name = (part.strip() for part in item.partition("="))
        if not sep or not name or operator not in OPERATORS or operator == "tune":
            fail(f"--model-for {item}: use OPERATOR=MODEL with one of "
                 f"{', '.join(o for o in OPERATORS if o != 'tune')}, e.g. reflect=smart")
        pins.append((operator, name))
    return tuple(pins)


def baseline_choice(given: Optional[str], config: Any) -> str:
    """--baseline, else `baseline =` in kernelevo.toml, else torch.compile (the user's alternative)."""
    from kernelevo.config import BASELINE_CHOICES

    chosen = given or config.baseline() or "compile"
    check_choice("--baseline", chosen, BASELINE_CHOICES)
    return chosen


def given_flags(ctx: Any) -> frozenset[str]:
    """The command's parameters set on its command line, not left to their defaults (click's own record; by the
    source's name, since typer may carry its own copy of click)."""
    return frozenset(name for name in ctx.params
                     if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE")


def judge_branch(*, policy: str, trials: int, shapes: str, compile_baseline: bool, timing_seconds: float) -> Any:
    """The judge's settings (JudgeOptions) from its flags, checked; the executor is added once the config is read
    (search_options). The search hands this record to the judge as it is."""
    check_choice("--policy", policy, ("mixed", "strict"))
    check_choice("--shapes", shapes, ("general", "exact"))
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    return JudgeOptions(policy=policy, trials=trials, shapes=shapes, compile_baseline=compile_baseline,
                        timing=TimingConfig(max_seconds=timing_seconds))


def budget_branch(*, max_cost_usd: Optional[float], max_llm_calls: Optional[int], max_wall_time: Optional[str],
                  generations: int, plateau: int) -> Any:
    """A search's limits (BudgetLimits) from their flags; a wall time such as 30m or 2h, checked."""
    from kernelevo.evolution.budget import BudgetLimits

    return BudgetLimits(max_cost_usd=max_cost_usd, max_llm_calls=max_llm_calls, max_wall_s=duration(max_wall_time),
                        generations=generations, plateau_generations=plateau)


def search_branch(*, children: int, islands: int, concurrency: int, profile_top: int, ncu: bool) -> Any:
    """The search's own settings (SearchSettings) from its flags."""
    from kernelevo.evolution.options import SearchSettings

    return SearchSettings(children_per_generation=children, islands=islands, llm_concurrency=concurrency,
                          profile_per_generation=profile_top, ncu=ncu)


@dataclass(frozen=True)
class SearchArgs:
    """The arguments `optimize` and `bench` share: what each task's search is built from (search_options). The
    judge's and the search's settings come as their branches (judge_branch, search_branch), not flag by flag."""

    model: Optional[list[str]]
    model_for: Optional[list[str]]
    device: Optional[str]
    gpus: str
    executor: Optional[str]
    ray_address: Optional[str]
    fmt: Optional[str]
    settings: Any  # SearchSettings
    judge: Any  # JudgeOptions
    seed: int
    baseline: Optional[str]
    resume: Optional[str]
    archive: Optional[Path]
    out: Path
    config: Optional[Path]
    cache_dir: Optional[Path]


def search_options(args: SearchArgs, task: Path, limits: Any, **extra: Any) -> Any:
    """OptimizeOptions of one task's search from a command's arguments (optimize's, or bench's for
    each task): config, devices, format, search settings, judge settings, archive and output."""
    import dataclasses

    from kernelevo import runtime
    from kernelevo.evolution.options import OptimizeOptions

    config = config_or_fail(args.config)
    executor = executor_choice(args.executor, config)
    on = judge_devices(executor, args.device, args.gpus, args.ray_address)
    fmt = args.fmt or config.format()
    if on == ("cpu",) and fmt in ("nvrtc", "inline"):
        fail(f"--format {fmt} needs a GPU; on the CPU kernels are written in C (--format c), or in Triton "
             "(--format triton or auto: checked in Triton's interpreter, not timed)")
    resuming = bool(args.resume)
    baseline = baseline_choice(args.baseline, config)
    models = extra.pop("models", None) or model_names(args.model, config, resuming)
    pins = model_pins(args.model_for, config, resuming)
    judge = dataclasses.replace(args.judge, executor=executor, ray_address=args.ray_address)
    return OptimizeOptions(task_path=task, models=models, model_for=pins, devices=on,
                           archive_path=config.archive_path(args.archive), out_dir=args.out,
                           cache_dir=args.cache_dir or runtime.cache_dir(), fmt=fmt, budget=limits,
                           settings=args.settings, judge=judge, seed=args.seed, baseline=baseline,
                           config=config, **extra)


@dataclass(frozen=True)
class OptimizeArgs:
    """The arguments of `kernelevo optimize`: the search's, the run's limits, and those of --parts (whole.py
    runs a model in parts)."""

    task: Path
    search: SearchArgs
    budget: Any  # BudgetLimits (budget_branch)
    seed_from: tuple[Path, ...]
    force: bool
    parts: Optional[int]
    parts_dir: Optional[Path]
    min_speedup: float
    modes: Optional[str] = None  # with --parts: the compile modes to time the assembly in
    granularity: str = "module"  # with --parts: how the model is split (split.GRANULARITIES)
    given: frozenset[str] = frozenset()  # the parameters set on the command line (given_flags)
    show_settings: bool = False  # print the resolved settings and where each came from, and stop
    judge_again: bool = False  # with resume: only the run's final judgement, made again (OptimizeOptions.judge_again)
