"""Kernels (each with its parents, in order), their evaluations and profiles, stepping stones and
reflections: what a run's search produces, written as it goes; and reading kernels back, with the
figures of their evaluations, their lineage, and one row per kernel for export."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from kernelevo.evaluation import Evaluation, Profile
from kernelevo.tasks import source_hash as hash_source

from ..records import EvaluationRecord, KernelRecord, ReflectionRecord
from ..rows import (EVAL_COLUMNS, ORIGINS, PARENT_STONE, PURPOSES, check_choice, dumps, eval_values,
                    kernel_row, loads, unique)
from .connection import Store
from .runs import Runs

# The fields of one evaluation that every kernel row carries (None when there is none).
_EVAL_FIELDS = ("e.id AS evaluation_id, e.verdict, e.reason, e.speedup_eager, e.speedup_compile, e.candidate_ms, "
                "e.eager_ms, e.specialized, e.speedup_eager_lo, e.speedup_eager_hi, e.speedup_compile_lo, "
                "e.speedup_compile_hi, e.message, json_extract(e.data, '$.loop.candidate_ms') AS loop_ms, "
                "json_extract(e.data, '$.loop.device_ms') AS loop_device_ms")

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

_LINEAGE = """
WITH RECURSIVE ancestors(id, depth) AS (
    SELECT parent_id, 1 FROM kernel_parents WHERE kernel_id = ?
    UNION
    SELECT p.parent_id, a.depth + 1 FROM kernel_parents p JOIN ancestors a ON p.kernel_id = a.id)
