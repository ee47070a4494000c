"""Tasks (a module to speed up, stored once per source hash), runs (one search on a task: its config,
machine and status) and the events a run writes as it goes."""
from __future__ import annotations

import sqlite3
import time

from ..records import EventRecord, RunRecord, TaskRecord
from ..rows import RUN_STATUSES, check_choice, dumps, loads, new_run_id
from .connection import Store


_RUNS = ("SELECT r.*, t.source_hash AS task_hash, t.name AS task_name FROM runs r "
         "JOIN tasks t ON t.id = r.task_id")


class Runs:
    """Tasks, runs and their events: one part of the Archive, over its connection `db`."""

    def __init__(self, db: Store) -> None:
        self._db = db

    # ---- tasks and runs --------------------------------------------------------------------

    def add_task(self, name: str, source: str, source_hash: str) -> int:
        """The task's id; a task already stored under this hash keeps its row (and first name)."""
        self._db.write("INSERT INTO tasks (source_hash, name, source, created_at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT(source_hash) DO NOTHING", (source_hash, name, source, time.time()))
        return self._db.one("SELECT id FROM tasks WHERE source_hash = ?", (source_hash,))["id"]

    def task_by_hash(self, source_hash: str) -> TaskRecord | None:
        row = self._db.one("SELECT * FROM tasks WHERE source_hash = ?", (source_hash,))
        return TaskRecord(**row) if row else None

    def task(self, task_id: int) -> TaskRecord | None:
        row = self._db.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        return TaskRecord(**row) if row else None

    def tasks(self) -> list[TaskRecord]:
        return [TaskRecord(**row) for row in self._db.read("SELECT * FROM tasks ORDER BY id")]

    def start_run(self, task_id: int, config: dict, seed: int, device: str, gpu_name: str,
                  torch_version: str, cuda_version: str) -> str:
        """Record a new run in status 'running'; returns its id, e.g. 'r20261122-1530-ab12'."""
        for attempt in range(8):
            run_id = new_run_id()
            try:
                self._db.write("INSERT INTO runs (id, task_id, created_at, config, seed, device, gpu_name, "
                               "torch_version, cuda_version, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')",
                               (run_id, task_id, time.time(), dumps(config), seed, device, gpu_name,
                                torch_version, cuda_version))
                return run_id
            except sqlite3.IntegrityError:
                if attempt == 7 or self.run(run_id) is None:
                    raise  # not an id clash (a missing task, say)
        raise AssertionError("unreachable")

    def run(self, run_id: str) -> RunRecord | None:
        """The run (its config parsed, its task's hash and name)."""
        row = self._db.one(f"{_RUNS} WHERE r.id = ?", (run_id,))
        return RunRecord.of(row) if row else None

    def runs(self, task_id: int | None = None) -> list[RunRecord]:
        """Runs oldest first, of one task or of all."""
        return [RunRecord.of(row) for row in self._db.read(
            f"{_RUNS} WHERE ? IS NULL OR r.task_id = ? ORDER BY r.created_at, r.id", (task_id, task_id))]

    def finish_run(self, run_id: str, status: str, stop_reason: str) -> None:
        check_choice(status, RUN_STATUSES, "run status")
        self._db.expect_one(self._db.write("UPDATE runs SET status = ?, stop_reason = ?, finished_at = ? WHERE id = ?",
                                           (status, stop_reason, time.time(), run_id)), "run", run_id)

    def set_run_status(self, run_id: str, status: str) -> None:
        """Change the status alone; back to 'running' (a resume) also clears the finish time and reason."""
        check_choice(status, RUN_STATUSES, "run status")
        self._db.expect_one(self._db.write(
            "UPDATE runs SET status = ?, finished_at = CASE WHEN ? = 'running' THEN NULL ELSE finished_at END, "
            "stop_reason = CASE WHEN ? = 'running' THEN NULL ELSE stop_reason END WHERE id = ?",
            (status, status, status, run_id)), "run", run_id)

    # ---- events: what happened in a run, in order ----------------------------------------

    def add_event(self, run_id: str | None, kind: str, data: dict) -> int:
        return self._db.write("INSERT INTO events (run_id, at, kind, data) VALUES (?, ?, ?, ?)",
                              (run_id, time.time(), kind, dumps(data)))

    def events(self, run_id: str | None = None, kind: str | None = None) -> list[EventRecord]:
        """Events in the order written, of one run (None: of all), optionally of one kind; data parsed."""
        rows = self._db.read("SELECT * FROM events WHERE (:run IS NULL OR run_id = :run) "
                             "AND (:kind IS NULL OR kind = :kind) ORDER BY id", {"run": run_id, "kind": kind})
        return [EventRecord(**{**row, "data": loads(row["data"])}) for row in rows]
