"""The archive store: the one module of kernelevo that speaks SQL.

One SQLite file (WAL, foreign keys on) holds every task, run, kernel, evaluation, LLM call,
reflection, embedding and event. Every write is committed before its method returns, so a run
killed with SIGKILL loses nothing it was told was stored. The loop calls in from its main thread
and from LLM worker threads, so one connection is shared under a lock (SQLite connections are
not safe to use from two threads at once, and one connection keeps the writes of one process
serialised without leaning on busy retries).

Read methods return plain dicts, one per row, with JSON columns already decoded.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelevo.records import Evaluation, LLMCall
from kernelevo.tasks import source_hash as hash_source

from .migrations import MIGRATIONS
from .rows import (BENCH_STATUSES, BENCH_TASK_FIELDS, BENCH_TASK_STATUSES, EVAL_COLUMNS, LLM_COLUMNS, ORIGINS,
                   OWNERS, PARENT_STONE, PURPOSES, RUN_STATUSES, call_operator, check_choice,
                   dumps, eval_values, evaluation_row, from_blob, intervals, kernel_row, llm_values, loads, new_run_id,
                   rank_cosine, split_script, to_blob, unique)

if TYPE_CHECKING:
    import numpy

BUSY_TIMEOUT_MS = 10_000

# The fields of one evaluation that every kernel row carries (None when there is none).
_EVAL_FIELDS = ("e.id AS evaluation_id, e.verdict, e.reason, e.speedup_eager, e.speedup_compile, e.candidate_ms, "
                "e.eager_ms, e.specialized, e.speedup_eager_lo, e.speedup_eager_hi, e.speedup_compile_lo, "
                "e.speedup_compile_hi, e.message")

# A kernel with the fields of its latest 'search' evaluation: what the loop rebuilds its population from.
_KERNEL_SELECT = f"""
SELECT k.*, {_EVAL_FIELDS}
FROM kernels k
LEFT JOIN evaluations e ON e.id = (
    SELECT MAX(id) FROM evaluations WHERE kernel_id = k.id AND purpose = 'search')
"""

# Per stepping stone its best evaluation: an 'ok' one first, then one judged in a fresh process (a new
# best's re-measurement, a final re-judgement: a search figure may be one lucky run), the fastest, the latest.
_STONES_SELECT = f"""
WITH ranked AS (
    SELECT e.*, ROW_NUMBER() OVER (
        PARTITION BY e.kernel_id
        ORDER BY e.verdict = 'ok' DESC, e.purpose != 'search' DESC, e.speedup_eager DESC NULLS LAST, e.id DESC)
        AS pick
    FROM evaluations e JOIN kernels k ON k.id = e.kernel_id
    WHERE k.stepping_stone = 1)
SELECT k.*, t.source_hash AS task_hash, t.name AS task_name, e.purpose, {_EVAL_FIELDS}
FROM kernels k
JOIN tasks t ON t.id = k.task_id
LEFT JOIN ranked e ON e.kernel_id = k.id AND e.pick = 1
WHERE k.stepping_stone = 1 AND (:all OR k.task_id IN (SELECT value FROM json_each(:ids)))
ORDER BY e.verdict = 'ok' DESC, e.speedup_eager DESC NULLS LAST, k.id
LIMIT :limit
"""

# One row per kernel for export: the kernel, its task, its latest evaluation (the final re-judgement
# where there is one), the latest profile (measured in the search), the call that wrote it.
_EXPORT_SELECT = """
SELECT k.id, k.run_id, k.task_id, t.name AS task_name, t.source_hash AS task_hash, t.source AS task_source,
       k.source, k.format, k.operator, k.generation, k.island, k.origin, k.stepping_stone, k.problem, k.claims,
       k.created_at, e.purpose, e.verdict, e.reason, e.message, e.speedup_eager, e.speedup_compile,
       e.speedup_eager_lo, e.speedup_eager_hi, e.speedup_compile_lo, e.speedup_compile_hi,
       e.candidate_ms, e.eager_ms, e.device_name,
       (SELECT profile FROM evaluations WHERE kernel_id = k.id AND profile IS NOT NULL ORDER BY id DESC LIMIT 1)
       AS profile, c.provider, c.model, c.cost_usd
FROM kernels k
JOIN tasks t ON t.id = k.task_id
LEFT JOIN evaluations e ON e.id = (SELECT MAX(id) FROM evaluations WHERE kernel_id = k.id)
LEFT JOIN llm_calls c ON c.id = k.llm_call_id
WHERE (:run IS NULL OR k.run_id = :run) AND (:task IS NULL OR k.task_id = :task)
ORDER BY k.id
"""

def _label(table: str = "") -> str:
    """SQL for the ensemble member that made a call: its label, or provider:model for calls stored
    before labels; `table`: the llm_calls alias of the query, if any."""
    t = f"{table}." if table else ""
    return f"COALESCE(NULLIF({t}label, ''), {t}provider || ':' || {t}model)"


_LABEL = _label()

# Per operator and model, what the kernel rows its calls wrote became (see Archive.model_yield).
_MODEL_KERNELS = f"""
SELECT k.operator, {_label("c")} AS model, COUNT(*) AS attempts,
       COALESCE(SUM(k.problem NOT LIKE 'failed_call%'), 0) AS replies,
       COALESCE(SUM(k.source != '' AND k.problem = ''), 0) AS judged,
       COALESCE(SUM(e.verdict IS 'ok'), 0) AS correct,
       COALESCE(SUM(k.stepping_stone = 1 AND k.stone_reason NOT LIKE ?), 0) AS improvements
