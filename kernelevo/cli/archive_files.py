"""`kernelevo archive export|import|report`: the archive's files in and out.

Registered on the same `archive` command group as the read commands (cli/archive.py); kept apart
because these write files (or the archive) and the read commands never do.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kernelevo.cli.archive import archive_app
from kernelevo.cli.common import (SEARCH_FLAGS, ArchiveOpt, CacheDirOpt, CompileBaselineOpt, ConfigOpt, ExecutorOpt,
                                  JsonOpt, RayAddressOpt, TimingSecondsOpt, TrialsOpt, archive_path, check_choice, emit,
                                  fail, flag_overrides, note, opened, resolved, task_ids)
from kernelevo.evaluation import Verdict


@archive_app.command()
def export(
    out: Path = typer.Option(..., "--out", "-o", help="file to write: .jsonl, or .parquet"),
    fmt: Optional[str] = typer.Option(None, "--format", help="jsonl or parquet (default: from the file's suffix)"),
    run: Optional[str] = typer.Option(None, help="only this run's kernels"),
    task: Optional[str] = typer.Option(None, help="only this task's kernels (name or id)"),
    verdict: Optional[str] = typer.Option(None, help="only kernels with this verdict"),
    archive: ArchiveOpt = None,
    config: ConfigOpt = None,
) -> None:
    """One row per kernel (task source, kernel source, verdict, speedups, profile summary, parents, operator,
    model, cost), as JSON lines or Parquet: usable as fine-tuning data."""
    from kernelevo.archive import export as exporting

    fmt = fmt or ("parquet" if out.suffix == ".parquet" else "jsonl")
    if fmt not in exporting.FORMATS:
        fail(f"--format {fmt}: use jsonl or parquet")
    with opened(archive, config) as store:
        if run and store.run(run) is None:
            fail(f"no run {run} in {store.path}; `kernelevo archive ls runs` lists them")
        wanted = task_ids(store, task) if task else {None}
        stored = [r for t in sorted(wanted, key=str) for r in store.export_rows(run_id=run, task_id=t)]
    data = [r for r in exporting.rows(stored) if verdict is None or r["verdict"] == verdict]
    try:
        exporting.write(data, out, fmt)
    except ImportError as exc:
        fail(f"Parquet needs pandas and pyarrow ({exc.name} is missing): pip install pandas pyarrow, or use .jsonl")
    except OSError as exc:
        fail(f"{out}: cannot write it: {exc.strerror or exc}")
    note(f"wrote {len(data)} kernels to {out} ({fmt})")


def _found(source: Path, task: Optional[Path]):
    """(kernels, skipped lines) of a folder, CUDA-L1's JSON lines, or Sakana's Parquet / JSON lines."""
    from kernelevo.archive import importing

    if source.is_dir():
        if task is not None and not task.exists():
            fail(f"--task {task}: no such file or folder; give the task file, or the folder holding <task>.py")
        return importing.kernelbench_folder(source, task)
    if not source.is_file() or source.suffix not in (".jsonl", ".json", ".parquet"):
        fail(f"{source}: give a folder of candidate .py files, a .jsonl file (CUDA-L1's collection or "
              "Sakana's archive rows) or a .parquet file of Sakana's archive")
    try:
        rows, skipped = importing.read_rows(source)
    except ImportError as exc:
        fail(f"reading Parquet needs pandas and pyarrow ({exc.name} is missing): pip install pandas pyarrow")
    except (OSError, ValueError) as exc:
        fail(f"{source}: cannot read it: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    found, more = (importing.sakana_rows if importing.is_sakana(rows) else importing.cuda_l1_rows)(rows)
    return found, skipped + more


def _store_found(store, found) -> tuple[list[int], list[int]]:
    """(new kernel ids, ids of imported kernels that were already there)."""
    from kernelevo.evolution.drivers.rejudge import store_imported

    stored = store_imported(store, found)
    return [k for k, new in stored if new], [k for k, new in stored if not new]


@archive_app.command("import")
def import_(
    ctx: typer.Context,
    source: Path = typer.Argument(..., help="a folder of KernelBench-format candidates, CUDA-L1's .jsonl, or "
                                  "Sakana's AI CUDA Engineer Archive as .parquet or .jsonl"),
    task: Optional[Path] = typer.Option(None, help="folder: the task file, or a folder with <task>.py for each "
                                        "candidate <task>__*.py (default: <task>.py beside the candidates, "
                                        "else in their parent folder)"),
    rejudge: bool = typer.Option(False, "--rejudge", help="judge the imported kernels here, beside their claims "
                                 "(also those imported before and never judged)"),
    device: Optional[str] = typer.Option(None, help="with --rejudge: cuda or cpu [default: cuda if present]"),
    gpus: str = typer.Option("all", help="with --rejudge: GPUs to judge on: all, or indices such as 0,1"),
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    policy: str = typer.Option("mixed", help="with --rejudge: mixed or strict (see kernelevo evaluate)"),
    build_timeout: float = typer.Option(900.0, help="with --rejudge: seconds allowed to build one kernel"),
    trials: TrialsOpt = 5,
    compile_baseline: CompileBaselineOpt = True,
    timing_seconds: TimingSecondsOpt = 1.5,
    cache_dir: CacheDirOpt = None,
    archive: ArchiveOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store kernels found elsewhere, their published numbers kept as claims; tasks matched by source hash."""
    from kernelevo.archive.store import Archive

    check_choice("--policy", policy, ("mixed", "strict"))
    found, skipped = _found(source, task)
    path = archive_path(archive, config)
    with Archive.open(path) as store:
        imported, known = _store_found(store, found)
        for line in skipped:
            note(f"skipped {line}")
        note(f"imported {len(imported)} kernels into {path}" + (f"; {len(known)} were already there" if known else ""))
        judged = []
        if rejudge:
            todo = imported + [k for k in known if _never_judged(store, k)]
            if not todo:
                note("nothing to rejudge")
            else:  # the devices are looked for (a cluster joined) only when there is something to judge
                judged = _rejudge(store, todo, _judge_options(ctx, build_timeout), cache_dir)
    if as_json:
        emit({"archive": str(path), "imported": imported, "already_there": len(known), "skipped": skipped,
              "rejudged": [vars(r) for r in judged]}, "json")
    elif judged:
        _print_rejudged(judged)


