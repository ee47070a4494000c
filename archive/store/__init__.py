"""The archive store: the one place in kernelevo that speaks SQL. Every read and write of the
archive file goes through it.

One SQLite file (WAL, foreign keys on) holds every task, run, kernel, evaluation, LLM call,
reflection, embedding and event. Read methods return records (archive/records.py), JSON columns decoded:
a kernel is a KernelRecord (kernels, kernel, lineage, best_kernel, stepping_stones), an evaluation an
EvaluationRecord (evaluation, final_evaluations, remeasurements, a kernel's `evaluations`). export_rows alone gives
dicts: each is one JSON line of an export.

`Archive` is made of parts, one object per thing stored, each over the one connection (`connection.Store`:
opening, migrations, and the four doors to the connection, `write`, `tx`, `read`, `one`): runs.py: tasks,
runs and their events; kernels.py: kernels, evaluations, profiles, stepping stones, lineage and reflections;
embeddings.py: vectors of kernels and tasks; calls.py: LLM calls and the counters derived from a run's rows;
benches.py: benches. A part that reads another's rows is handed that part (kernels look a task up by hash,
calls count a run's events: both read through the runs part). The parts import only connection.py and runs.py,
never this package, so nothing imports in a circle. Archive holds the parts and delegates each of its methods
to one of them, listed below by part: a method's code is in its part.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from .benches import Benches
from .calls import Calls
from .connection import BUSY_TIMEOUT_MS, Store
from .embeddings import Embeddings
from .kernels import Kernels
from .runs import Runs

__all__ = ["Archive", "BUSY_TIMEOUT_MS", "PARTS"]

P = ParamSpec("P")
R = TypeVar("R")


def _to(part: str, fn: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A method of Archive that calls `fn` of the part held as `part`, with its signature and docstring."""
    @functools.wraps(fn)
    def method(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return fn(getattr(self, part), *args, **kwargs)
    method.part = part  # type: ignore[attr-defined]  # which of Archive's attributes it calls (test_house)
    return method


class Archive:
    """An open archive file. Use `Archive.open(path)` or `Archive.open_readonly(path)`."""

    def __init__(self, db: Store) -> None:
        self._db = db
        self.path, self.readonly = db.path, db.readonly
        self._runs = Runs(db)
        self._kernels = Kernels(db, self._runs)
        self._embeddings = Embeddings(db)
        self._calls = Calls(db, self._runs)
        self._benches = Benches(db)

    @classmethod
    def open(cls, path: str | Path) -> Self:
        """Open (creating it and its folder if needed) and bring the schema up to date."""
        return cls(Store.open(path))

    @classmethod
    def open_readonly(cls, path: str | Path) -> Self:
        """Open another archive for reading only (`--seed-from FILE`); any write raises sqlite3.Error."""
        return cls(Store.open_readonly(path))

    def applied_migrations(self) -> list[str]:
        return self._db.applied_migrations()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # tasks, runs and their events (runs.py)
    add_task = _to("_runs", Runs.add_task)
    task_by_hash = _to("_runs", Runs.task_by_hash)
    task = _to("_runs", Runs.task)
    tasks = _to("_runs", Runs.tasks)
    start_run = _to("_runs", Runs.start_run)
    run = _to("_runs", Runs.run)
    runs = _to("_runs", Runs.runs)
    finish_run = _to("_runs", Runs.finish_run)
    set_run_status = _to("_runs", Runs.set_run_status)
    add_event = _to("_runs", Runs.add_event)
    events = _to("_runs", Runs.events)

    # kernels, evaluations, profiles, stepping stones, lineage and reflections (kernels.py)
    add_kernel = _to("_kernels", Kernels.add_kernel)
    add_evaluation = _to("_kernels", Kernels.add_evaluation)
    set_profile = _to("_kernels", Kernels.set_profile)
    profiles = _to("_kernels", Kernels.profiles)
    mark_stepping_stone = _to("_kernels", Kernels.mark_stepping_stone)
    add_reflection = _to("_kernels", Kernels.add_reflection)
    set_reflection_kernel = _to("_kernels", Kernels.set_reflection_kernel)
    reflections = _to("_kernels", Kernels.reflections)
    kernels = _to("_kernels", Kernels.kernels)
    kernel = _to("_kernels", Kernels.kernel)
    evaluation = _to("_kernels", Kernels.evaluation)
    lineage = _to("_kernels", Kernels.lineage)
    best_kernel = _to("_kernels", Kernels.best_kernel)
    final_evaluations = _to("_kernels", Kernels.final_evaluations)
    final_evaluation_id = _to("_kernels", Kernels.final_evaluation_id)
    remeasurements = _to("_kernels", Kernels.remeasurements)
    stepping_stones = _to("_kernels", Kernels.stepping_stones)
    export_rows = _to("_kernels", Kernels.export_rows)

    # vectors of kernels and tasks (embeddings.py)
    put_embedding = _to("_embeddings", Embeddings.put_embedding)
    embeddings = _to("_embeddings", Embeddings.embeddings)
    embedding_hashes = _to("_embeddings", Embeddings.embedding_hashes)
    similar_tasks = _to("_embeddings", Embeddings.similar_tasks)

    # LLM calls and the counters of a run (calls.py)
    add_llm_call = _to("_calls", Calls.add_llm_call)
    answered_prompts = _to("_calls", Calls.answered_prompts)
    recorded_replies = _to("_calls", Calls.recorded_replies)
    replayed_replies = _to("_calls", Calls.replayed_replies)
    spend = _to("_calls", Calls.spend)
    operator_costs = _to("_calls", Calls.operator_costs)
    call_yield = _to("_calls", Calls.call_yield)
    call_models = _to("_calls", Calls.call_models)
    call_formats = _to("_calls", Calls.call_formats)
    model_yield = _to("_calls", Calls.model_yield)
    format_yield = _to("_calls", Calls.format_yield)
    format_best = _to("_calls", Calls.format_best)
    timeline = _to("_calls", Calls.timeline)
    llm_usage = _to("_calls", Calls.llm_usage)
    counts = _to("_calls", Calls.counts)

    # benches and their tasks (benches.py)
    start_bench = _to("_benches", Benches.start_bench)
    bench = _to("_benches", Benches.bench)
    benches = _to("_benches", Benches.benches)
    set_bench_status = _to("_benches", Benches.set_bench_status)
    set_bench_task = _to("_benches", Benches.set_bench_task)
    bench_tasks = _to("_benches", Benches.bench_tasks)


PARTS: dict[str, type] = {"_runs": Runs, "_kernels": Kernels, "_embeddings": Embeddings, "_calls": Calls,
                          "_benches": Benches}  # the attribute of Archive that holds each part
