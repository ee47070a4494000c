"""`kernelevo archive`: read back what runs stored: tasks, runs, kernels, verdicts, profiles, lineage.

The `archive` command group and its read commands; export, import and report (archive_files.py) are
registered on the same group. Opened read-only, so looking never changes a run's record, even while a
run writes. Data goes to stdout (a table, or --json / --csv), notes to stderr, so a pipe receives only data.
"""
from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernelevo.cli.common import ArchiveOpt, ConfigOpt, CsvOpt, JsonOpt, emit, fail, note, opened, task_ids
from kernelevo.evaluation import Verdict

if TYPE_CHECKING:
    from kernelevo.archive.records import EvaluationRecord, KernelRecord, TaskRecord
    from kernelevo.archive.store import Archive

archive_app = typer.Typer(no_args_is_help=True,
                          help="Browse the archive: list, show, diff and trace kernels; export, import, and a run's HTML report.")

KERNEL_FIELDS = ("id", "run", "task", "operator", "parents", "generation", "island", "format", "verdict", "reason",
                 "speedup_eager", "speedup_compile", "candidate_ms", "specialized", "stepping_stone", "problem")
RUN_FIELDS = ("id", "task", "status", "started", "finished", "model", "kernels", "evaluations", "ok",
              "best_speedup", "best_kernel", "cost_usd")
TASK_FIELDS = ("id", "name", "source_hash", "runs", "kernels", "best_speedup")


class Kind(str, Enum):
    tasks = "tasks"
    runs = "runs"
    kernels = "kernels"


def output_format(as_json: bool, as_csv: bool = False) -> str:
    """The format emit() writes, from the --json and --csv flags."""
    if as_json and as_csv:
        fail("--json and --csv: pick one")
    return "json" if as_json else "csv" if as_csv else "table"


def _when(t: float | None) -> str | None:
    from datetime import datetime

    return None if t is None else datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")


def kernel_summary(k: KernelRecord, task_names: dict[int, str]) -> dict:
    """A kernel as `ls kernels` lists it: no source, its task by name, its speedups' 95 % intervals."""
    named = {"run": k.run_id, "task": task_names.get(k.task_id, str(k.task_id))}
    return {**{f: named[f] if f in named else getattr(k, f) for f in KERNEL_FIELDS},
            "speedup_eager_ci": k.speedup_eager_ci, "speedup_compile_ci": k.speedup_compile_ci}


def _run_rows(store: Archive, runs: list) -> list[dict]:
    rows = []
    for r in runs:
        counts, best = store.counts(r.id), _best(store, r.id)
        rows.append({"id": r.id, "task": r.task_name, "status": r.status, "started": _when(r.created_at),
                     "finished": _when(r.finished_at), "model": r.config.get("model"),
                     "kernels": counts.kernels, "evaluations": counts.evaluations,
                     "ok": counts.verdicts.get("ok", 0), "best_speedup": best[1] if best else None,
                     "best_speedup_ci": best[2] if best else None,
                     "best_kernel": best[0] if best else None, "cost_usd": store.spend(r.id).cost_usd})
    return rows


def _best(store: Archive, run_id: str) -> tuple[int, float | None, list | None] | None:
    """The run's best as its summary and report name it: the kernel its final re-judgement announced,
    with those figures; before a run has one, its fastest search figure. (A tune variant measured
    4.97x once in a search and 3.33x re-measured is not a finished run's best.)"""
    from kernelevo.archive.rows import announced

    finals = store.final_evaluations(run_id)
    kernel_id = announced(finals)
    if kernel_id is None:
        best = store.best_kernel(run_id)
        return (best.id, best.speedup_eager, best.speedup_eager_ci) if best else None
    return kernel_id, finals[kernel_id].speedup_eager, finals[kernel_id].speedup_eager_ci


def _task_rows(store: Archive, tasks: list) -> list[dict]:
    runs, kernels = store.runs(), store.kernels()
    rows = []
    for t in tasks:
        mine = [k for k in kernels if k.task_id == t.id]
        fastest = max((k for k in mine if k.verdict == Verdict.OK and k.speedup_eager is not None),
                      key=lambda k: k.speedup_eager, default=None)
        rows.append({"id": t.id, "name": t.name, "source_hash": t.source_hash[:12],
                     "runs": sum(r.task_id == t.id for r in runs), "kernels": len(mine),
                     "best_speedup": fastest.speedup_eager if fastest else None,
                     "best_speedup_ci": fastest.speedup_eager_ci if fastest else None})
    return rows