def _never_judged(store, kernel_id: int) -> bool:
    kernel = store.kernel(kernel_id)
    return kernel.origin == "import" and not kernel.evaluations


def _judge_options(ctx: typer.Context, build_timeout: float):
    """The judge's branch of the settings tree (kernelevo.evolution.settings), on the devices it resolves."""
    import dataclasses

    from kernelevo.judge.api import WorkerLimits

    flags = {name: SEARCH_FLAGS[name] for name in ("device", "gpus", "executor", "ray_address", "policy", "trials",
                                                   "compile_baseline", "timing_seconds")}
    options = resolved(Path("."), flag_overrides(ctx, flags), ctx.params["config"], search=False).options
    return dataclasses.replace(options.judge, devices=options.devices, limits=WorkerLimits(build=build_timeout),
                               spares=1)


def _rejudge(store, kernel_ids: list[int], options, cache_dir: Optional[Path]) -> list:
    """Judge the kernels under `options` (JudgeOptions)."""
    from kernelevo import runtime
    from kernelevo.evolution.drivers.rejudge import rejudge
    from kernelevo.judge.api import Judge

    cache = cache_dir or runtime.cache_dir()
    ray = " of the Ray cluster" if options.executor == "ray" else ""
    note(f"judging {len(kernel_ids)} kernels on {', '.join(options.devices)}{ray} (Ctrl-C keeps every verdict already in)")

    def tell(r) -> None:
        speed = f"{r.speedup_eager:.2f}x" if r.speedup_eager is not None else "-"
        claim = f" (claimed {r.claimed:.2f}x)" if r.claimed is not None else ""
        where = f" on {r.device}" if r.device else ""
        note(f"  kernel {r.kernel_id} {r.task}: {r.verdict}{' ' + r.reason if r.reason else ''} {speed}{claim}{where}")

    try:
        with Judge(cache, options) as judge:
            return rejudge(store, kernel_ids, judge, cache / "imports", tell)
    except KeyboardInterrupt:
        note("stopped: every verdict so far is in the archive; `--rejudge` again judges the rest")
        raise typer.Exit(130) from None


def _print_rejudged(judged: list) -> None:
    from kernelevo.cli.views.tables import print_rows

    rows = [{"kernel": r.kernel_id, "task": r.task, "verdict": r.verdict, "reason": r.reason,
             "speedup": r.speedup_eager, "claimed": r.claimed, "gpu": r.device_name, "device": r.device} for r in judged]
    print_rows(sorted(rows, key=lambda r: r["kernel"]), ("kernel", "task", "verdict", "reason", "speedup", "claimed",
                                                        "gpu", "device"))
    ok = sum(r.verdict == Verdict.OK for r in judged)
    note(f"{ok} of {len(judged)} passed here; they are stepping stones for runs on their tasks")


@archive_app.command()
def report(
    run: str = typer.Argument(..., help="run id (`kernelevo archive ls runs` lists them)"),
    out: Path = typer.Option(..., "--out", "-o", help="HTML file to write (one self-contained file)"),
    archive: ArchiveOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One self-contained HTML page of a run: progress against candidates and dollars, the lineage tree,
    the top kernels with diffs, verdicts, and yield and cost per operator and model. Opens offline."""
    from kernelevo.archive.reports.run_data import report_data
    from kernelevo.archive.reports.run_html import write

    with opened(archive, config) as store:
        if store.run(run) is None:
            fail(f"no run {run} in {store.path}; `kernelevo archive ls runs` lists them")
        data = report_data(store, run)
    if as_json:
        emit(data, "json")
    try:
        write(data, out)
    except OSError as exc:
        fail(f"{out}: cannot write it: {exc.strerror or exc}")
    note(f"wrote {out} ({len(data['lineage'])} kernels)")
