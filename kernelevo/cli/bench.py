"""`kernelevo bench`: a whole suite of tasks, searched (or scored from given candidates) into one
archive, as a table of tasks and the suite's fast_p figures; `bench compare|show|ls|report`.

`kernelevo bench SUITE` runs a suite (the `run` command is the default), so the usual form reads
as the field writes it; the other commands read benches back, read-only.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from kernelevo.cli.common import (ArchiveOpt, BaselineOpt, CacheDirOpt, ChildrenOpt, CompileBaselineOpt,
                                  ConcurrencyOpt,
                                  ConfigOpt, DeviceOpt, ExecutorOpt, FormatOpt, GenerationsOpt, GpusOpt, IslandsOpt,
                                  JsonOpt, ModelForOpt, ModelOpt, NcuOpt, PlateauOpt, PolicyOpt, ProfileTopOpt, RayAddressOpt,
                                  SeedOpt, ShapesOpt, TimingSecondsOpt, TrialsOpt, budget_branch,
                                  check_choice, emit, exit_interrupted, fail, judge_branch, models_text, opened, say, search_branch,
                                  search_options, SearchArgs)
from kernelevo.formats import FORMAT_CHOICES


class _RunByDefault(TyperGroup):
    """`kernelevo bench SUITE ...` is `kernelevo bench run SUITE ...`."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True,
                        help="Run a suite of tasks and report fast_p (`kernelevo bench SUITE` is `bench run SUITE`); "
                             "compare, show, list and report benches.")


@dataclass(frozen=True)
class BenchArgs:
    """The arguments of `kernelevo bench run`: each task's search's, the limits per task and of the suite."""

    suite: Path
    search: SearchArgs
    tasks: Optional[str]
    candidates: Optional[Path]
    max_cost_usd: Optional[float]  # the whole suite's
    per_task: Any  # each task's search's limits (BudgetLimits)
    as_json: bool
    again: tuple[str, ...] = ()  # with resume: done tasks whose final judgement is made again


@bench_app.command()
def run(
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
    seed: SeedOpt = 0,
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
    settings = search_branch(children=children, islands=islands, concurrency=concurrency, profile_top=profile_top, ncu=ncu)
    judge = judge_branch(policy=policy, trials=trials, shapes=shapes, compile_baseline=compile_baseline,
                         timing_seconds=timing_seconds)
    search = SearchArgs(model=model, model_for=model_for, device=device, gpus=gpus, executor=executor,
                        ray_address=ray_address, fmt=fmt, settings=settings, judge=judge, seed=seed, baseline=baseline,
                        resume=resume, archive=archive, out=out, config=config, cache_dir=cache_dir)
    per_task = budget_branch(max_cost_usd=max_cost_usd_per_task, max_llm_calls=max_llm_calls_per_task,
                             max_wall_time=max_wall_time_per_task, generations=generations, plateau=plateau)
    _run(BenchArgs(suite=suite, search=search, tasks=tasks, candidates=candidates, max_cost_usd=max_cost_usd,
                   per_task=per_task, as_json=as_json, again=tuple(again)))


def _options(args: BenchArgs) -> Any:
    from kernelevo.evolution.drivers.bench import BenchOptions

    if args.search.fmt is not None:
        check_choice("--format", args.search.fmt, FORMAT_CHOICES)
    if args.candidates is not None and not args.candidates.is_dir():
        fail(f"--candidates {args.candidates}: no such folder of <task>__<label>.py files")
    extra = {"models": ("(given candidates)",)} if args.candidates else {}
    search = search_options(args.search, args.suite, args.per_task, **extra)
    return BenchOptions(suite=args.suite, search=search, tasks_glob=args.tasks, candidates=args.candidates,
                        max_cost_usd=args.max_cost_usd, resume=args.search.resume, again=args.again)


def _run(args: BenchArgs) -> None:
    """Run the bench with a live view; every way it ends leaves a line saying what to do next."""
    from kernelevo.agent.client import Stop
    from kernelevo.cli.views.bench import LiveBench
    from kernelevo.evolution.drivers.bench import BenchError, run_bench

    options = _options(args)
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
    _finish(options, outcome.bench_id, args.as_json)
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