def _check_filters(kind: Kind, run: Optional[str], verdict: Optional[str], operator: Optional[str]) -> None:
    from kernelevo.evaluation import VERDICTS

    if kind != Kind.kernels and (verdict or operator):
        fail(f"--verdict and --operator filter kernels; use `kernelevo archive ls kernels`, not {kind.value}")
    if kind == Kind.tasks and run:
        fail("--run filters runs and kernels, not tasks")
    if verdict and verdict not in (*VERDICTS, "none"):
        fail(f"--verdict {verdict}: use one of {', '.join(VERDICTS)}, or none (never judged)")


@archive_app.command("ls")
def ls(
    kind: Kind = typer.Argument(Kind.runs, help="what to list"),
    task: Optional[str] = typer.Option(None, help="only this task (name or id)"),
    run: Optional[str] = typer.Option(None, help="only this run (id)"),
    verdict: Optional[str] = typer.Option(None, help="kernels whose latest search verdict is this (none: unjudged)"),
    min_speedup: Optional[float] = typer.Option(None, help="at least this fast vs eager (runs, tasks: their best)"),
    operator: Optional[str] = typer.Option(None, help="kernels made by this operator (translate, mutate, ...)"),
    limit: Optional[int] = typer.Option(None, min=1, help="only the newest N rows"),
    archive: ArchiveOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """List runs (the default), tasks or kernels, oldest first, with their verdicts and speedups."""
    fmt = output_format(as_json, as_csv)
    _check_filters(kind, run, verdict, operator)
    with opened(archive, config) as store:
        wanted = task_ids(store, task) if task else None
        if run and store.run(run) is None:
            fail(f"no run {run!r} in {store.path}; `kernelevo archive ls runs` lists them")
        if kind == Kind.tasks:
            rows = _task_rows(store, [t for t in store.tasks() if wanted is None or t.id in wanted])
        elif kind == Kind.runs:
            rows = _run_rows(store, [r for r in store.runs() if (wanted is None or r.task_id in wanted)
                                     and run in (None, r.id)])
        else:
            names = {t.id: t.name for t in store.tasks()}
            rows = [kernel_summary(k, names) for k in store.kernels(run_id=run)
                    if (wanted is None or k.task_id in wanted) and operator in (None, k.operator)
                    and verdict in (None, k.verdict or "none")]
    if min_speedup is not None:
        key = "speedup_eager" if kind == Kind.kernels else "best_speedup"
        rows = [r for r in rows if r[key] is not None and r[key] >= min_speedup]
    matched = len(rows)
    rows = rows[-limit:] if limit else rows
    emit(rows, fmt, {Kind.tasks: TASK_FIELDS, Kind.runs: RUN_FIELDS, Kind.kernels: KERNEL_FIELDS}[kind])
    if fmt == "table":
        note(f"{len(rows)} of {matched} {kind.value}" if len(rows) < matched else f"{matched} {kind.value}")


def _kernel(store: Archive, kernel_id: int) -> KernelRecord:
    row = store.kernel(kernel_id)
    if row is None:
        fail(f"no kernel {kernel_id} in {store.path}; `kernelevo archive ls kernels` lists them")
    return row


# show and lineage name one kernel the same way
KernelIdArg = Annotated[int, typer.Argument(metavar="ID", help="kernel id")]


def _with_lineage(kernel_id: int, archive: Optional[Path],
                  config: Optional[Path]) -> tuple[KernelRecord, list[str], TaskRecord | None, list[KernelRecord]]:
    """(the kernel, the attempts on it, its task, its ancestors), read in one opening of the archive."""
    from kernelevo.evolution import attempts

    with opened(archive, config) as store:
        k = _kernel(store, kernel_id)
        rows = store.kernels(run_id=k.run_id) if k.run_id else []
        # what the model tried on it since, in the lines its prompts show (all of them here)
        tried = [line.strip()[2:] for line in attempts.on_kernel(kernel_id, rows, limit=len(rows))]
        return k, tried, store.task(k.task_id), store.lineage(kernel_id)


@archive_app.command()
def show(kernel_id: KernelIdArg, archive: ArchiveOpt = None, config: ConfigOpt = None,
         as_json: JsonOpt = False) -> None:
    """One kernel: its facts, its source, its latest evaluation with the profile, its lineage, the
    model's account of it and what came of the attempts to change it."""
    fmt = output_format(as_json)
    k, tried, task, ancestors = _with_lineage(kernel_id, archive, config)
    if fmt == "json":
        emit({**k.to_dict(), "attempts": tried}, fmt)
        return
    from rich.console import Console

    console = Console()
    _print_facts(k, task, console)
    if k.evaluations:  # the profile is taken where it was measured (a search evaluation)
        _print_latest(k.evaluations[-1], console, next((e for e in reversed(k.evaluations) if e.profile), None))
    console.print(_lineage_line(k, ancestors), markup=False, highlight=False)
    if k.account:
        console.print("\nthe model's account:\n" + k.account, markup=False, highlight=False)
    console.print("\nattempts on it, newest first:" if tried else "\nno attempt on it yet", markup=False,
                  highlight=False)
    for line in tried:
        console.print("  " + line, markup=False, highlight=False)


def _print_facts(k: KernelRecord, task, console) -> None:
    from rich.table import Table
    from rich.text import Text

    from kernelevo.cli.views.tables import _COLOURS

    judged = next((e for e in k.evaluations if e.id == k.evaluation_id), None)
    times = [f"{name} {ms:.4g} ms" for name, ms in
             (("candidate", judged.candidate_ms), ("eager", judged.eager_ms), ("compile", judged.compiled_ms))
             if ms] if judged else []
    verdict = (k.verdict + (f"  ({k.reason})" if k.reason else "")) if k.verdict else "never judged"
    rows = [("kernel", f"{k.id}  (origin {k.origin}, stored {_when(k.created_at)})", ""),
            ("task", f"{task.name if task else '?'}  (task {k.task_id}, {task.source_hash[:12] if task else ''})", ""),
            ("run", k.run_id or "- (not made by a run)", ""),
            ("operator", f"{k.operator}, generation {k.generation}, island {k.island}", ""),
            ("parents", ", ".join(map(str, k.parents)) or "none", ""),
            ("format", k.format or "-", ""),
            ("verdict", verdict, _COLOURS.get(k.verdict, "red") if k.verdict else "dim"),
            ("message", judged.message if judged else None, ""),
            ("speedup", _speedups(k), ""),
            ("time", ", ".join(times), ""),
            ("stepping stone", k.stepping_stone and (k.stone_reason or "yes"), ""),
            ("problem", k.problem, "yellow")]
    facts = Table(show_header=False, box=None, pad_edge=False)
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    for name, value, style in rows:
        if value:  # a fact this kernel does not have is left out, not shown empty
            facts.add_row(name, Text(value, style=style))  # Text: stored strings may hold [brackets]
    console.print(facts)
    if k.source:
        from rich.syntax import Syntax

        console.print(Syntax(k.source, "python", line_numbers=True, word_wrap=True))
    else:
        console.print(f"(no source: {k.problem or 'none stored'})", markup=False, style="dim")


def _speedups(k: KernelRecord) -> str:
    """The final re-judgement's figures where the kernel has one, the search's labelled beside them."""
    from kernelevo.text import speedup_text

    def pair(eager, eager_ci, compiled, compiled_ci) -> str:
        return f"{speedup_text(eager, eager_ci)} vs eager, {speedup_text(compiled, compiled_ci)} vs torch.compile"

    def of(e: EvaluationRecord) -> str:
        return pair(e.speedup_eager, e.speedup_eager_ci, e.speedup_compile, e.speedup_compile_ci)

    def latest(purpose: str) -> EvaluationRecord | None:
        return next((e for e in reversed(k.evaluations) if e.purpose == purpose and e.verdict == Verdict.OK), None)

    final, again = latest("final"), latest("rejudge")
    search = pair(k.speedup_eager, k.speedup_eager_ci, k.speedup_compile, k.speedup_compile_ci) \
        if k.speedup_eager is not None else ""
    if again is not None and final is None:  # a new best re-measured before the search believed it
        return f"{of(again)} (re-measured)" + (f"; search: {search}" if search else "")
    if final is None:
        return search
    return f"{of(final)} (final re-judgement)" + (f"; search: {search}" if search else "")


def _print_latest(evaluation: EvaluationRecord, console, profiled: EvaluationRecord | None = None) -> None:
    """The kernel's latest evaluation as `kernelevo evaluate` prints one, with the latest profile."""
    from kernelevo.evaluation import Profile
    from kernelevo.cli.views.tables import print_evaluation, print_profile

    console.rule(f"evaluation {evaluation.id} ({evaluation.purpose}, {_when(evaluation.created_at)})", align="left")
    try:
        record = evaluation.evaluation()
        stored = evaluation.profile or (profiled.profile if profiled else None)
        profile = Profile.from_dict(stored) if stored else None
    except (TypeError, KeyError, ValueError) as exc:
        # a record written by another kernelevo version: the facts above still hold
        note(f"evaluation {evaluation.id}: stored record not readable by this kernelevo ({exc})")
        return
    print_evaluation(record, console)
    if profile:
        print_profile(profile, console)


def _lineage_line(k: KernelRecord, ancestors: list[KernelRecord]) -> str:
    """'lineage: 9 <- 7 mutate <- 3 translate, 4 translate': each step one generation of parents."""
    steps = [", ".join(f"{a.id} {a.operator}" for a in ancestors if a.depth == depth)
             for depth in sorted({a.depth for a in ancestors})]
    return f"lineage: {k.id} " + ("<- " + " <- ".join(steps) if steps else "(no parents)")


@archive_app.command()
def diff(
    a: int = typer.Argument(..., metavar="A", help="kernel id (the old side)"),
    b: int = typer.Argument(..., metavar="B", help="kernel id (the new side)"),
    archive: ArchiveOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Unified diff of two kernels' sources."""
    from kernelevo.archive.rows import source_diff

    fmt = output_format(as_json)
    with opened(archive, config) as store:
        left, right = _kernel(store, a), _kernel(store, b)
        names = {t.id: t.name for t in store.tasks()}
    text = "".join(line + "\n" for line in source_diff(left.source, right.source, a, b))
    if fmt == "json":
        emit({"a": kernel_summary(left, names), "b": kernel_summary(right, names), "diff": text}, fmt)
        return
    if not text:
        note(f"kernels {a} and {b} have the same source")
        return
    from rich.console import Console
    from rich.syntax import Syntax

    Console().print(Syntax(text, "diff", word_wrap=True))


@archive_app.command()
def lineage(kernel_id: KernelIdArg, archive: ArchiveOpt = None, config: ConfigOpt = None,
            as_json: JsonOpt = False) -> None:
    """The kernel and its ancestors, up through its parents to the first translations."""
    fmt = output_format(as_json)
    k, _, _, ancestors = _with_lineage(kernel_id, archive, config)
    k = dataclasses.replace(k, evaluations=(), depth=0)
    if fmt == "json":
        emit([{key: value for key, value in a.to_dict().items() if key != "evaluations"} for a in (k, *ancestors)], fmt)
        return
    from rich.console import Console

    Console().print(_tree(k, {a.id: a for a in ancestors}))


def _tree(k: KernelRecord, by_id: dict[int, KernelRecord]):
    """A rich Tree, child at the root, each node's parents below it. A kernel reached twice (two
    crossovers sharing an ancestor) is expanded once and then only named, so the tree stays small."""
    from rich.text import Text
    from rich.tree import Tree

    from kernelevo.cli.views.tables import _COLOURS
    from kernelevo.text import speedup_text

    def label(row: KernelRecord, seen_before: bool = False) -> Text:
        return Text.assemble((f"{row.id} ", "bold"), f"{row.operator} ",
                             (row.verdict or "unjudged", _COLOURS.get(row.verdict, "dim")),
                             f" {speedup_text(row.speedup_eager, row.speedup_eager_ci)}",
                             (" (shown above)" if seen_before else "", "dim"))

    root, seen = Tree(label(k)), {k.id}
    # an explicit stack in preorder, not recursion: a long chain of generations must not hit the
    # recursion limit, and "shown above" must name a node that really is above
    stack = [(root, p) for p in reversed(k.parents)]
    while stack:
        holder, parent_id = stack.pop()
        parent = by_id[parent_id]  # lineage() holds every ancestor
        if parent_id in seen:
            holder.add(label(parent, seen_before=True))
        else:
            seen.add(parent_id)
            node = holder.add(label(parent))
            stack.extend((node, p) for p in reversed(parent.parents))
    return root
