"""`kernelevo bench`: a whole suite of tasks, searched (or scored from given candidates) into one
archive, as a table of tasks and the suite's fast_p figures; `bench compare|show|ls|report`.

`kernelevo bench SUITE` runs a suite (the `run` command is the default), so the usual form reads
as the field writes it; the other commands read benches back, read-only.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from kernelevo.cli.common import (SEARCH_FLAGS, ArchiveOpt, BaselineOpt, CacheDirOpt, ChildrenOpt,
                                  CompileBaselineOpt, ConcurrencyOpt, ConfigOpt, DeviceOpt, ExecutorOpt, FormatOpt,
                                  GenerationsOpt, GpusOpt, IslandsOpt, JsonOpt, ModelForOpt, ModelOpt, NcuOpt,
                                  PlateauOpt, PolicyOpt, ProfileTopOpt, RayAddressOpt, SeedOpt, ShapesOpt,
                                  TimingSecondsOpt, TrialsOpt, emit, exit_interrupted, fail,
                                  flag_overrides, models_text, opened, resolved, say)


class _RunByDefault(TyperGroup):
    """`kernelevo bench SUITE ...` is `kernelevo bench run SUITE ...`."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True,
                        help="Run a suite of tasks and report fast_p (`kernelevo bench SUITE` is `bench run SUITE`); "
                             "compare, show, list and report benches.")


# bench's flags beyond the search's: each task's budget (the suite's spend is BenchOptions.max_cost_usd)
BENCH_FLAGS = {**SEARCH_FLAGS, "max_cost_usd_per_task": "budget.max_cost_usd",
               "max_llm_calls_per_task": "budget.max_llm_calls", "max_wall_time_per_task": "budget.max_wall_s"}


