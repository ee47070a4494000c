"""A bench: a suite of tasks, each searched by `loop.optimize` or scored from given candidate files,
into one archive. Like loop/ and rejudge.py this joins the rooms; it adds no search logic.

Each task's row points at the evaluation behind its figures (the run's final re-judgement, or the best given
candidate's verdict): the table is read from the archive. Tasks run concurrently, one per judge device (timings
of two tasks never share a GPU); their LLM calls overlap. Resumable: a done task is not redone; an interrupted
or failed one (an error, not a verdict: a lost folder, a full disk, our bug) resumes its run, no reply paid twice.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fnmatch
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelevo.agent.client import Stop
from kernelevo.archive.records import BenchRecord, BenchTaskRecord
from kernelevo.text import speedup_text

from .. import ensemble as ensembles
from ..options import OptimizeOptions, judge_options
from ..outcome import EXIT_UNREACHABLE, Interrupted, Progress
from .bench_score import baseline_warnings, score_task, scoring_judge


@dataclass(frozen=True)
class BenchOptions:
    suite: Path  # a folder of task files, or a text file listing task paths
    search: OptimizeOptions  # the search of each task: its task_path is replaced, its budget is per task
    tasks_glob: str | None = None
    candidates: Path | None = None  # score `<task>__<label>.py` files instead of searching
    max_cost_usd: float | None = None  # LLM spend of the whole suite
    resume: str | None = None  # a bench id
    # (task name, weight) pairs: the suite's --max-cost-usd and the search's --max-llm-calls (then a
    # total over the tasks) shared in proportion: a model's parts by their share of its time, so one at
    # 2 % gets little; () shares nothing
    weights: tuple[tuple[str, float], ...] = ()
    again: tuple[str, ...] = ()  # resumed: done tasks whose final judgement is made again (OptimizeOptions.judge_again)
    force: bool = True  # search near-light tasks too: a suite's figures count each (a model's parts: --force's)


@dataclass
class BenchView:
    """What the live view shows; handed to `on_progress` whenever a task moves."""
    bench_id: str = ""
    tasks: int = 0
    done: int = 0
    correct: int = 0
    fast_1: int = 0  # correct and above 1.0x against `baseline`
    spent_usd: float = 0.0
    running: dict[str, str] = field(default_factory=dict)  # task name -> its one-line state
    baseline: str = "eager"  # what fast_1 counts against: "compile" or "eager"


@dataclass(frozen=True)
class BenchOutcome:
    bench_id: str
    status: str  # finished, or stopped (Ctrl-C: resumable)
    waiting: int = 0  # tasks whose replay ended: each waits for its prompt's answer, then --resume


class BenchError(ValueError):
    """A suite or a resume that cannot be run, in one line."""


def suite_tasks(suite: Path, tasks_glob: str | None = None) -> list[Path]:
    """The suite's task files in order: a folder's `*.py` that define `class Model` (not candidates
    `<task>__<label>.py`, not ModelNew files), or the paths a text file lists (relative to it; `#`
    starts a comment). `tasks_glob` keeps the files whose name matches."""
    suite = Path(suite)
    if suite.is_dir():
        paths = [p for p in sorted(suite.glob("*.py")) if "__" not in p.stem and _is_task(p)]
    elif suite.is_file():
        lines = [line.split("#", 1)[0].strip() for line in suite.read_text().splitlines()]
        paths = [(suite.parent / line).resolve() for line in lines if line]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise BenchError(f"{suite}: lists {missing[0]}, which does not exist")
    else:
        raise BenchError(f"{suite}: no such folder or file; give a folder of task files or a file listing them")
    if tasks_glob:
        paths = [p for p in paths if fnmatch.fnmatch(p.name, tasks_glob) or fnmatch.fnmatch(p.stem, tasks_glob)]
    if not paths:
        raise BenchError(f"{suite}: no task files" + (f" match --tasks {tasks_glob}" if tasks_glob else ""))
    return paths


def _is_task(path: Path) -> bool:
    text = path.read_text(errors="replace")
    return "class Model" in text and "class ModelNew" not in text and "def get_inputs" in text


def run_bench(options: BenchOptions, on_progress: Callable[[BenchView], None] = lambda v: None,
              on_status: Callable[[str], None] = lambda text: None) -> BenchOutcome:
    """Run (or resume) a bench to its end; Ctrl-C stops every task's search, each resumable, and
    leaves the bench 'stopped'. Raises BenchError for a suite or resume that cannot run."""
    from kernelevo.archive.store import Archive

    with Archive.open(options.search.archive_path) as store:
        bench_id = _open_bench(store, options)
        options = _as_stored(store.bench(bench_id), options)
        again = _judged_again(store, bench_id, options)
        _raised_calls(store, bench_id, options)
        store.set_bench_status(bench_id, "running")
        runner = _Runner(store, bench_id, options, on_progress, on_status, again)
        try:
            runner.run()
        except KeyboardInterrupt:
            store.set_bench_status(bench_id, "stopped")
            raise Interrupted(bench_id) from None
        except Stop:
            store.set_bench_status(bench_id, "stopped")
            raise
        status = "stopped" if runner.waiting else "finished"
        store.set_bench_status(bench_id, status)
        return BenchOutcome(bench_id, status, runner.waiting)


def _open_bench(store, options: BenchOptions) -> str:
    if options.resume:
        bench = store.bench(options.resume)
        if bench is None:
            raise BenchError(f"--resume {options.resume}: no such bench in {store.path}; "
                             "`kernelevo bench ls` lists them")
        return options.resume
    from .. import placement

    paths = suite_tasks(options.suite, options.tasks_glob)
    s = options.search
    gpu, torch_version, _ = placement.label(s)
    config = {"model": ", ".join(s.models) if not options.candidates else None, "devices": list(s.devices),
              "models": list(s.models), "model_for": dict(s.model_for or ()),
              "executor": s.judge.executor,
              "candidates": str(options.candidates) if options.candidates else None,
              "tasks_glob": options.tasks_glob, "max_cost_usd": options.max_cost_usd,
              "per_task": dataclasses.asdict(s.budget), "search": dataclasses.asdict(s.settings),
              "format": s.fmt, "policy": s.judge.policy, "trials": s.judge.trials, "shapes": s.judge.shapes,
              "seed": s.seed,
              "weights": dict(options.weights), "baseline": s.ranked_by}
    return store.start_bench(str(options.suite), "candidates" if options.candidates else "search", config, gpu,
                             torch_version, [(str(p), p.stem) for p in paths])


def _judged_again(store, bench_id: str, options: BenchOptions) -> frozenset[int]:
    """The positions of the done tasks named by `again`, each set pending for its judgement to be made again."""
    rows = {r.name: r for r in store.bench_tasks(bench_id)}
    if unknown := [name for name in options.again if name not in rows]:
        raise BenchError(f"--again {', '.join(unknown)}: no such task in bench {bench_id} (its tasks: {', '.join(rows)})")
    if options.again and (not options.resume or options.candidates):
        raise BenchError("--again judges a resumed bench's searched tasks again: pass --resume BENCH")
    again = frozenset(rows[name].position for name in options.again if rows[name].status == "done")
    for position in again:
        store.set_bench_task(bench_id, position, status="pending")
    return again


def _raised_calls(store, bench_id: str, options: BenchOptions) -> None:
    """A resumed bench that allows each task more calls than a done task's search stopped at (its call cap):
    that task is set pending, and its search goes on from where the cap stopped it."""
    calls = options.search.budget.max_llm_calls
    if not (options.resume and calls) or options.candidates:
        return
    cost_cap = options.search.budget.max_cost_usd
    for row in store.bench_tasks(bench_id):
        run = store.run(row.run_id) if row.status == "done" and row.run_id else None
        spent = store.spend(run.id) if run is not None and run.status == "budget" else None
        # one its cost cap stopped would stop again at once, its final judgement made again for nothing
        if spent is not None and spent.calls < _calls_cap(options, row.name) \
                and (cost_cap is None or spent.cost_usd < cost_cap):
            store.set_bench_task(bench_id, row.position, status="pending")


def _share(options: BenchOptions, name: str) -> float | None:
    """A task's share of the suite's budget (its weight over all weights), None without weights."""
    weights = dict(options.weights)
    total = sum(weights.values())
    return weights.get(name, 0.0) / total if weights and total > 0 else None


def _calls_cap(options: BenchOptions, name: str) -> int | None:
    """The calls a task's search may make: the search's --max-llm-calls shared by weight, where weights are."""
    calls, share = options.search.budget.max_llm_calls, _share(options, name)
    return max(1, round(calls * share)) if calls and share is not None else calls


def _as_stored(bench: BenchRecord, options: BenchOptions) -> BenchOptions:
    """A resumed bench goes on as it started: scoring the same candidates folder, or searching, with its seed."""
    stored, seed = bench.config.get("candidates"), bench.config.get("seed")
    search = options.search if seed is None else dataclasses.replace(  # its tasks left draw as the others did
        options.search, judge=dataclasses.replace(options.search.judge, seed=int(seed)))
    options = dataclasses.replace(options, search=search)
    if bench.config.get("weights") and not options.weights:  # a model's parts keep their shares
        options = dataclasses.replace(options, weights=tuple(bench.config["weights"].items()))
    if bench.mode == "search" and (not search.models or search.model_for is None):  # the bench's own models
        models, pins = ensembles.given_or_stored(search.models, search.model_for, bench.config)
        options = dataclasses.replace(options, search=dataclasses.replace(search, models=models, model_for=pins))
    if bench.mode == "candidates" and options.candidates is None:
        return dataclasses.replace(options, candidates=Path(stored))
    if bench.mode == "search" and options.candidates is not None:
        raise BenchError(f"bench {bench.id} searches its tasks; resume it without --candidates")
    return options


# How long Ctrl-C waits for each task's search to stop (a search stops at its next half-second tick, then
# ends its judge's jobs); one that has not stopped by then is left, its run resumable as after a kill.
STOP_GRACE_S = 60.0


class _Runner:
    """The bench's tasks on its devices: one worker thread per device takes the next pending task."""

    def __init__(self, store, bench_id: str, options: BenchOptions, on_progress, on_status,
                 again: frozenset[int] = frozenset()):
        self.store, self.bench_id, self.options, self.again = store, bench_id, options, again
        self.on_progress, self.on_status = on_progress, on_status
        self.rows = store.bench_tasks(bench_id)
        # not done: pending, running (the session was killed), skipped (the suite's money ran out) or
        # failed (an error stopped it, its run resumable)
        self.queue = [r for r in self.rows if r.status != "done"]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        s = options.search
        self.view = BenchView(bench_id, len(self.rows), baseline=s.ranked_by)
        self.committed = 0.0  # the LLM spend of tasks this session will not run (_tally)
        self.reserved: dict[int, float] = {}  # position -> the most a running task may still spend
        self.live: dict[int, Progress] = {}
        self.run_ids: dict[int, str] = {}  # position -> the run its search reported this session
        self.judge = None  # scoring candidates: one judge for every task (_scoring_judge)
        self.waiting = 0  # tasks whose replay ended this session: each waits for its next reply (bench --resume)

    def run(self) -> None:
        self._tally()
        devices = self.options.search.devices
        with contextlib.ExitStack() as stack:
            if self.options.candidates:
                self.judge = stack.enter_context(scoring_judge(self, tuple(devices)))
            self._run_workers(devices)

    def _run_workers(self, devices) -> None:
        pool = concurrent.futures.ThreadPoolExecutor(len(devices), thread_name_prefix="bench")
        futures = [pool.submit(self._worker, d) for d in devices]
        try:
            for future in futures:
                while True:
                    try:
                        future.result(timeout=0.5)
                        break
                    except concurrent.futures.TimeoutError:
                        continue
        except KeyboardInterrupt:
            self.stop.set()  # each search sees it at its next progress tick and stops, resumable
            _, left = concurrent.futures.wait(futures, timeout=STOP_GRACE_S)
            if left:  # a search stuck where it never ticks: left as after a kill (--resume takes it up)
                stuck = ", ".join(sorted(self.view.running)) or "a task"
                self.on_status(f"{stuck}: did not stop within {STOP_GRACE_S:.0f} s; its run resumes as after a kill")
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()

    def _worker(self, device: str) -> None:
        while not self.stop.is_set():
            with self.lock:
                row = self.queue.pop(0) if self.queue else None
            if row is None:
                return
            self._task(row, device)

    def _task(self, row: BenchTaskRecord, device: str) -> None:
        position, started = row.position, time.monotonic()
        cap = self._reserve(row)
        if cap is not None and cap <= 0:
            self.store.set_bench_task(self.bench_id, position, status="skipped",
                                      error="the suite's --max-cost-usd was spent before it started")
            return self._tally()
        self.store.set_bench_task(self.bench_id, position, status="running", error="")  # a failed one tried again
        self._show(row.name, "starting")
        try:
            fields = score_task(self, row, device, cap) if self.options.candidates \
                else _search_task(self, row, device, cap)
            if fields["status"] == "pending":  # its replay ended: the task waits for the reply
                with self.lock:
                    self.waiting += 1
        except Interrupted as exc:  # stopped: a search resumes with the bench; a judgement made again is left as it was
            fields = {"status": "done"} if position in self.again else {
                "status": "pending", "run_id": getattr(exc, "run_id", None) or self.run_ids.get(position) or row.run_id}
        except Stop:  # the model refuses (a bad key) or is gone: every other task would fail alike
            self.stop.set()
            self.store.set_bench_task(self.bench_id, position, status="pending")
            raise
        except Exception as exc:  # noqa: BLE001 - one task's failure is its row's verdict, not the suite's
            first = str(exc).splitlines()[0] if str(exc) else ""
            fields = {"status": "failed", "error": f"{type(exc).__name__}: {first}"}
        wall = (row.wall_s or 0.0) + time.monotonic() - started
        self.store.set_bench_task(self.bench_id, position, wall_s=wall, **fields)
        with self.lock:
            self.reserved.pop(position, None)
            self.live.pop(position, None)
            self.view.running.pop(row.name, None)
        self._tally()

    def _reserve(self, row: BenchTaskRecord) -> float | None:
        """The most this task's run may spend in all (a resumed run counts what it spent before):
        its own cap, within what the suite has left once every running task spends its whole cap,
        so concurrent tasks cannot overspend the suite. None: no limit."""
        per_task = self.options.search.budget.max_cost_usd
        if self.options.max_cost_usd is None or self.options.candidates:
            return per_task
        weight = _share(self.options, row.name)
        if weight is not None:  # the task's share of the suite's spend
            share = self.options.max_cost_usd * weight
            per_task = share if per_task is None else min(per_task, share)
        before = row.cost_usd or 0.0
        with self.lock:
            left = self.options.max_cost_usd - self.committed - sum(self.reserved.values())
            cap = before + left if per_task is None else min(per_task, before + left)
            self.reserved[row.position] = max(cap - before, 0.0)
        return cap if cap > before else 0.0

    def progress_of(self, row: BenchTaskRecord) -> Callable[[Progress], None]:
        """The search's on_progress: the live view, and the bench's Ctrl-C (raised inside the search,
        so the run is stored as stopped and resumable)."""
        def seen(p: Progress) -> None:
            if self.stop.is_set() and p.status != "starting":
                raise KeyboardInterrupt
            if p.run_id and self.run_ids.get(row.position, row.run_id) != p.run_id:  # a killed bench resumes it
                self.run_ids[row.position] = p.run_id
                self.store.set_bench_task(self.bench_id, row.position, run_id=p.run_id)
            with self.lock:
                self.live[row.position] = p
            best = f"best {speedup_text(p.best_eager, p.best_eager_ci)}" if p.best_eager else "no correct kernel yet"
            self._show(row.name, f"gen {p.generation}  judged {p.judged}  {best}  calls {p.calls}  "
                                    f"${p.spend_usd:.2f}  {p.status}")
        return seen

    def _show(self, name: str, text: str) -> None:
        with self.lock:
            self.view.running[name] = text
            self.view.spent_usd = self.committed + sum(p.spend_usd for p in self.live.values())
        self.on_progress(self.view)

    def _tally(self) -> None:
        from kernelevo.archive.reports.bench_data import task_rows

        rows = task_rows(self.store.bench_tasks(self.bench_id))
        with self.lock:
            queued = {r.position for r in self.queue}  # a failed task here is tried again this session
            finished = [r for r in rows
                        if r["status"] == "done" or r["status"] == "failed" and r["position"] not in queued]
            self.committed = sum(r["cost_usd"] for r in finished)
            self.view.done = len(finished)
            self.view.correct = sum(r["correct"] for r in rows)
            key = "speedup_compile" if self.view.baseline == "compile" else "speedup_eager"
            self.view.fast_1 = sum(r["correct"] and (r[key] or 0) > 1.0 for r in rows)
            self.view.spent_usd = self.committed + sum(p.spend_usd for p in self.live.values())
        self.on_progress(self.view)