SELECT id, MIN(depth) AS depth FROM ancestors GROUP BY id
"""


class Kernels:
    """Kernels, evaluations, profiles, stepping stones, lineage and reflections: one part of the Archive, over its connection `db` (and the runs part, whose
    reads it uses)."""

    def __init__(self, db: Store, runs: Runs) -> None:
        self._db, self._runs = db, runs

    # ---- what a run produces ---------------------------------------------------------------

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
        with self._db.tx() as conn:
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
        return self._db.write(
            f"INSERT INTO evaluations (kernel_id, run_id, purpose, {columns}, profile, created_at) "
            f"VALUES (?, COALESCE(?, (SELECT run_id FROM kernels WHERE id = ?)), ?, {marks}, ?, ?)",
            (kernel_id, run_id, kernel_id, purpose, *eval_values(evaluation),
             None if profile is None else dumps(profile), time.time()))

    def set_profile(self, evaluation_id: int, profile: dict) -> None:
        """Attach a profile to a stored evaluation (profiles come after the verdict)."""
        self._db.expect_one(self._db.write("UPDATE evaluations SET profile = ? WHERE id = ?",
                                           (dumps(profile), evaluation_id)), "evaluation", evaluation_id)

    def profiles(self, run_id: str) -> dict[int, Profile]:
        """kernel id -> the latest profile stored with one of its evaluations in the run."""
        rows = self._db.read("SELECT kernel_id, profile FROM evaluations WHERE run_id = ? AND profile IS NOT NULL "
                             "ORDER BY id", (run_id,))
        return {r["kernel_id"]: Profile.from_dict(loads(r["profile"])) for r in rows}

    def mark_stepping_stone(self, kernel_id: int, reason: str, via: int | None = None) -> None:
        """Mark a kernel as a stepping stone for `reason`, or, with `via`, as the parent of kernel
        `via` that earned it. The first reason stays: a kernel's own improvement is not overwritten
        by its children's (model_yield counts a kernel's own improvements by it)."""
        text = f"{PARENT_STONE}{via}: {reason}" if via is not None else reason
        self._db.expect_one(self._db.write(
            "UPDATE kernels SET stepping_stone = 1, stone_reason = CASE WHEN stepping_stone = 1 AND stone_reason != '' "
            "THEN stone_reason ELSE ? END WHERE id = ?", (text, kernel_id)), "kernel", kernel_id)

    def add_reflection(self, run_id: str | None, llm_call_id: int | None, analysis: str,
                       variant_ids: Sequence[int], kernel_id: int | None = None) -> int:
        return self._db.write("INSERT INTO reflections (run_id, kernel_id, llm_call_id, analysis, variant_ids, "
                              "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                              (run_id, kernel_id, llm_call_id, analysis, dumps([int(i) for i in variant_ids]),
                               time.time()))

    def set_reflection_kernel(self, reflection_id: int, kernel_id: int) -> None:
        """Link a reflection to the kernel written after it (known only once that kernel is stored)."""
        self._db.expect_one(self._db.write("UPDATE reflections SET kernel_id = ? WHERE id = ?",
                                           (kernel_id, reflection_id)), "reflection", reflection_id)

    def reflections(self, run_id: str | None = None, task_id: int | None = None) -> list[ReflectionRecord]:
        """Reflections oldest first, of a run, of every run of a task, or all."""
        rows = self._db.read("SELECT f.* FROM reflections f LEFT JOIN runs r ON r.id = f.run_id "
                             "WHERE (:run IS NULL OR f.run_id = :run) AND (:task IS NULL OR r.task_id = :task) "
                             "ORDER BY f.id", {"run": run_id, "task": task_id})
        return [ReflectionRecord(**{**row, "variant_ids": loads(row["variant_ids"]) or []}) for row in rows]

    # ---- reading kernels back --------------------------------------------------------------

    def kernels(self, run_id: str | None = None, task_id: int | None = None) -> list[KernelRecord]:
        """Kernels in id order, each with its parents and its latest 'search' evaluation's figures (None when never
        judged)."""
        rows = self._db.read(_KERNEL_SELECT + " WHERE (:run IS NULL OR k.run_id = :run) "
                             "AND (:task IS NULL OR k.task_id = :task) ORDER BY k.id",
                             {"run": run_id, "task": task_id})
        return self._with_parents(rows)

    def kernel(self, kernel_id: int) -> KernelRecord | None:
        """One kernel as in kernels(), with `evaluations`: all of them, oldest first."""
        row = self._db.one(_KERNEL_SELECT + " WHERE k.id = ?", (kernel_id,))
        if row is None:
            return None
        evaluations = tuple(EvaluationRecord.of(e) for e in self._db.read(
            "SELECT * FROM evaluations WHERE kernel_id = ? ORDER BY id", (kernel_id,)))
        return replace(self._with_parents([row])[0], evaluations=evaluations)

    def evaluation(self, evaluation_id: int) -> EvaluationRecord | None:
        """One evaluation."""
        row = self._db.one("SELECT * FROM evaluations WHERE id = ?", (evaluation_id,))
        return EvaluationRecord.of(row) if row else None

    def lineage(self, kernel_id: int) -> list[KernelRecord]:
        """The kernel's ancestors up to the roots (itself excluded), breadth-first: by `depth`
        (1 = a parent), then id; each as in kernels()."""
        depths = {r["id"]: r["depth"] for r in self._db.read(_LINEAGE, (kernel_id,))}
        rows = self._db.read(_KERNEL_SELECT + " WHERE k.id IN (SELECT value FROM json_each(?))",
                             (dumps(list(depths)),))
        kernels = [replace(k, depth=depths[k.id]) for k in self._with_parents(rows)]
        return sorted(kernels, key=lambda k: (k.depth, k.id))

    def best_kernel(self, run_id: str) -> KernelRecord | None:
        """The kernel of the run's fastest 'ok' search evaluation (earliest wins a tie), with that
        evaluation's fields as in kernels()."""
        row = self._db.one(f"SELECT k.*, {_EVAL_FIELDS} FROM evaluations e JOIN kernels k ON k.id = e.kernel_id "
                           "WHERE e.run_id = ? AND e.purpose = 'search' AND e.verdict = 'ok' "
                           "AND e.speedup_eager IS NOT NULL ORDER BY e.speedup_eager DESC, e.id LIMIT 1", (run_id,))
        return self._with_parents([row])[0] if row else None

    def final_evaluations(self, run_id: str) -> dict[int, EvaluationRecord]:
        """Kernel id -> its latest 'final' evaluation of the run (the re-judgement in a fresh process at the end of
        a run), in the order the run made them."""
        rows = self._db.read("SELECT * FROM evaluations WHERE run_id = ? AND purpose = 'final' ORDER BY id", (run_id,))
        return {r["kernel_id"]: EvaluationRecord.of(r) for r in rows}

    def final_evaluation_id(self, run_id: str, kernel_id: int) -> int | None:
        """The id of a kernel's latest 'final' evaluation in a run (what the run announced)."""
        row = self._db.one("SELECT MAX(id) AS id FROM evaluations WHERE run_id = ? AND kernel_id = ? "
                           "AND purpose = 'final'", (run_id, kernel_id))
        return row["id"] if row else None

    def remeasurements(self, run_id: str) -> dict[int, EvaluationRecord]:
        """Kernel id -> its latest 'rejudge' evaluation in the run (a new best re-measured in a fresh
        process before the search believed it)."""
        rows = self._db.read("SELECT * FROM evaluations WHERE run_id = ? AND purpose = 'rejudge' ORDER BY id", (run_id,))
        return {r["kernel_id"]: EvaluationRecord.of(r) for r in rows}

    def stepping_stones(self, task_hash: str | None = None, task_ids: Sequence[int] | None = None,
                        limit: int = 20) -> list[KernelRecord]:
        """Stepping-stone kernels of the task named by hash and/or of `task_ids` (of all tasks when both
        are None), best first, each with its best evaluation's fields and its task_hash, task_name."""
        ids = [int(i) for i in task_ids or ()]
        if task_hash is not None:
            task = self._runs.task_by_hash(task_hash)
            if task is None and not ids:
                return []
            ids += [task.id] if task else []
        every = task_hash is None and task_ids is None
        rows = self._db.read(_STONES_SELECT, {"all": every, "ids": dumps(ids), "limit": limit})
        return self._with_parents(rows)

    def export_rows(self, run_id: str | None = None, task_id: int | None = None) -> list[dict]:
        """Every kernel (of a run or task) with its task's source, its latest evaluation of any purpose
        (verdict, speedups, profile decoded), the model and cost of the call that wrote it, and parents: one JSON
        object per kernel, as an export writes it (a line of its own, not a record)."""
        rows = self._db.read(_EXPORT_SELECT, {"run": run_id, "task": task_id})
        parents = self._parents([r["id"] for r in rows])
        for row in rows:
            row["profile"] = loads(row.get("profile"))
            kernel_row(row)["parents"] = parents[row["id"]]
        return rows

    def _with_parents(self, rows: list[dict]) -> list[KernelRecord]:
        parents = self._parents([r["id"] for r in rows])
        return [KernelRecord.of(row, parents[row["id"]]) for row in rows]

    def _parents(self, ids: list[int]) -> dict[int, list[int]]:
        parents: dict[int, list[int]] = {i: [] for i in ids}
        links = self._db.read("SELECT kernel_id, parent_id FROM kernel_parents WHERE kernel_id IN "
                              "(SELECT value FROM json_each(?)) ORDER BY kernel_id, position",
                              (dumps(ids),))
        for link in links:
            parents[link["kernel_id"]].append(link["parent_id"])
        return parents
