"""The `kernelevo` command. Thin: parse, call the library, print. Heavy imports stay inside commands
so that `kernelevo --help` answers at once."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from kernelevo import archive_files  # noqa: F401 - registers export, import and report on archive_app
from kernelevo.archive_cli import archive_app

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Evolve fast, verified CUDA kernels for PyTorch modules.")


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, a non-zero exit: every usage error ends here."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def resolve_device(device: Optional[str]) -> str:
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


def _refuse_cuda_only(candidate: Path) -> None:
    """An nvrtc candidate can only run on a GPU: say so in one line instead of judging a crash."""
    from kernelevo.judge.formats import detect_format

    try:
        fmt = detect_format(candidate.read_text())
    except (SyntaxError, ValueError, OSError):
        return  # the judge reports it as the candidate's verdict
    if fmt == "nvrtc":
        fail(f"{candidate}: an nvrtc (CUDA) candidate, and no CUDA device is in use here; run it on a GPU "
             "machine, or judge a C candidate with --device cpu (e.g. benchmarks/tasks/candidates/*__c.py)")


@app.command()
def evaluate(
    task: Path = typer.Argument(..., help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew"),
    device: Optional[str] = typer.Option(None, help="cuda, cuda:N or cpu [default: cuda if present]"),
    as_json: bool = typer.Option(False, "--json", help="print the evaluation as JSON"),
    trials: int = typer.Option(5, min=1, help="correctness trials, each with fresh inputs"),
    seed: int = typer.Option(42, help="seed for weights and inputs"),
    compile_baseline: bool = typer.Option(True, help="also compare with torch.compile (cached per task and GPU)"),
    build_timeout: float = typer.Option(900.0, help="seconds allowed to import and build the candidate"),
    run_timeout: float = typer.Option(120.0, help="seconds allowed for correctness and timing"),
    cache_dir: Optional[Path] = typer.Option(None, help="build and baseline cache [default: ~/.cache/kernelevo]"),
    policy: str = typer.Option("mixed", help="mixed: torch may do glue and library calls, but one of the "
                               "candidate's own kernels must run; strict: no torch compute in forward"),
    profile: bool = typer.Option(False, "--profile", help="if it passes: per-kernel times, registers and spills, "
                                 "% of speed of light, Nsight Compute metrics"),
    ncu: bool = typer.Option(True, help="with --profile: also run Nsight Compute when it is installed (~10 s)"),
    shapes: str = typer.Option("general", help="general: also check shapes the judge derives (other batch and inner "
                               "sizes); a kernel that refuses them cleanly is marked specialized; exact: the task's "
                               "shapes only"),
) -> None:
    """Judge one candidate: is it correct, how fast is it, against eager and torch.compile?"""
    from kernelevo import runtime
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.judge.executor import Limits
    from kernelevo.tasks import TaskError, load_task

    if not candidate.is_file():
        fail(f"{candidate}: no such file; give the path of a candidate .py file defining ModelNew")
    try:
        loaded = load_task(task)
    except TaskError as exc:
        fail(str(exc))
    if policy not in ("mixed", "strict"):
        fail(f"--policy {policy}: use mixed or strict")
    if shapes not in ("general", "exact"):
        fail(f"--shapes {shapes}: use general or exact")
    dev = resolve_device(device)
    if dev == "cpu":
        _refuse_cuda_only(candidate)
    options = JudgeOptions(devices=(dev,), trials=trials, seed=seed, compile_baseline=compile_baseline,
                           limits=Limits(build=build_timeout, run=run_timeout), policy=policy, shapes=shapes)
    from rich.console import Console

    status = Console(stderr=True)
    with status.status(f"judging {candidate.name} on {dev}"), \
            Judge(cache_dir or runtime.cache_dir(), options) as judge:
        result = judge.evaluate(loaded, candidate, profile=profile, ncu=ncu, final=True)  # what the user quotes
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    from kernelevo.report import print_evaluation, print_profile

    print_evaluation(result)
    if result.profile:
        print_profile(result.profile)
    elif profile:
        status.print("[dim]not profiled: profiling runs only for candidates that pass[/dim]")


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="print the findings as JSON")) -> None:
    """What this machine offers kernelevo: GPUs, driver, compilers, profilers, embedder, API keys."""
    from kernelevo.config import ConfigError, load_config
    from kernelevo.doctor import collect, print_findings

    try:
        config = load_config()
    except ConfigError as exc:
        fail(str(exc))
    findings = collect(config.embed_model())
    if as_json:
        typer.echo(json.dumps(findings, indent=2))
    else:
        print_findings(findings)


@app.command()
def optimize(
    task: Path = typer.Argument(..., help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"),
    model: Optional[str] = typer.Option(None, help="anthropic:MODEL, openai:MODEL, local:MODEL@URL or a "
                                        "[models.ALIAS] of kernelevo.toml [default: by the API key set]"),
    device: Optional[str] = typer.Option(None, help="cuda or cpu (C kernels on the CPU backend) [default: cuda if present]"),
    gpus: str = typer.Option("all", help="GPUs to judge on: all, or indices such as 0,1 (one judge worker each)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="candidate format asked for: nvrtc (default on a "
                                      "GPU), inline, or c (the CPU)"),
    max_cost_usd: Optional[float] = typer.Option(None, help="stop before LLM spend would pass this"),
    max_llm_calls: Optional[int] = typer.Option(None, help="stop after this many LLM calls"),
    max_wall_time: Optional[str] = typer.Option(None, help="stop after this long, e.g. 30m or 2h"),
    generations: Optional[int] = typer.Option(10, help="stop after this many generations"),
    plateau: Optional[int] = typer.Option(4, help="stop after this many generations without a new best"),
    children: int = typer.Option(8, min=1, help="judged children per generation"),
    islands: int = typer.Option(2, min=1, help="islands (sub-populations that exchange their best)"),
    concurrency: int = typer.Option(4, min=1, help="LLM calls in flight at once"),
    profile_top: int = typer.Option(2, min=0, help="new bests profiled per generation, for the prompts (0: none)"),
    ncu: bool = typer.Option(True, help="profiles include Nsight Compute metrics when ncu is installed"),
    seed: int = typer.Option(0, help="seed of the search's random choices and of the judge's inputs"),
    policy: str = typer.Option("mixed", help="mixed or strict (see `kernelevo evaluate --help`)"),
    trials: int = typer.Option(5, min=1, help="correctness trials per candidate, each with fresh inputs"),
    shapes: str = typer.Option("general", help="general: also check shapes the judge derives (other batch and inner "
                               "sizes); a kernel that refuses them cleanly is marked specialized; exact: the task's "
                               "shapes only"),
    compile_baseline: bool = typer.Option(True, help="also compare with torch.compile (cached per task and GPU)"),
    timing_seconds: float = typer.Option(1.5, min=0.05, help="seconds spent timing each candidate (less: faster, "
                                         "noisier)"),
    seed_from: list[Path] = typer.Option([], help="another archive file to take stepping stones from (repeatable)"),
    resume: Optional[str] = typer.Option(None, help="continue this run (its id is printed at start and end)"),
    archive: Optional[Path] = typer.Option(None, help="archive file [default: ~/.local/share/kernelevo/archive.sqlite]"),
    out: Path = typer.Option(Path("."), help="folder for the drop-in <task>_kernelevo.py"),
    config: Optional[Path] = typer.Option(None, help="kernelevo.toml [default: ./kernelevo.toml]"),
    cache_dir: Optional[Path] = typer.Option(None, help="build and baseline cache [default: ~/.cache/kernelevo]"),
) -> None:
    """Search for a faster, verified kernel for TASK; writes <task>_kernelevo.py and archives every try."""
    from kernelevo.optimize_cli import run_optimize

    run_optimize(locals())


@app.command()
def models(
    as_json: bool = typer.Option(False, "--json", help="print the table as JSON"),
    config: Optional[Path] = typer.Option(None, help="kernelevo.toml to read [default: ./kernelevo.toml, "
                                          "then ~/.config/kernelevo/kernelevo.toml]"),
) -> None:
    """The model table (prices per million tokens, limits, edit format) and your [models.ALIAS] names."""
    from kernelevo.agent.models import table_rows
    from kernelevo.config import ConfigError, load_config

    try:
        rows = table_rows(load_config(config))
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from kernelevo.report import print_models

    print_models(rows)


app.add_typer(archive_app, name="archive")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