# -- one task of a bench: its search (its given candidate files judged: bench_score); returns its row's fields --

def _search_task(runner: _Runner, row: BenchTaskRecord, device: str, cap: float | None) -> dict:
    """The task's search on `device` alone, resuming its run when an earlier session stopped it."""
    from kernelevo.agent.client import Unreachable

    from ..loop import optimize

    base = runner.options.search
    resume = row.run_id  # a row not done has a run only when a session stopped in its search
    limits = dataclasses.replace(base.budget, max_cost_usd=cap, max_llm_calls=_calls_cap(runner.options, row.name))
    options = dataclasses.replace(base, task_path=Path(row.path), devices=(device,), resume=resume, budget=limits,
                                  judge_again=row.position in runner.again, force=runner.options.force or base.force)
    outcome = optimize(options, on_progress=runner.progress_of(row),
                       on_status=lambda text: runner._show(row.name, text))
    if outcome.exit_code == EXIT_UNREACHABLE:  # the run is stopped and resumable; so is the bench
        raise Unreachable(outcome.reason)
    store = runner.store
    task_id = store.run(outcome.run_id).task_id
    if outcome.waiting:  # its replay ended: the run goes on once the prompt is answered (bench --resume)
        return {"status": "pending", "run_id": outcome.run_id, "task_id": task_id, "error": ""}
    fields = {"status": "done", "run_id": outcome.run_id, "task_id": task_id, "error": ""}
    if outcome.best is not None:
        fields.update(kernel_id=outcome.best_kernel_id,
                      evaluation_id=store.final_evaluation_id(outcome.run_id, outcome.best_kernel_id),
                      degenerate="; ".join(outcome.best.warnings))
    else:
        fields["degenerate"] = _probe(runner, Path(row.path), device)
    return fields


def _probe(runner: _Runner, path: Path, device: str) -> str:
    """The reference's warnings when no kernel of the search passed (so no evaluation carries them)."""
    from kernelevo.judge.api import Judge
    from kernelevo.tasks import TaskError, load_task

    try:
        task = load_task(path)
    except TaskError:
        return ""
    with Judge(runner.options.search.cache_dir, judge_options(runner.options.search, (device,))) as judge:
        return baseline_warnings(judge, task, device)
