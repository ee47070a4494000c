"""`kernelevo evaluate`: judge one candidate against its task, the way a run's final judgement does."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kernelevo.cli.common import CacheDirOpt, CompileBaselineOpt, ShapesOpt, check_choice, fail, resolve_device


def _refuse_cuda_only(candidate: Path) -> None:
    """An nvrtc candidate can only run on a GPU: say so in one line instead of judging a crash."""
    from kernelevo.formats import detect_format

    try:
        fmt = detect_format(candidate.read_text())
    except (SyntaxError, ValueError, OSError):
        return  # the judge reports it as the candidate's verdict
    if fmt == "nvrtc":
        fail(f"{candidate}: an nvrtc (CUDA) candidate, and no CUDA device is in use here; run it on a GPU "
             "machine, or judge a C candidate with --device cpu (e.g. benchmarks/tasks/candidates/*__c.py)")


def evaluate(
    task: Path = typer.Argument(..., help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew"),
    device: Optional[str] = typer.Option(None, help="cuda, cuda:N or cpu [default: cuda if present]"),
    as_json: bool = typer.Option(False, "--json", help="print the evaluation as JSON"),
    trials: int = typer.Option(5, min=1, help="correctness trials, each with fresh inputs"),
    seed: int = typer.Option(42, help="seed for weights and inputs"),
    compile_baseline: CompileBaselineOpt = True,
    build_timeout: float = typer.Option(900.0, help="seconds allowed to import and build the candidate"),
    run_timeout: float = typer.Option(120.0, help="seconds allowed for correctness and timing"),
    cache_dir: CacheDirOpt = None,
    policy: str = typer.Option("mixed", help="mixed: torch may do glue and library calls, but one of the "
                               "candidate's own kernels must run; strict: no torch compute in forward"),
    profile: bool = typer.Option(False, "--profile", help="if it passes: per-kernel times, registers and spills, "
                                 "% of speed of light, Nsight Compute metrics"),
    ncu: bool = typer.Option(True, help="with --profile: also run Nsight Compute when it is installed (~10 s)"),
    shapes: ShapesOpt = "general",
) -> None:
    """Judge one candidate: is it correct, how fast is it, against eager and torch.compile?"""
    from kernelevo import runtime
    from kernelevo.judge.api import Judge, JudgeOptions, WorkerLimits
    from kernelevo.tasks import TaskError, load_task

    if not candidate.is_file():
        fail(f"{candidate}: no such file; give the path of a candidate .py file defining ModelNew")
    try:
        loaded = load_task(task)
    except TaskError as exc:
        fail(str(exc))
    check_choice("--policy", policy, ("mixed", "strict"))
    check_choice("--shapes", shapes, ("general", "exact"))
    dev = resolve_device(device)
    if dev == "cpu":
        _refuse_cuda_only(candidate)
    options = JudgeOptions(devices=(dev,), trials=trials, seed=seed, compile_baseline=compile_baseline,
                           limits=WorkerLimits(build=build_timeout, run=run_timeout), policy=policy, shapes=shapes)
    from rich.console import Console

    status = Console(stderr=True)
    with status.status(f"judging {candidate.name} on {dev}"), \
            Judge(cache_dir or runtime.cache_dir(), options) as judge:
        result = judge.evaluate(loaded, candidate, profile=profile, ncu=ncu, final=True)  # what the user quotes
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    from kernelevo.cli.views.tables import print_evaluation, print_profile

    print_evaluation(result)
    if result.profile:
        print_profile(result.profile)
    elif profile:
        status.print("[dim]not profiled: profiling runs only for candidates that pass[/dim]")
