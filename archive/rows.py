"""Pure helpers of the archive: record <-> column values, JSON columns, vectors. No SQL here.

Kept apart from the store (archive/store/) so that the code that talks SQL stays short enough to read.
"""
from __future__ import annotations

import difflib
import json
import math
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kernelevo.evaluation import Evaluation, Verdict
from kernelevo.llm_call import LLMCall

if TYPE_CHECKING:  # numpy is imported lazily: opening an archive must not pay for it
    import numpy

    from .records import EvaluationRecord, FormatBest, FormatYield, ModelYield

RUN_STATUSES = ("running", "finished", "stopped", "budget", "failed")
BENCH_STATUSES = ("running", "finished", "stopped")
BENCH_TASK_STATUSES = ("pending", "running", "done", "failed", "skipped")
BENCH_TASK_FIELDS = ("status", "task_id", "run_id", "kernel_id", "evaluation_id", "degenerate", "error", "wall_s")
PURPOSES = ("search", "final", "rejudge", "import")
ORIGINS = ("run", "import", "seed")
OWNERS = ("kernel", "task")
# How a stepping stone marked for a child's improvement (not its own) begins its reason.
PARENT_STONE = "parent of kernel "

# Columns of llm_calls, in LLMCall's field order; a test checks that none of LLMCall's fields is missing.
LLM_COLUMNS = ("provider", "model", "operator", "outcome", "input_tokens", "cache_read_tokens",
               "cache_write_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "latency_s",
               "request_id", "started_at", "prompt_hash", "reply", "stop_reason", "error", "label", "format",
               "prompt_form")

# Evaluation fields copied into their own columns so that SQL can sort and filter on them;
# the whole record is kept as JSON in `data` as well.
EVAL_COLUMNS = ("verdict", "reason", "message", "speedup_eager", "speedup_eager_ci", "speedup_compile",
                "candidate_ms", "eager_ms", "compiled_ms", "device", "device_name", "torch_version",
                "build_s", "device_s", "wall_s", "data", "specialized", "speedup_eager_lo", "speedup_eager_hi",
                "speedup_compile_lo", "speedup_compile_hi")


def new_run_id(now: float | None = None, prefix: str = "r") -> str:
    """'r20261122-1530-ab12' (a bench: 'b...'): sortable by start time, readable, unique enough with a
    retry on clash."""
    stamp = time.strftime("%Y%m%d-%H%M", time.localtime(time.time() if now is None else now))
    return f"{prefix}{stamp}-{secrets.token_hex(2)}"


def dumps(value: Any) -> str:
    # default=str: a config may carry Paths or enums; the archive keeps their text rather than fail a run
    return json.dumps(value, sort_keys=True, default=str)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def llm_values(call: LLMCall) -> tuple:
    return tuple(getattr(call, name) for name in LLM_COLUMNS)


def _median(stats: Any) -> float | None:
    if stats is None:
        return None
    return stats["median_ms"] if isinstance(stats, dict) else stats.median_ms  # a hand-built record may hold dicts


def eval_values(evaluation: Evaluation) -> tuple:
    """Column values for EVAL_COLUMNS."""
    e = evaluation
    eager_ci, compile_ci = e.speedup_eager_ci or (None, None), e.speedup_compile_ci or (None, None)
    half = (eager_ci[1] - eager_ci[0]) / 2 / e.speedup_eager if e.speedup_eager_ci and e.speedup_eager else None
    return (e.verdict, e.reason, e.message, _finite(e.speedup_eager), _finite(half),
            _finite(e.speedup_compile), _median(e.candidate), _median(e.eager), _median(e.compiled),
            e.device, e.device_name, e.torch_version, e.build_s, e.device_s, e.wall_s,
            dumps({k: v for k, v in e.to_dict().items() if k != "profile"}),  # the profile has its own column
            None if e.shapes is None else int(e.specialized), *map(_finite, eager_ci), *map(_finite, compile_ci))


def _finite(x: float | None) -> float | None:
    # SQLite stores NaN as NULL anyway; say so explicitly, and keep inf out of ORDER BY
    return x if x is None or math.isfinite(x) else None


def call_operator(name: str) -> str:
    """The operator an LLM call counts for: a follow-up (an edit that failed to apply) and the
    functional rewrite count for the operator they serve."""
    name = name.removesuffix("_edit_followup")
    return "translate" if name == "functional" else name


def _summed(rows: Iterable, key: str, sums: tuple[str, ...], names: Iterable[str]) -> dict[str, dict]:
    """Yield records summed over their fields `sums` per field `key`: `names` first (zeros for one without a row),
    then others as first seen; a row with an empty key is left out. cost_usd rounded."""
    out: dict[str, dict] = {n: {key: n, **{k: 0 for k in sums}} for n in names}
    for r in rows:
        if getattr(r, key):
            g = out.setdefault(getattr(r, key), {key: getattr(r, key), **{k: 0 for k in sums}})
            for k in sums:
                g[k] += getattr(r, k)
    for g in out.values():
        g["cost_usd"] = round(g["cost_usd"], 6)
    return out


