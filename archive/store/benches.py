"""Benches: a suite of tasks run one after another, each task row pointing at its run, kernel and
evaluation once done."""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from ..records import BenchRecord, BenchTaskRecord
from ..rows import BENCH_STATUSES, BENCH_TASK_FIELDS, BENCH_TASK_STATUSES, check_choice, dumps, new_run_id
from .connection import Store


class Benches:
    """Benches and their tasks: one part of the Archive, over its connection `db`."""

    def __init__(self, db: Store) -> None:
        self._db = db

    # ---- benches: a suite of tasks -----------------------------------------------------------

    def start_bench(self, suite: str, mode: str, config: dict, device_name: str, torch_version: str,
                    tasks: Sequence[tuple[str, str]]) -> str:
        """Record a bench and its tasks ((path, name) in order, all 'pending'); returns its id."""
        check_choice(mode, ("search", "candidates"), "bench mode")
        for attempt in range(8):
            bench_id = new_run_id(prefix="b")
            try:
                with self._db.tx() as conn:
                    conn.execute("INSERT INTO benches (id, suite, mode, config, device_name, torch_version, "
                                 "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (bench_id, suite, mode, dumps(config), device_name, torch_version, time.time()))
                    conn.executemany("INSERT INTO bench_tasks (bench_id, position, path, name) VALUES (?, ?, ?, ?)",
                                     [(bench_id, i, path, name) for i, (path, name) in enumerate(tasks)])
                return bench_id
            except sqlite3.IntegrityError:
                if attempt == 7 or self.bench(bench_id) is None:
                    raise
        raise AssertionError("unreachable")

    def bench(self, bench_id: str) -> BenchRecord | None:
        row = self._db.one("SELECT * FROM benches WHERE id = ?", (bench_id,))
        return BenchRecord.of(row) if row else None

    def benches(self) -> list[BenchRecord]:
        """Benches oldest first, each with its task count and tasks done."""
        return [BenchRecord.of(row) for row in self._db.read(
            "SELECT b.*, COUNT(t.position) AS tasks, COALESCE(SUM(t.status = 'done'), 0) AS done "
            "FROM benches b LEFT JOIN bench_tasks t ON t.bench_id = b.id GROUP BY b.id ORDER BY b.created_at, b.id")]

    def set_bench_status(self, bench_id: str, status: str) -> None:
        check_choice(status, BENCH_STATUSES, "bench status")
        self._db.expect_one(self._db.write(
            "UPDATE benches SET status = ?, finished_at = CASE WHEN ? = 'running' THEN NULL ELSE ? END WHERE id = ?",
            (status, status, time.time(), bench_id)), "bench", bench_id)

    def set_bench_task(self, bench_id: str, position: int, **fields: Any) -> None:
        """Update one task row of a bench (status, task_id, run_id, kernel_id, evaluation_id,
        degenerate, error, wall_s)."""
        unknown = set(fields) - set(BENCH_TASK_FIELDS)
        if unknown:
            raise ValueError(f"unknown bench task field(s): {sorted(unknown)}")
        if "status" in fields:
            check_choice(fields["status"], BENCH_TASK_STATUSES, "bench task status")
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        self._db.expect_one(self._db.write(f"UPDATE bench_tasks SET {sets} WHERE bench_id = :bench AND position = :pos",
                                           {**fields, "bench": bench_id, "pos": position}), "bench task", (bench_id, position))

    def bench_tasks(self, bench_id: str) -> list[BenchTaskRecord]:
        """A bench's tasks in order (records), each with the figures of the evaluation it points to (verdict,
        reason, speedups, specialized, device, its whole record as `evaluation`), its run's status
        and stop reason, its LLM calls (`replayed`: of them, those answered from a recording), known cost and tokens, and
        its run's speed of light (`bound`, the run's 'bound' event; `bound_beaten`: a kernel ran faster than it), and
        the fastest of its kernels as the search holds them (`search_speedup_eager`, `search_speedup_compile`: each
        kernel's latest figure, its re-measurement's where it has one), which a task still searching has."""
        rows = self._db.read(
            "SELECT t.*, e.verdict, e.reason, e.speedup_eager, e.speedup_compile, e.specialized, e.device_name, e.device, "
            "e.speedup_eager_lo, e.speedup_eager_hi, e.speedup_compile_lo, e.speedup_compile_hi, "
            "e.data AS evaluation, r.status AS run_status, r.stop_reason, "
            "(SELECT COUNT(*) FROM llm_calls c WHERE c.run_id = t.run_id) AS calls, "
            "(SELECT TOTAL(c.cost_usd) FROM llm_calls c WHERE c.run_id = t.run_id) AS cost_usd, "
            "(SELECT COUNT(*) - COUNT(c.cost_usd) FROM llm_calls c WHERE c.run_id = t.run_id) AS unknown_cost_calls, "
            "(SELECT COUNT(*) FROM llm_calls c WHERE c.run_id = t.run_id AND c.provider = 'replay') AS replayed, "
            "(SELECT TOTAL(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens) FROM llm_calls c "
            "WHERE c.run_id = t.run_id) AS input_tokens, "
            "(SELECT TOTAL(c.output_tokens) FROM llm_calls c WHERE c.run_id = t.run_id) AS output_tokens, "
            "(SELECT v.data FROM events v WHERE v.run_id = t.run_id AND v.kind = 'bound' ORDER BY v.id DESC LIMIT 1) "
            "AS bound, "
            "(SELECT COUNT(*) FROM events v WHERE v.run_id = t.run_id AND v.kind = 'bound_unreliable') AS bound_beaten, "
            + ", ".join(f"(SELECT MAX(e.{col}) FROM evaluations e WHERE e.run_id = t.run_id AND e.verdict = 'ok' AND e.id = "
                        "(SELECT MAX(x.id) FROM evaluations x WHERE x.kernel_id = e.kernel_id "
                        f"AND x.purpose IN ('search', 'rejudge'))) AS search_{col}"
                        for col in ("speedup_eager", "speedup_compile")) + " "
            "FROM bench_tasks t LEFT JOIN evaluations e ON e.id = t.evaluation_id "
            "LEFT JOIN runs r ON r.id = t.run_id WHERE t.bench_id = ? ORDER BY t.position", (bench_id,))
        return [BenchTaskRecord.of(row) for row in rows]
