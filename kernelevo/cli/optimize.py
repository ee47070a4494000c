"""`kernelevo optimize`: options to an evolution.loop.optimize call, with the user-facing output.

The command's checks and messages are kept in one place; heavy imports happen only once the command runs.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from kernelevo.cli.common import (SEARCH_FLAGS, BaselineOpt, CacheDirOpt, ChildrenOpt, CompileBaselineOpt,
                                  ConcurrencyOpt, DeviceOpt, EXIT_INTERRUPTED, ExecutorOpt, FormatOpt, GenerationsOpt,
                                  GpusOpt, IslandsOpt, ModelForOpt, ModelOpt, NcuOpt, PlateauOpt, PolicyOpt, ProfileTopOpt,
                                  RayAddressOpt, SeedOpt, ShapesOpt, TimingSecondsOpt, TrialsOpt, check_choice, fail,
                                  flag_overrides, models_text, resolved, say)


def optimize(
    ctx: typer.Context,
    task: Path = typer.Argument(..., help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"),
    parts: Optional[int] = typer.Option(None, min=1, help="TASK is a whole model: split it, search its N hottest "
                                        "parts (the budget shared by their time), and assemble it verified"),
    parts_dir: Optional[Path] = typer.Option(None, help="with --parts: the part task files' folder [default: OUT/<task>_parts]"),
    min_speedup: float = typer.Option(1.0, help="with --parts: try a part in place whose kernel is faster than this "
                                      "against the baseline, beyond noise"),
    modes: Optional[str] = typer.Option(None, help="with --parts: compile modes to time the assembled model in, "
                                        "comma-separated [default: all four on a GPU; eager,default on the CPU]"),
    granularity: str = typer.Option("module", help="with --parts: module (submodules as parts) or block (a "
                                    "submodule holding residual blocks cut into them: attention, MLP)"),
    model: ModelOpt = None,
    model_for: ModelForOpt = None,
    device: DeviceOpt = None,
    gpus: GpusOpt = "all",
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    fmt: FormatOpt = None,
    max_cost_usd: Optional[float] = typer.Option(None, help="stop before LLM spend would pass this"),
    max_llm_calls: Optional[int] = typer.Option(None, help="stop after this many LLM calls"),
    max_wall_time: Optional[str] = typer.Option(None, help="stop after this long, e.g. 30m or 2h"),
    generations: GenerationsOpt = 10,
    plateau: PlateauOpt = 4,
    children: ChildrenOpt = 8,
    islands: IslandsOpt = 2,
    concurrency: ConcurrencyOpt = 4,
    profile_top: ProfileTopOpt = 2,
    ncu: NcuOpt = True,
    seed: SeedOpt = 42,
    policy: PolicyOpt = "mixed",
    trials: TrialsOpt = 5,
    shapes: ShapesOpt = "general",
    compile_baseline: CompileBaselineOpt = True,
    baseline: BaselineOpt = None,
    timing_seconds: TimingSecondsOpt = 1.5,
    seed_from: list[Path] = typer.Option([], help="another archive file to take stepping stones from (repeatable)"),
    resume: Optional[str] = typer.Option(None, help="continue this run (its id is printed at start and end); "
                                         "with --parts, the bench of the parts"),
    archive: Optional[Path] = typer.Option(None, help="archive file [default: ~/.local/share/kernelevo/archive.sqlite]"),
    out: Path = typer.Option(Path("."), help="folder for the drop-in <task>_kernelevo.py"),
    config: Optional[Path] = typer.Option(None, help="kernelevo.toml [default: ./kernelevo.toml]"),
    cache_dir: CacheDirOpt = None,
    force: bool = typer.Option(False, "--force", help="search even where torch.compile already runs within 1.2x "
                               "of the task's speed of light (otherwise the run stops before its first call)"),
    show_settings: bool = typer.Option(False, "--show-settings", help="print the settings and where each came from"),
    judge_again: bool = typer.Option(False, "--judge-again", help="with --resume: no search, no call: the run's final judgement made again by this judge"),
) -> None:
    """Search for a faster, verified kernel for TASK; writes <task>_kernelevo.py and archives every try."""
    _check(ctx)
    found = resolved(task, flag_overrides(ctx, OPTIMIZE_FLAGS), config)
    if show_settings:
        return _show(found)
    _echo(found.options)
    if parts:
        return _in_parts(found.options, ctx.params)
    run_optimize(found.options)


def _show(found: Any) -> None:
    from kernelevo.cli.views.settings import print_settings

    print_settings(found)


def _in_parts(options: Any, given: dict) -> None:
    from kernelevo.cli.whole import run_parts

    run_parts(options, given["parts"], given["parts_dir"], given["min_speedup"], given["modes"], given["granularity"])


# optimize's flags beyond the search's: the run's budget, stepping stones and what --force and --judge-again ask
OPTIMIZE_FLAGS = {**SEARCH_FLAGS, "max_cost_usd": "budget.max_cost_usd", "max_llm_calls": "budget.max_llm_calls",
                  "max_wall_time": "budget.max_wall_s", "seed_from": "run.seed_from", "force": "run.force",
                  "judge_again": "run.judge_again"}


def _check(ctx: typer.Context) -> None:
    """The checks that need no config and no device, so a typo fails before anything is loaded."""
    given = ctx.params
    if not given["task"].is_file():
        fail(f"{given['task']}: no such file; give the path of a KernelBench-format task .py file")
    if given["parts"]:
        from kernelevo.evolution.drivers.parts.split import GRANULARITIES

        check_choice("--granularity", given["granularity"], GRANULARITIES)
    for path in given["seed_from"]:
        if not path.is_file():
            fail(f"--seed-from {path}: no such archive file")
    if given["judge_again"] and (not given["resume"] or given["parts"]):
        fail("--judge-again makes a run's final judgement again: name the run with --resume RUN (not with --parts)")


def _echo(options: Any) -> None:
    """The effective configuration, first thing, so a log says what ran."""
    import dataclasses

    limits = ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(options.budget).items() if v is not None)
    search = ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(options.settings).items())
    judge = options.judge
    where = f" on a Ray cluster ({judge.ray_address or 'RAY_ADDRESS'})" if judge.executor == "ray" else ""
    models = models_text(options.models, options.model_for, "the run's own")
    say(f"kernelevo optimize {options.task_path}: models {models}, devices {','.join(options.devices)}{where}, "
        f"format {options.fmt or 'default'}, policy {judge.policy}, shapes {judge.shapes}, seed {options.seed}\n"
        f"  limits: {limits}\n  search: {search}\n  archive: {options.archive_path}"
        + (f", resuming {options.resume}" if options.resume else ""))


def run_optimize(options: Any) -> None:
    """Run the search with live progress; every way it ends leaves a line saying what to do next."""
    from kernelevo.agent.client import Stop
    from kernelevo.evolution.loop import optimize as search
    from kernelevo.cli.views.progress import LiveProgress, print_summary
    from kernelevo.tasks import TaskError

    limits = {"max_cost_usd": options.budget.max_cost_usd}
    try:
        with LiveProgress(f"kernelevo: {options.task_path.name}", limits) as live:
            outcome = search(options, on_progress=live, on_status=live.status)
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
        + (f"; report: {page}" if page else "")
        + (f"; answer it in NNNN.reply.md beside it, then continue with "
           f"`kernelevo optimize {options.task_path} --resume {outcome.run_id}`" if outcome.waiting else ""))
    raise typer.Exit(outcome.exit_code)


def _write_report(options: Any, run_id: str) -> Optional[Path]:
    """The run's HTML report beside the drop-in kernel; a failure here costs the report, not the run."""
    from kernelevo.archive.reports.run_data import report_data
    from kernelevo.archive.reports.run_html import write
    from kernelevo.archive.store import Archive

    try:
        with Archive.open_readonly(options.archive_path) as store:
            data = report_data(store, run_id)
        return write(data, Path(options.out_dir) / f"{options.task_path.stem}_{run_id}.html")
    except (OSError, ValueError) as exc:
        say(f"no report written ({exc}); `kernelevo archive report {run_id} -o FILE` tries again")
        return None