@bench_app.command()
def run(
    ctx: typer.Context,
    suite: Path = typer.Argument(..., help="a folder of KernelBench-format task files, or a text file listing them"),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="only the task files whose name matches this glob"),
    candidates: Optional[Path] = typer.Option(None, help="score the <task>__<label>.py files of this folder "
                                              "instead of searching (no model)"),
    model: ModelOpt = None,
    model_for: ModelForOpt = None,
    device: DeviceOpt = None,
    gpus: GpusOpt = "all",
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    fmt: FormatOpt = None,
    max_cost_usd: Optional[float] = typer.Option(None, help="LLM spend of the whole suite"),
    max_cost_usd_per_task: Optional[float] = typer.Option(None, help="LLM spend of each task's search"),
    max_llm_calls_per_task: Optional[int] = typer.Option(None, help="LLM calls of each task's search"),
    max_wall_time_per_task: Optional[str] = typer.Option(None, help="each task's search, e.g. 30m"),
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
    resume: Optional[str] = typer.Option(None, help="continue this bench (its id is printed at start and end)"),
    again: list[str] = typer.Option([], help="with --resume: a done task (by name) whose final judgement is made "
                                    "again by this judge, with no search and no call (repeatable)"),
    archive: ArchiveOpt = None,
    out: Path = typer.Option(Path("."), help="folder for the drop-in kernels and the reports"),
    config: ConfigOpt = None,
    cache_dir: CacheDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search every task of SUITE (or score given candidates) and print the table and fast_p."""
    _run(_options(ctx), as_json)


def _options(ctx: typer.Context) -> Any:
    """BenchOptions from the command line: each task's search resolved by the library, the suite's own beside it."""
    from kernelevo.evolution.drivers.bench import BenchOptions

    given = ctx.params
    candidates = given["candidates"]
    if candidates is not None and not candidates.is_dir():
        fail(f"--candidates {candidates}: no such folder of <task>__<label>.py files")
    overrides = flag_overrides(ctx, BENCH_FLAGS)
    if candidates:
        overrides["run.models"] = ("(given candidates)",)
    search = resolved(given["suite"], overrides, given["config"]).options
    # --resume names the bench; each task's search resumes its own run (bench._search_task)
    return BenchOptions(suite=given["suite"], search=dataclasses.replace(search, resume=None),
                        tasks_glob=given["tasks"], candidates=candidates, max_cost_usd=given["max_cost_usd"],
                        resume=search.resume, again=tuple(given["again"]))


def _run(options: Any, as_json: bool) -> None:
    """Run the bench with a live view; every way it ends leaves a line saying what to do next."""
    from kernelevo.agent.client import Stop
    from kernelevo.cli.views.bench import LiveBench
    from kernelevo.evolution.drivers.bench import BenchError, run_bench

    models = models_text(options.search.models, options.search.model_for, "the bench's own")
    what = f"candidates in {options.candidates}" if options.candidates else f"models {models}"
    say(f"kernelevo bench {options.suite}: {what}, devices {','.join(options.search.devices)}, "
        f"archive {options.search.archive_path}" + (f", resuming {options.resume}" if options.resume else ""))
    try:
        with LiveBench(f"kernelevo bench: {options.suite.name}") as live:
            outcome = run_bench(options, on_progress=live, on_status=live.status)
    except (BenchError, Stop) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except KeyboardInterrupt as exc:
        bench_id = getattr(exc, "run_id", None)
        how = f"`kernelevo bench {options.suite} --resume {bench_id}`" if bench_id else "a new bench"
        typer.echo(f"stopped: every task's search is stored and resumable; continue with {how}", err=True)
        exit_interrupted()
    except OSError as exc:
        fail(f"{exc.strerror or exc}: {exc.filename or ''} (a full disk or an unwritable archive?)")
    _finish(options, outcome.bench_id, as_json)
    if outcome.waiting:
        say(f"{outcome.waiting} task(s) wait for a reply: answer each prompt in {options.search.out_dir}/prompts/<task>/ "
            f"(NNNN.reply.md beside it), then continue with `kernelevo bench {options.suite} --resume {outcome.bench_id}`")


def _finish(options: Any, bench_id: str, as_json: bool) -> None:
    """The table on stdout and the suite report beside the drop-in kernels."""
    from kernelevo.archive.reports.bench_data import bench_table
    from kernelevo.archive.reports.bench_html import write
    from kernelevo.archive.store import Archive

    with Archive.open_readonly(options.search.archive_path) as store:
        table = bench_table(store, bench_id)
        try:
            page = write(store, bench_id, Path(options.search.out_dir) / f"bench_{bench_id}.html")
        except (OSError, ValueError) as exc:
            page = None
            say(f"no report written ({exc}); `kernelevo bench report {bench_id} -o FILE` tries again")
    _print(table, as_json)
    say(f"bench {bench_id}: {table['suite']['done']} of {table['suite']['tasks']} tasks done"
        + (f"; report: {page}" if page else ""))


def _print(table: dict, as_json: bool) -> None:
    if as_json:
        emit(table, "json")
    else:
        from kernelevo.cli.views.bench import print_table

        print_table(table)


def _table(store: Any, bench_id: str) -> dict:
    from kernelevo.archive.reports.bench_data import bench_table

    try:
        return bench_table(store, bench_id)
    except KeyError as exc:
        fail(str(exc.args[0]))


@bench_app.command()
def show(bench_id: str = typer.Argument(..., help="a bench id (`kernelevo bench ls` lists them)"),
         archive: ArchiveOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """One bench: its tasks and the suite's fast_p figures."""
    with opened(archive, config) as store:
        _print(_table(store, bench_id), as_json)


@bench_app.command("ls")
def list_benches(archive: ArchiveOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Every bench in the archive, oldest first."""
    fields = ("id", "suite", "mode", "status", "tasks", "done", "device_name")
    with opened(archive, config) as store:
        rows = [{k: getattr(b, k) for k in fields} for b in store.benches()]
    emit(rows, "json" if as_json else "table", fields)


@bench_app.command()
def compare(a: str = typer.Argument(..., help="a bench id"), b: str = typer.Argument(..., help="another bench id"),
            archive: ArchiveOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Two benches side by side (two models, budgets or versions): per task, then the fast_p rows."""
    from kernelevo.archive.reports.bench_data import compare as side_by_side

    with opened(archive, config) as store:
        data = side_by_side(_table(store, a), _table(store, b))
    if as_json:
        emit(data, "json")
    else:
        from kernelevo.cli.views.bench import print_compare

        print_compare(data)


@bench_app.command()
def report(bench_id: str = typer.Argument(..., help="a bench id"),
           out: Path = typer.Option(..., "--out", "-o", help="the HTML file to write (run reports go beside it)"),
           archive: ArchiveOpt = None, config: ConfigOpt = None) -> None:
    """The suite's report as one self-contained HTML file, each task linked to its run's report."""
    from kernelevo.archive.reports.bench_html import write

    with opened(archive, config) as store:
        _table(store, bench_id)  # an unknown bench: one line
        try:
            page = write(store, bench_id, out)
        except OSError as exc:
            fail(f"{out}: {exc.strerror or exc}")
    say(f"report: {page}")