def by_format(rows: Iterable[FormatYield], best: dict[str, FormatBest], names: Iterable[str] = ()) -> list[dict]:
    """Archive.format_yield rows summed per asked format, `names` first (zeros for one not asked
    yet), with the format's fastest correct kernel from Archive.format_best: calls, cost_usd,
    attempts, judged, correct, improvements, best (kernel id or None), best_speedup, best_speedup_ci."""
    out = _summed(rows, "format", ("calls", "cost_usd", "attempts", "judged", "correct", "improvements"), names)
    for fmt, g in out.items():
        top = best.get(fmt)
        g.update(best=top.kernel_id if top else None, best_speedup=top.speedup_eager if top else None,
                 best_speedup_ci=top.speedup_eager_ci if top else None)
    return list(out.values())


def by_model(rows: Iterable[ModelYield], names: Iterable[str] = ()) -> list[dict]:
    """Archive.model_yield rows summed per model: `names` first (zeros for one without a call yet),
    then others as first seen. Each: calls, cost_usd, unknown_cost_calls, attempts, replies, judged,
    correct, improvements, and improvements_per_usd (None while nothing known was spent)."""
    out = _summed(rows, "model", _MODEL_SUMS, names)
    for g in out.values():
        g["improvements_per_usd"] = g["improvements"] / g["cost_usd"] if g["cost_usd"] > 0 else None
    return list(out.values())


_MODEL_SUMS = ("calls", "cost_usd", "unknown_cost_calls", "attempts", "replies", "judged", "correct", "improvements")


def source_diff(old: str, new: str, old_id: int, new_id: int, context: int = 3) -> list[str]:
    """Unified diff lines (no line ends) of two kernels' sources, labelled by kernel id."""
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"kernel {old_id}", f"kernel {new_id}",
                                     n=context, lineterm=""))


def kernel_row(row: dict[str, Any]) -> dict[str, Any]:
    """Decode a kernels row (JSON columns, the 0/1 flag, its evaluation's intervals) in place and return it."""
    row["descriptors"] = loads(row.get("descriptors"))
    row["claims"] = loads(row.get("claims"))
    row["stepping_stone"] = bool(row.get("stepping_stone"))
    return intervals(row)


def announced(finals: dict[int, EvaluationRecord]) -> int | None:
    """The kernel a run wrote out: the first to pass its final re-judgement (optimize tries the
    search's best first), from Archive.final_evaluations; None before a run has one."""
    return next((kid for kid, e in finals.items() if e.verdict == Verdict.OK), None)


def intervals(row: dict[str, Any]) -> dict[str, Any]:
    """Replace a row's `<speedup>_lo` and `<speedup>_hi` columns by `<speedup>_ci`: [low, high], or
    None where not measured, as the JSON of an Evaluation has it (an evaluations row's own
    `speedup_eager_ci` column is the relative half-width kept for older readers: replaced too)."""
    for key in ("speedup_eager", "speedup_compile"):
        if f"{key}_lo" in row:
            lo, hi = row.pop(f"{key}_lo"), row.pop(f"{key}_hi", None)
            row[f"{key}_ci"] = [lo, hi] if lo is not None and hi is not None else None
    return row


def unique(ids: Iterable[int]) -> list[int]:
    """Ids in first-seen order without repeats (a crossover may name one parent twice)."""
    seen: dict[int, None] = {}
    for i in ids:
        seen.setdefault(int(i), None)
    return list(seen)


def to_blob(vector: Sequence[float] | numpy.ndarray) -> tuple[bytes, int]:
    """(float32 little-endian bytes, dim) of a 1-D vector."""
    import numpy as np

    array = np.asarray(vector, dtype="<f4")
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"an embedding must be a non-empty 1-D vector, got shape {array.shape}")
    return array.tobytes(), int(array.size)


def from_blob(blob: bytes, dim: int) -> numpy.ndarray:
    import numpy as np

    array = np.frombuffer(blob, dtype="<f4").astype(np.float32)  # astype: native order, writable copy
    if array.size != dim:
        raise ValueError(f"embedding blob holds {array.size} values, its row says {dim}")
    return array


def rank_cosine(query: Sequence[float] | numpy.ndarray, items: list[tuple[int, numpy.ndarray]],
                limit: int) -> list[tuple[int, float]]:
    """Items by cosine similarity to `query`, best first; vectors of another dimension are skipped."""
    import numpy as np

    q = np.asarray(query, dtype=np.float64).ravel()
    q_norm = float(np.linalg.norm(q))
    if not items or q_norm == 0.0:
        return []
    scored = []
    for owner_id, vec in items:
        if vec.size != q.size:
            continue  # another embedding size: not comparable, not an error
        norm = float(np.linalg.norm(vec))
        if norm > 0.0:
            scored.append((owner_id, float(np.dot(q, vec.astype(np.float64)) / (q_norm * norm))))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


def check_choice(value: str, allowed: Sequence[str], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(allowed)}")


def split_script(sql: str) -> Iterator[str]:
    """Split a script into statements; complete_statement keeps a trigger's BEGIN...END whole."""
    buffer = ""
    for piece in sql.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \t\n;"):
                yield buffer.strip()
            buffer = ""
    if buffer.strip(" \t\n;"):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buffer.strip()[:60]!r}")