FROM kernels k
JOIN llm_calls c ON c.id = k.llm_call_id
LEFT JOIN evaluations e ON e.id = (SELECT MAX(id) FROM evaluations WHERE kernel_id = k.id AND purpose = 'search')
WHERE k.run_id = ?
GROUP BY 1, 2
"""

_TOKEN_SUMS = ", ".join(f"COALESCE(SUM({c}), 0) AS {c}" for c in
                        ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens"))

_LINEAGE = """
WITH RECURSIVE ancestors(id, depth) AS (
    SELECT parent_id, 1 FROM kernel_parents WHERE kernel_id = ?
    UNION
    SELECT p.parent_id, a.depth + 1 FROM kernel_parents p JOIN ancestors a ON p.kernel_id = a.id)
SELECT id, MIN(depth) AS depth FROM ancestors GROUP BY id
"""


def default_path() -> Path:
    """$KERNELEVO_ARCHIVE, else $XDG_DATA_HOME/kernelevo/archive.sqlite (~/.local/share when unset)."""
    if os.environ.get("KERNELEVO_ARCHIVE"):
        return Path(os.environ["KERNELEVO_ARCHIVE"]).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "kernelevo" / "archive.sqlite"


class Archive:
    """An open archive file. Use `Archive.open(path)` or `Archive.open_readonly(path)`."""

    def __init__(self, conn: sqlite3.Connection, path: Path, readonly: bool) -> None:
        self._conn = conn
        self._lock = threading.RLock()
        self.path = path
        self.readonly = readonly

    # ---- opening and closing -------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path) -> Archive:
        """Open (creating it and its folder if needed) and bring the schema up to date."""
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; single statements commit at once and
        # multi-statement writes say BEGIN IMMEDIATE themselves
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                               timeout=BUSY_TIMEOUT_MS / 1000)
        archive = cls(conn, path, readonly=False)
        try:
            archive._setup(("journal_mode=WAL", "synchronous=NORMAL"))
            archive._migrate()
        except BaseException:
            conn.close()
            raise
        return archive

    @classmethod
    def open_readonly(cls, path: str | Path) -> Archive:
        """Open another archive for reading only (`--seed-from FILE`); any write raises sqlite3.Error."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such archive file")
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False,
                               isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        archive = cls(conn, path, readonly=True)
        try:
            archive._setup(("query_only=ON",))
            if not archive._one("SELECT name FROM sqlite_master WHERE type='table' AND name='migrations'"):
                raise ValueError(f"{path}: not a kernelevo archive (no migrations table)")
        except BaseException:
            conn.close()
            raise
        return archive

    def _setup(self, pragmas: Sequence[str]) -> None:
        self._conn.row_factory = sqlite3.Row
        for pragma in (f"busy_timeout={BUSY_TIMEOUT_MS}", "foreign_keys=ON", *pragmas):
            self._conn.execute(f"PRAGMA {pragma}")

    def _migrate(self) -> None:
        self._write("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        applied = set(self.applied_migrations())
        for name, sql in (m for m in MIGRATIONS if m[0] not in applied):
            with self._tx() as conn:
                # checked again inside the write transaction: two processes opening a new file at
                # once must not both apply the same migration
                if conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
                    continue
                for statement in split_script(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))

    def applied_migrations(self) -> list[str]:
        return [r["name"] for r in self._read("SELECT name FROM migrations ORDER BY name")]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the only doors to the connection --------------------------------------------------

    def _write(self, sql: str, params: Sequence[Any] | dict = ()) -> int:
        """One statement, committed on return; the new row's id (or the rows changed, for UPDATE)."""
        with self._lock:
            cur = self._conn.execute(sql, params)
            return cur.lastrowid if sql.lstrip().upper().startswith("INSERT") else cur.rowcount

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """Several statements committed together (IMMEDIATE: take the write lock up front)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] | dict = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(row) for row in self._conn.execute(sql, params).fetchall()]

    def _one(self, sql: str, params: Sequence[Any] | dict = ()) -> dict[str, Any] | None:
        rows = self._read(sql, params)
        return rows[0] if rows else None

    # ---- tasks and runs --------------------------------------------------------------------

    def add_task(self, name: str, source: str, source_hash: str) -> int:
        """The task's id; a task already stored under this hash keeps its row (and first name)."""
        self._write("INSERT INTO tasks (source_hash, name, source, created_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(source_hash) DO NOTHING", (source_hash, name, source, time.time()))
        return self._one("SELECT id FROM tasks WHERE source_hash = ?", (source_hash,))["id"]

    def task_by_hash(self, source_hash: str) -> dict | None:
        return self._one("SELECT * FROM tasks WHERE source_hash = ?", (source_hash,))

    def task(self, task_id: int) -> dict | None:
        return self._one("SELECT * FROM tasks WHERE id = ?", (task_id,))

    def tasks(self) -> list[dict]:
        return self._read("SELECT * FROM tasks ORDER BY id")

    def start_run(self, task_id: int, config: dict, seed: int, device: str, gpu_name: str,
                  torch_version: str, cuda_version: str) -> str:
        """Record a new run in status 'running'; returns its id, e.g. 'r20261122-1530-ab12'."""
        for attempt in range(8):
            run_id = new_run_id()
            try:
                self._write("INSERT INTO runs (id, task_id, created_at, config, seed, device, gpu_name, "
                            "torch_version, cuda_version, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')",
                            (run_id, task_id, time.time(), dumps(config), seed, device, gpu_name,
                             torch_version, cuda_version))
                return run_id
            except sqlite3.IntegrityError:
                if attempt == 7 or self.run(run_id) is None:
                    raise  # not an id clash (a missing task, say)
        raise AssertionError("unreachable")

    def run(self, run_id: str) -> dict | None:
        """The run with its config parsed, and its task's hash and name."""
        row = self._one("SELECT r.*, t.source_hash AS task_hash, t.name AS task_name FROM runs r "
                        "JOIN tasks t ON t.id = r.task_id WHERE r.id = ?", (run_id,))
        if row:
            row["config"] = loads(row["config"])
        return row

    def runs(self, task_id: int | None = None) -> list[dict]:
        """Runs oldest first, of one task or of all."""
        rows = self._read("SELECT r.*, t.source_hash AS task_hash, t.name AS task_name FROM runs r "
                          "JOIN tasks t ON t.id = r.task_id WHERE ? IS NULL OR r.task_id = ? "
                          "ORDER BY r.created_at, r.id", (task_id, task_id))
        for row in rows:
            row["config"] = loads(row["config"])
        return rows

    def finish_run(self, run_id: str, status: str, stop_reason: str) -> None:
        check_choice(status, RUN_STATUSES, "run status")
        self._expect_one(self._write("UPDATE runs SET status = ?, stop_reason = ?, finished_at = ? WHERE id = ?",
                                     (status, stop_reason, time.time(), run_id)), "run", run_id)

    def set_run_status(self, run_id: str, status: str) -> None:
        """Change the status alone; back to 'running' (a resume) also clears the finish time and reason."""
        check_choice(status, RUN_STATUSES, "run status")
        self._expect_one(self._write(
            "UPDATE runs SET status = ?, finished_at = CASE WHEN ? = 'running' THEN NULL ELSE finished_at END, "
            "stop_reason = CASE WHEN ? = 'running' THEN NULL ELSE stop_reason END WHERE id = ?",
            (status, status, status, run_id)), "run", run_id)

    @staticmethod
    def _expect_one(changed: int, what: str, key: object) -> None:
        if changed != 1:
            raise KeyError(f"no {what} {key!r} in the archive")

    # ---- what a run produces ---------------------------------------------------------------

    def add_llm_call(self, run_id: str | None, call: LLMCall) -> int:
        columns = ", ".join(LLM_COLUMNS)
        marks = ", ".join("?" * len(LLM_COLUMNS))
        return self._write(f"INSERT INTO llm_calls (run_id, {columns}, created_at) VALUES (?, {marks}, ?)",
                           (run_id, *llm_values(call), time.time()))

    def add_kernel(self, task_id: int, source: str, fmt: str, operator: str, run_id: str | None = None,
                   parents: Sequence[int] = (), llm_call_id: int | None = None, generation: int = 0,
                   island: int = 0, origin: str = "run", descriptors: dict | None = None, niche: str = "",
                   thinking: str = "", problem: str = "", claims: dict | None = None, account: str = "") -> int:
        """Store a kernel and its parents (in order) in one transaction; returns its id. `account`: the
        model's own words on what the kernel changes and why.

        `source` may be '' when the operator produced no candidate (no code, an edit that did not
        apply): then `problem` must say why, and the row keeps what was paid for.
        """
        check_choice(origin, ORIGINS, "origin")
        if not source and not problem:
            raise ValueError("a kernel with no source must say its problem (no_code, edit_failed, ...)")
        with self._tx() as conn:
            kernel_id = conn.execute(
                "INSERT INTO kernels (task_id, run_id, source, source_hash, format, operator, llm_call_id, "
                "generation, island, origin, niche, descriptors, thinking, problem, claims, account, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (task_id, run_id, source, hash_source(source) if source else "", fmt if source else "",
                 operator, llm_call_id, generation, island, origin, niche,
                 None if descriptors is None else dumps(descriptors), thinking, problem,
                 None if claims is None else dumps(claims), account, time.time())).lastrowid
            conn.executemany("INSERT INTO kernel_parents (kernel_id, parent_id, position) VALUES (?, ?, ?)",
                             [(kernel_id, p, i) for i, p in enumerate(unique(parents))])
        return kernel_id

    def add_evaluation(self, kernel_id: int, evaluation: Evaluation, purpose: str = "search",
                       run_id: str | None = None, profile: dict | None = None) -> int:
        """Store a verdict; `run_id` None means the kernel's own run (None too for imported kernels).
        The profile is the evaluation's own unless one is given."""
        check_choice(purpose, PURPOSES, "purpose")
        if profile is None and evaluation.profile is not None:
            profile = evaluation.profile.to_dict()
        columns = ", ".join(EVAL_COLUMNS)
        marks = ", ".join("?" * len(EVAL_COLUMNS))
        return self._write(
            f"INSERT INTO evaluations (kernel_id, run_id, purpose, {columns}, profile, created_at) "
            f"VALUES (?, COALESCE(?, (SELECT run_id FROM kernels WHERE id = ?)), ?, {marks}, ?, ?)",
            (kernel_id, run_id, kernel_id, purpose, *eval_values(evaluation),
             None if profile is None else dumps(profile), time.time()))

    def set_profile(self, evaluation_id: int, profile: dict) -> None:
        """Attach a profile to a stored evaluation (profiles come after the verdict)."""
        self._expect_one(self._write("UPDATE evaluations SET profile = ? WHERE id = ?",
                                     (dumps(profile), evaluation_id)), "evaluation", evaluation_id)

    def profiles(self, run_id: str) -> dict[int, dict]:
        """kernel id -> the latest profile stored with one of its evaluations in the run."""
        rows = self._read("SELECT kernel_id, profile FROM evaluations WHERE run_id = ? AND profile IS NOT NULL "
                          "ORDER BY id", (run_id,))
        return {r["kernel_id"]: loads(r["profile"]) for r in rows}

    def mark_stepping_stone(self, kernel_id: int, reason: str, via: int | None = None) -> None:
        """Mark a kernel as a stepping stone for `reason`, or, with `via`, as the parent of kernel
        `via` that earned it. The first reason stays: a kernel's own improvement is not overwritten
        by its children's (model_yield counts a kernel's own improvements by it)."""
        text = f"{PARENT_STONE}{via}: {reason}" if via is not None else reason
        self._expect_one(self._write(
            "UPDATE kernels SET stepping_stone = 1, stone_reason = CASE WHEN stepping_stone = 1 AND stone_reason != '' "
            "THEN stone_reason ELSE ? END WHERE id = ?", (text, kernel_id)), "kernel", kernel_id)

    def add_reflection(self, run_id: str | None, llm_call_id: int | None, analysis: str,
                       variant_ids: Sequence[int], kernel_id: int | None = None) -> int:
        return self._write("INSERT INTO reflections (run_id, kernel_id, llm_call_id, analysis, variant_ids, "
                           "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                           (run_id, kernel_id, llm_call_id, analysis, dumps([int(i) for i in variant_ids]),
                            time.time()))

    def set_reflection_kernel(self, reflection_id: int, kernel_id: int) -> None:
        """Link a reflection to the kernel written after it (known only once that kernel is stored)."""
        self._expect_one(self._write("UPDATE reflections SET kernel_id = ? WHERE id = ?",
                                     (kernel_id, reflection_id)), "reflection", reflection_id)

    def reflections(self, run_id: str | None = None, task_id: int | None = None) -> list[dict]:
        """Reflections oldest first, of a run, of every run of a task, or all; variant_ids parsed."""
        rows = self._read("SELECT f.* FROM reflections f LEFT JOIN runs r ON r.id = f.run_id "
                          "WHERE (:run IS NULL OR f.run_id = :run) AND (:task IS NULL OR r.task_id = :task) "
                          "ORDER BY f.id", {"run": run_id, "task": task_id})
        for row in rows:
            row["variant_ids"] = loads(row["variant_ids"])
        return rows

    def add_event(self, run_id: str | None, kind: str, data: dict) -> int:
        return self._write("INSERT INTO events (run_id, at, kind, data) VALUES (?, ?, ?, ?)",
                           (run_id, time.time(), kind, dumps(data)))

    def answered_prompts(self, run_id: str) -> set[str]:
        """Hashes of the prompts a run's calls sent and got a reply to: not to be asked again."""
        return {r["prompt_hash"] for r in self._read(
            "SELECT DISTINCT prompt_hash FROM llm_calls WHERE run_id = ? AND prompt_hash != '' AND outcome = 'ok'",
            (run_id,))}

    def events(self, run_id: str | None = None, kind: str | None = None) -> list[dict]:
        """Events in the order written, of one run (None: of all), optionally of one kind; data parsed."""
        rows = self._read("SELECT * FROM events WHERE (:run IS NULL OR run_id = :run) "
                          "AND (:kind IS NULL OR kind = :kind) ORDER BY id", {"run": run_id, "kind": kind})
        for row in rows:
            row["data"] = loads(row["data"])
        return rows

    # ---- embeddings ------------------------------------------------------------------------

    def put_embedding(self, owner: str, owner_id: int, model: str,
                      vector: numpy.ndarray | Sequence[float], source_hash: str) -> None:
        """Store (or replace) the vector of a kernel or task under one embedding model."""
        check_choice(owner, OWNERS, "embedding owner")
        blob, dim = to_blob(vector)
        self._write("INSERT INTO embeddings (owner, owner_id, model, dim, source_hash, vector, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(owner, owner_id, model) DO UPDATE SET "
                    "dim = excluded.dim, source_hash = excluded.source_hash, vector = excluded.vector, "
                    "created_at = excluded.created_at",
                    (owner, owner_id, model, dim, source_hash, blob, time.time()))

    def embeddings(self, owner: str, model: str,
                   owner_ids: Sequence[int] | None = None) -> list[tuple[int, numpy.ndarray]]:
        """(owner_id, float32 vector) pairs, by owner_id; all of the owner kind when owner_ids is None."""
        rows = self._read("SELECT owner_id, dim, vector FROM embeddings WHERE owner = :owner AND model = :model "
                          "AND (:all OR owner_id IN (SELECT value FROM json_each(:ids))) ORDER BY owner_id",
                          {"owner": owner, "model": model, "all": owner_ids is None,
                           "ids": dumps([int(i) for i in owner_ids or ()])})
        return [(r["owner_id"], from_blob(r["vector"], r["dim"])) for r in rows]

    def embedding_hashes(self, owner: str, model: str) -> dict[int, str]:
        """owner_id -> source_hash of what was embedded, to find vectors that are missing or stale."""
        rows = self._read("SELECT owner_id, source_hash FROM embeddings WHERE owner = ? AND model = ?",
                          (owner, model))
        return {r["owner_id"]: r["source_hash"] for r in rows}

    def similar_tasks(self, vector: numpy.ndarray | Sequence[float], model: str,
                      exclude_task_id: int | None = None, limit: int = 5) -> list[tuple[int, float]]:
        """(task_id, cosine similarity) of stored task embeddings, most similar first."""
        items = [(i, v) for i, v in self.embeddings("task", model) if i != exclude_task_id]
        return rank_cosine(vector, items, limit)

    # ---- reading kernels back --------------------------------------------------------------

    def kernels(self, run_id: str | None = None, task_id: int | None = None) -> list[dict]:
        """Kernels in id order, each with `parents` and its latest 'search' evaluation's evaluation_id,
        verdict, reason, speedup_eager, speedup_compile, their intervals speedup_eager_ci and
        speedup_compile_ci ([low, high]), candidate_ms (None when never judged)."""
        rows = self._read(_KERNEL_SELECT + " WHERE (:run IS NULL OR k.run_id = :run) "
                          "AND (:task IS NULL OR k.task_id = :task) ORDER BY k.id",
                          {"run": run_id, "task": task_id})
        return self._with_parents(rows)

    def kernel(self, kernel_id: int) -> dict | None:
        """One kernel as in kernels(), plus `evaluations`: all of them, oldest first, data parsed."""
        row = self._one(_KERNEL_SELECT + " WHERE k.id = ?", (kernel_id,))
        if row is None:
            return None
        row = self._with_parents([row])[0]
        row["evaluations"] = [evaluation_row(e) for e in self._read(
            "SELECT * FROM evaluations WHERE kernel_id = ? ORDER BY id", (kernel_id,))]
        return row

    def evaluation(self, evaluation_id: int) -> dict | None:
        """One evaluation row, its data and profile parsed."""
        row = self._one("SELECT * FROM evaluations WHERE id = ?", (evaluation_id,))
        return evaluation_row(row) if row else None

    def lineage(self, kernel_id: int) -> list[dict]:
        """The kernel's ancestors up to the roots (itself excluded), breadth-first: by `depth`
        (1 = a parent), then id; each as in kernels()."""
        depths = {r["id"]: r["depth"] for r in self._read(_LINEAGE, (kernel_id,))}
        rows = self._read(_KERNEL_SELECT + " WHERE k.id IN (SELECT value FROM json_each(?))",
                          (dumps(list(depths)),))
        for row in rows:
            row["depth"] = depths[row["id"]]
        rows.sort(key=lambda r: (r["depth"], r["id"]))
        return self._with_parents(rows)

    def best_kernel(self, run_id: str) -> dict | None:
        """The kernel of the run's fastest 'ok' search evaluation (earliest wins a tie), with that
        evaluation's fields as in kernels()."""
        row = self._one(f"SELECT k.*, {_EVAL_FIELDS} FROM evaluations e JOIN kernels k ON k.id = e.kernel_id "
                        "WHERE e.run_id = ? AND e.purpose = 'search' AND e.verdict = 'ok' "
                        "AND e.speedup_eager IS NOT NULL ORDER BY e.speedup_eager DESC, e.id LIMIT 1", (run_id,))
        return self._with_parents([row])[0] if row else None

    def final_evaluations(self, run_id: str) -> dict[int, dict]:
        """Kernel id -> its latest 'final' evaluation of the run (the re-judgement in a fresh process
        at the end of a run): verdict, speedup_eager, speedup_compile, candidate_ms, and the
        speedups' intervals speedup_eager_ci, speedup_compile_ci ([low, high] or None)."""
        rows = self._read("SELECT kernel_id, verdict, speedup_eager, speedup_compile, candidate_ms, speedup_eager_lo, "
                          "speedup_eager_hi, speedup_compile_lo, speedup_compile_hi FROM evaluations "
                          "WHERE run_id = ? AND purpose = 'final' ORDER BY id", (run_id,))
        return {r["kernel_id"]: intervals(r) for r in rows}

    def remeasurements(self, run_id: str) -> dict[int, dict]:
        """Kernel id -> its latest 'rejudge' evaluation in the run (a new best re-measured in a fresh
        process before the search believed it), with the fields kernels() gives of an evaluation."""
        rows = self._read(f"SELECT e.kernel_id, {_EVAL_FIELDS} FROM evaluations e "
                          "WHERE e.run_id = ? AND e.purpose = 'rejudge' ORDER BY e.id", (run_id,))
        return {r["kernel_id"]: intervals(r) for r in rows}

    def stepping_stones(self, task_hash: str | None = None, task_ids: Sequence[int] | None = None,
                        limit: int = 20) -> list[dict]:
        """Stepping-stone kernels of the task named by hash and/or of `task_ids` (of all tasks when both
        are None), best first, each with its best evaluation's fields and its task_hash, task_name."""
        ids = [int(i) for i in task_ids or ()]
        if task_hash is not None:
            task = self.task_by_hash(task_hash)
            if task is None and not ids:
                return []
            ids += [task["id"]] if task else []
        every = task_hash is None and task_ids is None
        rows = self._read(_STONES_SELECT, {"all": every, "ids": dumps(ids), "limit": limit})
        return self._with_parents(rows)

    def export_rows(self, run_id: str | None = None, task_id: int | None = None) -> list[dict]:
        """Every kernel (of a run or task) with its task's source, its latest evaluation of any purpose
        (verdict, speedups, profile decoded), the model and cost of the call that wrote it, and parents."""
        rows = self._read(_EXPORT_SELECT, {"run": run_id, "task": task_id})
        for row in rows:
            row["profile"] = loads(row.get("profile"))  # claims: decoded with the other kernel columns
        return self._with_parents(rows)

    def _with_parents(self, rows: list[dict]) -> list[dict]:
        parents: dict[int, list[int]] = {r["id"]: [] for r in rows}
        links = self._read("SELECT kernel_id, parent_id FROM kernel_parents WHERE kernel_id IN "
                           "(SELECT value FROM json_each(?)) ORDER BY kernel_id, position",
                           (dumps(list(parents)),))
        for link in links:
            parents[link["kernel_id"]].append(link["parent_id"])
        for row in rows:
            kernel_row(row)["parents"] = parents[row["id"]]
        return rows

    # ---- counters, always derived from rows ------------------------------------------------

    def spend(self, run_id: str) -> dict:
        """{'calls', 'failed_calls', 'cost_usd' (sum of known costs), 'unknown_cost_calls', and the
        sums of input, cache_read, cache_write, output and reasoning tokens}."""
        return self._one(
            "SELECT COUNT(*) AS calls, COALESCE(SUM(outcome != 'ok'), 0) AS failed_calls, "
            "TOTAL(cost_usd) AS cost_usd, COUNT(*) - COUNT(cost_usd) AS unknown_cost_calls, "
            f"{_TOKEN_SUMS} FROM llm_calls WHERE run_id = ?", (run_id,))

    def operator_costs(self, run_id: str) -> dict[str, float]:
        """Known LLM spend per operator of a run (follow-up calls count for their operator)."""
        rows = self._read("SELECT operator, TOTAL(cost_usd) AS cost FROM llm_calls WHERE run_id = ? "
                          "GROUP BY operator", (run_id,))
        costs: dict[str, float] = {}
        for r in rows:
            op = call_operator(r["operator"])
            costs[op] = costs.get(op, 0.0) + r["cost"]
        return costs

    def call_yield(self, run_id: str) -> dict[str, dict]:
        """Per operator of a run: `calls` (follow-ups and the functional rewrite count for the
        operator they serve), `replies` (operator calls whose reply came back: kernel rows of a call
        that did not fail),
        `judged` (those replies whose kernel went to the judge: not a copy, not unparsable), `copies`
        (replies that were a kernel the run had) and `repeats` (prompts not sent: answered before)."""
        out: dict[str, dict] = {}
        for r in self._read("SELECT operator, COUNT(*) AS calls FROM llm_calls WHERE run_id = ? GROUP BY operator",
                            (run_id,)):
            row = out.setdefault(call_operator(r["operator"]), {"calls": 0, "replies": 0, "judged": 0})
            row["calls"] += r["calls"]
        for r in self._read(
                "SELECT operator, COUNT(*) AS replies, COALESCE(SUM(source != '' AND problem = ''), 0) AS judged, "
                "COALESCE(SUM(problem LIKE 'copy:%' OR problem LIKE 'renamed_copy:%'), 0) AS copies "
                "FROM kernels WHERE run_id = ? AND llm_call_id IS NOT NULL AND problem NOT LIKE 'failed_call%' "
                "GROUP BY operator", (run_id,)):
            row = out.setdefault(r["operator"], {"calls": 0, "replies": 0, "judged": 0})
            row["replies"], row["judged"], row["copies"] = r["replies"], r["judged"], r["copies"]
        for event in self.events(run_id, kind="prompt_repeat"):
            row = out.setdefault(event["data"]["operator"], {"calls": 0, "replies": 0, "judged": 0})
            row["repeats"] = row.get("repeats", 0) + 1
        for row in out.values():
            row.setdefault("copies", 0)
            row.setdefault("repeats", 0)
        return out

    def call_models(self, run_id: str) -> dict[int, str]:
        """LLM call id -> the ensemble member that answered it (its label), for a run's calls."""
        return {r["id"]: r["model"] for r in self._read(f"SELECT id, {_LABEL} AS model FROM llm_calls WHERE run_id = ?",
                                                        (run_id,))}

    def model_yield(self, run_id: str) -> list[dict]:
        """Per (operator, model) of a run: `calls`, `cost_usd` (known), `unknown_cost_calls`, and of the
        kernel rows the model's calls wrote: `attempts`, `replies` (the call did not fail), `judged`
        (sent to the judge), `correct` (judged ok), `improvements` (its own new island best or niche).
        A model is its label (the alias the run used), operators as in call_yield."""
        out: dict[tuple[str, str], dict] = {}

        def row(operator: str, model: str) -> dict:
            key = (call_operator(operator), model)
            return out.setdefault(key, {"operator": key[0], "model": model, "calls": 0, "cost_usd": 0.0,
                                        "unknown_cost_calls": 0, "attempts": 0, "replies": 0, "judged": 0,
                                        "correct": 0, "improvements": 0})
        for r in self._read(f"SELECT operator, {_LABEL} AS model, COUNT(*) AS calls, TOTAL(cost_usd) AS cost_usd, "
                            "COUNT(*) - COUNT(cost_usd) AS unknown_cost_calls FROM llm_calls WHERE run_id = ? "
                            "GROUP BY 1, 2", (run_id,)):
            g = row(r["operator"], r["model"])
            for k in ("calls", "cost_usd", "unknown_cost_calls"):
                g[k] += r[k]
        for r in self._read(_MODEL_KERNELS, (PARENT_STONE + "%", run_id)):
            g = row(r["operator"], r["model"])
            for k in ("attempts", "replies", "judged", "correct", "improvements"):
                g[k] += r[k]
        return sorted(out.values(), key=lambda g: (g["model"], g["operator"]))

    def timeline(self, run_id: str) -> list[dict]:
        """The run's search evaluations in the order they were judged: kernel_id, verdict, reason,
        speedup_eager, speedup_eager_ci, created_at, and spent_usd, the known LLM spend of the run up to that moment."""
        return [intervals(r) for r in self._read(
            "SELECT e.id AS evaluation_id, e.kernel_id, e.verdict, e.reason, e.speedup_eager, e.speedup_eager_lo, "
            "e.speedup_eager_hi, e.created_at, "
            "(SELECT TOTAL(c.cost_usd) FROM llm_calls c WHERE c.run_id = e.run_id AND c.created_at <= e.created_at) "
            "AS spent_usd FROM evaluations e WHERE e.run_id = ? AND e.purpose = 'search' ORDER BY e.id", (run_id,))]

    def llm_usage(self, run_id: str) -> list[dict]:
        """LLM calls of a run per (operator, model: its label): calls, failed_calls, cost_usd (known costs),
        unknown_cost_calls, latency_s (sum) and the token sums, as in spend()."""
        return self._read(
            f"SELECT operator, {_LABEL} AS model, COUNT(*) AS calls, COALESCE(SUM(outcome != 'ok'), 0) AS failed_calls, "
            "TOTAL(cost_usd) AS cost_usd, COUNT(*) - COUNT(cost_usd) AS unknown_cost_calls, "
            f"TOTAL(latency_s) AS latency_s, {_TOKEN_SUMS} FROM llm_calls WHERE run_id = ? "
            "GROUP BY 1, 2 ORDER BY 1, 2", (run_id,))

    def counts(self, run_id: str) -> dict:
        """{'verdicts': {verdict: n} of search evaluations, 'operators': {operator: n} of kernels,
        'problems': {problem: n} of kernels without source, 'kernels', 'max_generation' (None when
        no kernel), 'evaluations' (search ones), 'evaluations_by_purpose': {purpose: n}}."""
        def tally(sql: str) -> dict[str, int]:
            return {r["k"]: r["n"] for r in self._read(sql, (run_id,))}

        totals = self._one("SELECT COUNT(*) AS kernels, MAX(generation) AS max_generation "
                           "FROM kernels WHERE run_id = ?", (run_id,))
        by_purpose = tally("SELECT purpose AS k, COUNT(*) AS n FROM evaluations WHERE run_id = ? GROUP BY purpose")
        return {
            "verdicts": tally("SELECT verdict AS k, COUNT(*) AS n FROM evaluations "
                              "WHERE run_id = ? AND purpose = 'search' GROUP BY verdict"),
            "operators": tally("SELECT operator AS k, COUNT(*) AS n FROM kernels WHERE run_id = ? GROUP BY operator"),
            "problems": tally("SELECT problem AS k, COUNT(*) AS n FROM kernels "
                              "WHERE run_id = ? AND source = '' GROUP BY problem"),
            "kernels": totals["kernels"],
            "max_generation": totals["max_generation"],
            "evaluations": by_purpose.get("search", 0),
            "evaluations_by_purpose": by_purpose,
        }

    # ---- benches: a suite of tasks -----------------------------------------------------------

    def start_bench(self, suite: str, mode: str, config: dict, device_name: str, torch_version: str,
                    tasks: Sequence[tuple[str, str]]) -> str:
        """Record a bench and its tasks ((path, name) in order, all 'pending'); returns its id."""
        check_choice(mode, ("search", "candidates"), "bench mode")
        for attempt in range(8):
            bench_id = new_run_id(prefix="b")
            try:
                with self._tx() as conn:
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

    def bench(self, bench_id: str) -> dict | None:
        row = self._one("SELECT * FROM benches WHERE id = ?", (bench_id,))
        if row:
            row["config"] = loads(row["config"])
        return row

    def benches(self) -> list[dict]:
        """Benches oldest first, each with its task count and tasks done."""
        rows = self._read("SELECT b.*, COUNT(t.position) AS tasks, COALESCE(SUM(t.status = 'done'), 0) AS done "
                          "FROM benches b LEFT JOIN bench_tasks t ON t.bench_id = b.id GROUP BY b.id "
                          "ORDER BY b.created_at, b.id")
        for row in rows:
            row["config"] = loads(row["config"])
        return rows

    def set_bench_status(self, bench_id: str, status: str) -> None:
        check_choice(status, BENCH_STATUSES, "bench status")
        self._expect_one(self._write(
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
        self._expect_one(self._write(f"UPDATE bench_tasks SET {sets} WHERE bench_id = :bench AND position = :pos",
                                     {**fields, "bench": bench_id, "pos": position}), "bench task", (bench_id, position))

    def bench_tasks(self, bench_id: str) -> list[dict]:
        """A bench's tasks in order, each with the figures of the evaluation it points to (verdict,
        reason, speedups, specialized, device, its whole record as `evaluation`), its run's status
        and stop reason, and its LLM calls and known cost."""
        rows = self._read(
            "SELECT t.*, e.verdict, e.reason, e.speedup_eager, e.speedup_compile, e.specialized, e.device_name, e.device, "
            "e.speedup_eager_lo, e.speedup_eager_hi, e.speedup_compile_lo, e.speedup_compile_hi, "
            "e.data AS evaluation, r.status AS run_status, r.stop_reason, "
            "(SELECT COUNT(*) FROM llm_calls c WHERE c.run_id = t.run_id) AS calls, "
            "(SELECT TOTAL(c.cost_usd) FROM llm_calls c WHERE c.run_id = t.run_id) AS cost_usd, "
            "(SELECT COUNT(*) - COUNT(c.cost_usd) FROM llm_calls c WHERE c.run_id = t.run_id) AS unknown_cost_calls "
            "FROM bench_tasks t LEFT JOIN evaluations e ON e.id = t.evaluation_id "
            "LEFT JOIN runs r ON r.id = t.run_id WHERE t.bench_id = ? ORDER BY t.position", (bench_id,))
        for row in rows:
            row["evaluation"] = loads(row["evaluation"])
            intervals(row)
        return rows

    def final_evaluation_id(self, run_id: str, kernel_id: int) -> int | None:
        """The id of a kernel's latest 'final' evaluation in a run (what the run announced)."""
        row = self._one("SELECT MAX(id) AS id FROM evaluations WHERE run_id = ? AND kernel_id = ? "
                        "AND purpose = 'final'", (run_id, kernel_id))
        return row["id"] if row else None

