"""LLM calls (each with its tokens, cost and outcome) and the counters derived from a run's rows:
spend, cost and yield per operator and per model, usage, the timeline of its evaluations, counts."""
from __future__ import annotations

import time

from kernelevo.llm_call import LLMCall

from ..records import (AnsweredCall, CallUsage, Counts, FormatBest, FormatYield, Judged, ModelYield, OperatorYield,
                       Spend)
from ..rows import LLM_COLUMNS, PARENT_STONE, call_operator, intervals, llm_values
from .connection import Store
from .runs import Runs


def _label(table: str = "") -> str:
    """SQL for the ensemble member that made a call: its label, or provider:model for calls stored
    before labels; `table`: the llm_calls alias of the query, if any."""
    t = f"{table}." if table else ""
    return f"COALESCE(NULLIF({t}label, ''), {t}provider || ':' || {t}model)"


_LABEL = _label()


def _kernel_yield(group: str) -> str:
    """Per `group` (a column) and model, what the kernel rows of the calls became (see
    Archive.model_yield and Archive.format_yield)."""
    return f"""
SELECT {group}, {_label("c")} AS model, COUNT(*) AS attempts,
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


_MODEL_KERNELS = _kernel_yield("k.operator")  # per operator and model
_FORMAT_KERNELS = _kernel_yield("c.format")  # per format asked for and model

# Per kernel format, the run's fastest kernel judged ok (any purpose: a re-measurement replaces nothing here).
_FORMAT_BEST = """
SELECT k.format, k.id AS kernel_id, e.speedup_eager, e.speedup_eager_lo, e.speedup_eager_hi
FROM kernels k JOIN evaluations e ON e.kernel_id = k.id
WHERE k.run_id = ? AND e.verdict = 'ok' AND k.format != ''
ORDER BY k.format, e.speedup_eager IS NULL, e.speedup_eager DESC, e.id
"""

_TOKEN_SUMS = ", ".join(f"COALESCE(SUM({c}), 0) AS {c}" for c in
                        ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens"))
# A group of calls summed as records.Spend has it: counts, known cost and calls of unknown cost, token sums.
_SPEND_SUMS = ("COUNT(*) AS calls, COALESCE(SUM(outcome != 'ok'), 0) AS failed_calls, "
               "COALESCE(SUM(provider = 'replay'), 0) AS replayed, TOTAL(cost_usd) AS cost_usd, "
               f"COUNT(*) - COUNT(cost_usd) AS unknown_cost_calls, {_TOKEN_SUMS}")


class Calls:
    """LLM calls and the counters of a run: one part of the Archive, over its connection `db` (and the runs part, whose
    reads it uses)."""

    def __init__(self, db: Store, runs: Runs) -> None:
        self._db, self._runs = db, runs

    # ---- LLM calls -----------------------------------------------------------------------

    def add_llm_call(self, run_id: str | None, call: LLMCall) -> int:
        columns = ", ".join(LLM_COLUMNS)
        marks = ", ".join("?" * len(LLM_COLUMNS))
        return self._db.write(f"INSERT INTO llm_calls (run_id, {columns}, created_at) VALUES (?, {marks}, ?)",
                              (run_id, *llm_values(call), time.time()))

    def answered_prompts(self, run_id: str) -> set[str]:
        """Hashes of the prompts a run's calls sent and got a reply to: not to be asked again."""
        return {r["prompt_hash"] for r in self._db.read(
            "SELECT DISTINCT prompt_hash FROM llm_calls WHERE run_id = ? AND prompt_hash != '' AND outcome = 'ok'",
            (run_id,))}

    def recorded_replies(self, run_id: str) -> list[AnsweredCall]:
        """A run's answered calls in the order they were made (a replay's recording: agent/replay.py). Every column
        is read: an archive opened for reading only keeps its schema, and one from before 0008 has no prompt_form."""
        return [AnsweredCall(row["operator"], row["reply"], row["prompt_hash"], row["provider"], row["model"],
                             row.get("prompt_form", "")) for row in self._db.read(
            "SELECT * FROM llm_calls WHERE run_id = ? AND outcome = 'ok' AND reply != '' ORDER BY id", (run_id,))]

    def replayed_replies(self, run_id: str) -> list[str]:
        """The texts of a run's calls answered from a recording, in order (a resumed replay leaves them out)."""
        return [r["reply"] for r in self._db.read(
            "SELECT reply FROM llm_calls WHERE run_id = ? AND provider = 'replay' ORDER BY id", (run_id,))]

    # ---- counters, always derived from rows ------------------------------------------------

    def spend(self, run_id: str) -> Spend:
        """The run's calls summed: calls, failed, replayed, known cost, calls of unknown cost, token sums."""
        return Spend(**self._db.one(f"SELECT {_SPEND_SUMS} FROM llm_calls WHERE run_id = ?", (run_id,)))

    def operator_costs(self, run_id: str) -> dict[str, float]:
        """Known LLM spend per operator of a run (follow-up calls count for their operator)."""
        rows = self._db.read("SELECT operator, TOTAL(cost_usd) AS cost FROM llm_calls WHERE run_id = ? "
                             "GROUP BY operator", (run_id,))
        costs: dict[str, float] = {}
        for r in rows:
            op = call_operator(r["operator"])
            costs[op] = costs.get(op, 0.0) + r["cost"]
        return costs

    def call_yield(self, run_id: str) -> dict[str, OperatorYield]:
        """Per operator of a run, what its calls came to (records.OperatorYield)."""
        out: dict[str, dict] = {}
        for r in self._db.read("SELECT operator, COUNT(*) AS calls FROM llm_calls WHERE run_id = ? GROUP BY operator",
                               (run_id,)):
            row = out.setdefault(call_operator(r["operator"]), {"calls": 0, "replies": 0, "judged": 0})
            row["calls"] += r["calls"]
        for r in self._db.read(
                "SELECT operator, COUNT(*) AS replies, COALESCE(SUM(source != '' AND problem = ''), 0) AS judged, "
                "COALESCE(SUM(problem LIKE 'copy:%' OR problem LIKE 'renamed_copy:%'), 0) AS copies "
                "FROM kernels WHERE run_id = ? AND llm_call_id IS NOT NULL AND problem NOT LIKE 'failed_call%' "
                "GROUP BY operator", (run_id,)):
            row = out.setdefault(r["operator"], {"calls": 0, "replies": 0, "judged": 0})
            row["replies"], row["judged"], row["copies"] = r["replies"], r["judged"], r["copies"]
        for event in self._runs.events(run_id, kind="prompt_repeat"):
            row = out.setdefault(event.data["operator"], {"calls": 0, "replies": 0, "judged": 0})
            row["repeats"] = row.get("repeats", 0) + 1
        return {op: OperatorYield(**row) for op, row in out.items()}

    def call_models(self, run_id: str) -> dict[int, str]:
        """LLM call id -> the ensemble member that answered it (its label), for a run's calls."""
        return {r["id"]: r["model"] for r in self._db.read(f"SELECT id, {_LABEL} AS model FROM llm_calls WHERE run_id = ?",
                                                           (run_id,))}

    def call_formats(self, run_id: str) -> dict[int, str]:
        """LLM call id -> the candidate format it asked for ('' for none), for a run's calls."""
        return {r["id"]: r["format"] for r in self._db.read("SELECT id, format FROM llm_calls WHERE run_id = ?", (run_id,))}

    def model_yield(self, run_id: str) -> list[ModelYield]:
        """Per (operator, model) of a run, what its calls came to (records.ModelYield); operators as in call_yield."""
        out: dict[tuple[str, str], dict] = {}

        def row(operator: str, model: str) -> dict:
            key = (call_operator(operator), model)
            return out.setdefault(key, {"operator": key[0], "model": model, "calls": 0, "cost_usd": 0.0,
                                        "unknown_cost_calls": 0, "attempts": 0, "replies": 0, "judged": 0,
                                        "correct": 0, "improvements": 0})
        for r in self._db.read(f"SELECT operator, {_LABEL} AS model, COUNT(*) AS calls, TOTAL(cost_usd) AS cost_usd, "
                               "COUNT(*) - COUNT(cost_usd) AS unknown_cost_calls FROM llm_calls WHERE run_id = ? "
                               "GROUP BY 1, 2", (run_id,)):
            g = row(r["operator"], r["model"])
            for k in ("calls", "cost_usd", "unknown_cost_calls"):
                g[k] += r[k]
        for r in self._db.read(_MODEL_KERNELS, (PARENT_STONE + "%", run_id)):
            g = row(r["operator"], r["model"])
            for k in ("attempts", "replies", "judged", "correct", "improvements"):
                g[k] += r[k]
        return [ModelYield(**g) for g in sorted(out.values(), key=lambda g: (g["model"], g["operator"]))]

    def format_yield(self, run_id: str) -> list[FormatYield]:
        """Per (asked format, model) of a run, what its calls came to (records.FormatYield): for the format bandit and
        the displays."""
        out: dict[tuple[str, str], dict] = {}

        def row(fmt: str, model: str) -> dict:
            return out.setdefault((fmt, model), {"format": fmt, "model": model, "calls": 0, "cost_usd": 0.0,
                                                 "attempts": 0, "judged": 0, "correct": 0, "improvements": 0})
        for r in self._db.read(f"SELECT format, {_LABEL} AS model, COUNT(*) AS calls, TOTAL(cost_usd) AS cost_usd "
                               "FROM llm_calls WHERE run_id = ? GROUP BY 1, 2", (run_id,)):
            g = row(r["format"], r["model"])
            g["calls"], g["cost_usd"] = r["calls"], r["cost_usd"]
        for r in self._db.read(_FORMAT_KERNELS, (PARENT_STONE + "%", run_id)):
            g = row(r["format"], r["model"])
            for k in ("attempts", "judged", "correct", "improvements"):
                g[k] += r[k]
        return [FormatYield(**g) for g in sorted(out.values(), key=lambda g: (g["format"], g["model"]))]

    def format_best(self, run_id: str) -> dict[str, FormatBest]:
        """Per kernel format of a run, its fastest kernel judged ok."""
        best: dict[str, FormatBest] = {}
        for r in self._db.read(_FORMAT_BEST, (run_id,)):
            if r["format"] not in best:
                best[r["format"]] = FormatBest(**{k: v for k, v in intervals(dict(r)).items() if k != "format"})
        return best

    def timeline(self, run_id: str) -> list[Judged]:
        """The run's search evaluations in the order they were judged, each with the run's known spend up to it."""
        return [Judged(**intervals(r)) for r in self._db.read(
            "SELECT e.id AS evaluation_id, e.kernel_id, e.verdict, e.reason, e.speedup_eager, e.speedup_eager_lo, "
            "e.speedup_eager_hi, e.created_at, "
            "(SELECT TOTAL(c.cost_usd) FROM llm_calls c WHERE c.run_id = e.run_id AND c.created_at <= e.created_at) "
            "AS spent_usd FROM evaluations e WHERE e.run_id = ? AND e.purpose = 'search' ORDER BY e.id", (run_id,))]

    def llm_usage(self, run_id: str) -> list[CallUsage]:
        """A run's LLM calls per operator, model (its label) and format asked for."""
        rows = self._db.read(
            f"SELECT operator, {_LABEL} AS model, COALESCE(format, '') AS format, TOTAL(latency_s) AS latency_s, "
            f"{_SPEND_SUMS} FROM llm_calls WHERE run_id = ? GROUP BY 1, 2, 3 ORDER BY 1, 2, 3", (run_id,))
        return [CallUsage(r.pop("operator"), r.pop("model"), r.pop("format"), latency_s=r.pop("latency_s"),
                          spend=Spend(**r)) for r in rows]

    def counts(self, run_id: str) -> Counts:
        """The run's counters (records.Counts): evaluations, verdicts, kernels, operators, problems, generations."""
        def tally(sql: str) -> dict[str, int]:
            return {r["k"]: r["n"] for r in self._db.read(sql, (run_id,))}

        totals = self._db.one("SELECT COUNT(*) AS kernels, MAX(generation) AS max_generation "
                              "FROM kernels WHERE run_id = ?", (run_id,))
        by_purpose = tally("SELECT purpose AS k, COUNT(*) AS n FROM evaluations WHERE run_id = ? GROUP BY purpose")
        return Counts(
            verdicts=tally("SELECT verdict AS k, COUNT(*) AS n FROM evaluations "
                           "WHERE run_id = ? AND purpose = 'search' GROUP BY verdict"),
            operators=tally("SELECT operator AS k, COUNT(*) AS n FROM kernels WHERE run_id = ? GROUP BY operator"),
            problems=tally("SELECT problem AS k, COUNT(*) AS n FROM kernels "
                           "WHERE run_id = ? AND source = '' GROUP BY problem"),
            kernels=totals["kernels"], max_generation=totals["max_generation"], evaluations_by_purpose=by_purpose)
