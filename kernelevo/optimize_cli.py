"""`kernelevo optimize`: options to an evolution.loop.optimize call, with the user-facing output.

Kept apart from cli.py so that the command's checks and messages are readable in one place;
heavy imports happen only once the command runs.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from kernelevo.cli import fail, resolve_device

EXIT_INTERRUPTED = 130
def _duration(text: Optional[str]) -> Optional[float]:
    """'90', '90s', '30m', '2h' as seconds."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except ValueError:
        fail(f"--max-wall-time {text}: use seconds, or a number with s, m or h (e.g. 30m)")


def _devices(device: Optional[str], gpus: str) -> tuple[str, ...]:
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


def _model(model: Optional[str], config) -> str:
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


def _options(args: dict):
    """OptimizeOptions from the command's arguments, after every check that can fail early."""
    from kernelevo import runtime
    from kernelevo.config import ConfigError, load_config
    from kernelevo.evolution import budget
    from kernelevo.evolution.records import OptimizeOptions, SearchSettings
    from kernelevo.judge.timing import TimingConfig

    if not args["task"].is_file():
        fail(f"{args['task']}: no such file; give the path of a KernelBench-format task .py file")
    if args["policy"] not in ("mixed", "strict"):
        fail(f"--policy {args['policy']}: use mixed or strict")
    if args["shapes"] not in ("general", "exact"):
        fail(f"--shapes {args['shapes']}: use general or exact")
    if args["fmt"] not in (None, "nvrtc", "inline", "c"):
        fail(f"--format {args['fmt']}: use nvrtc, inline or c")
    for path in args["seed_from"]:
        if not path.is_file():
            fail(f"--seed-from {path}: no such archive file")
    try:
        config = load_config(args["config"])
    except ConfigError as exc:
        fail(str(exc))
    devices = _devices(args["device"], args["gpus"])
    if devices == ("cpu",) and args["fmt"] not in (None, "c"):
        fail(f"--format {args['fmt']} needs a GPU; on the CPU kernels are written in C (--format c)")
    limits = budget.Limits(max_cost_usd=args["max_cost_usd"], max_llm_calls=args["max_llm_calls"],
                           max_wall_s=_duration(args["max_wall_time"]), generations=args["generations"],
                           plateau_generations=args["plateau"])
    settings = SearchSettings(children_per_generation=args["children"], islands=args["islands"],
                              llm_concurrency=args["concurrency"], profile_per_generation=args["profile_top"],
                              ncu=args["ncu"])
    archive = config.archive_path(args["archive"])
    return OptimizeOptions(task_path=args["task"], model=_model(args["model"], config), devices=devices,
                           archive_path=archive, out_dir=args["out"], cache_dir=args["cache_dir"] or runtime.cache_dir(),
                           fmt=args["fmt"], limits=limits, settings=settings, seed=args["seed"],
                           policy=args["policy"], trials=args["trials"], compile_baseline=args["compile_baseline"],
                           shapes=args["shapes"],
                           seed_from=tuple(args["seed_from"]), resume=args["resume"],
                           config_path=args["config"], timing=TimingConfig(max_seconds=args["timing_seconds"]))


def _echo(options) -> None:
    """The effective configuration, first thing, so a log says what ran."""
    import dataclasses

    limits = ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(options.limits).items() if v is not None)
    search = ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(options.settings).items())
    say(f"kernelevo optimize {options.task_path}: model {options.model}, devices {','.join(options.devices)}, "
        f"format {options.fmt or 'default'}, policy {options.policy}, shapes {options.shapes}, seed {options.seed}\n"
        f"  limits: {limits}\n  search: {search}\n  archive: {options.archive_path}"
        + (f", resuming {options.resume}" if options.resume else ""))


def say(text: str) -> None:
    """A message on stderr, wrapped to the terminal's width."""
    from rich.console import Console

    Console(stderr=True).print(text, markup=False, highlight=False)


def run_optimize(args: dict) -> None:
    from kernelevo.agent.client import Stop
    from kernelevo.evolution.loop import optimize
    from kernelevo.progress import LiveProgress, print_summary
    from kernelevo.tasks import TaskError

    options = _options(args)
    _echo(options)
    limits = {"max_cost_usd": options.limits.max_cost_usd}
    try:
        with LiveProgress(f"kernelevo: {options.task_path.name}", limits) as live:
            outcome = optimize(options, on_progress=live, on_status=live.status)
    except (Stop, TaskError, ValueError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except KeyboardInterrupt as exc:
        run_id = getattr(exc, "run_id", None)
        how = (f"`kernelevo optimize {options.task_path} --resume {run_id}`" if run_id else "a new run")
        typer.echo(f"stopped: everything judged and every reply received is in the archive; continue with {how}",
                   err=True)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as exc:
        fail(f"{exc.strerror or exc}: {exc.filename or ''} (a full disk or an unwritable archive?)")
    print_summary(outcome)
    page = _write_report(options, outcome.run_id)
    say(f"run {outcome.run_id}: {outcome.reason}" + (f"; best kernel written to {outcome.written}"
                                                     if outcome.written else "")
        + (f"; report: {page}" if page else ""))
    raise typer.Exit(outcome.exit_code)


def _write_report(options, run_id: str):
    """The run's HTML report beside the drop-in kernel; a failure here costs the report, not the run."""
    from kernelevo.archive.report_data import report_data
    from kernelevo.archive.report_html import write
    from kernelevo.archive.store import Archive

    try:
        with Archive.open_readonly(options.archive_path) as store:
            data = report_data(store, run_id)
        return write(data, Path(options.out_dir) / f"{options.task_path.stem}_{run_id}.html")
    except (OSError, ValueError) as exc:
        say(f"no report written ({exc}); `kernelevo archive report {run_id} -o FILE` tries again")
        return None
