"""A bench as data: one row per task and the suite's figures, the way the field scores kernel search.

fast_p (KernelBench): the share of tasks whose kernel is correct and more than p times as fast as
the baseline, over every task of the suite (a task without a correct kernel counts, as a miss).
Reported against eager and against torch.compile, over all tasks and over the tasks whose
reference is not degenerate (near-constant output, or output insensitive to its inputs or
weights: there a speedup says nothing about kernels). Figures are the final re-judged ones the
rows point at. Pure functions over store rows; `bench_table` does the reading.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from kernelevo.evaluation import Verdict
from kernelevo.archive.records import BenchTaskRecord

P_VALUES = (1.0, 1.2, 1.5, 2.0)
BASELINES = {"eager": "speedup_eager", "compile": "speedup_compile"}


def task_rows(stored: list[BenchTaskRecord]) -> list[dict]:
    """Store.bench_tasks records as table rows (the JSON and HTML view): name, status, verdict, correct, speedups and
    their intervals, specialized, degenerate, calls, cost, tokens, wall time, where the figures come from (run,
    kernel), and of the best kernel its format, its figures in a loop (host included) and in a CUDA graph (`graph`,
    where measured) and its share of the speed of light."""
    out = []
    for r in stored:
        correct = r.status == "done" and r.verdict == Verdict.OK
        evaluation = r.evaluation or {}
        out.append({
            "position": r.position, "name": r.name, "path": r.path, "status": r.status,
            "verdict": r.verdict or ("no correct kernel" if r.status == "done" else r.status),
            "reason": r.reason or r.error or "", "correct": correct,
            "speedup_eager": r.speedup_eager if correct else None,
            "speedup_compile": r.speedup_compile if correct else None,
            "speedup_eager_ci": r.speedup_eager_ci if correct else None,  # [low, high] (95 %)
            "speedup_compile_ci": r.speedup_compile_ci if correct else None,
            "specialized": None if r.specialized is None else bool(r.specialized), "degenerate": r.degenerate or "",
            "calls": r.calls, "cost_usd": r.cost_usd,
            "unknown_cost_calls": r.unknown_cost_calls, "replayed": r.replayed, "wall_s": r.wall_s or 0.0,
            "run_id": r.run_id, "kernel_id": r.kernel_id, "device_name": r.device_name or "",
            # which device judged the figures: cuda:1, or on a Ray cluster the node and its GPU
            "device": evaluation.get("node") or r.device or "",
            "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
            # so far in the search (a task waiting for a reply has no final figures yet): not counted in fast_p
            "search_speedup_eager": r.search_speedup_eager, "search_speedup_compile": r.search_speedup_compile,
            **_of_best(evaluation if correct else {}, r.bound or {}, bool(r.bound_beaten)),
        })
    return out


def _of_best(evaluation: dict, bound: dict, beaten: bool) -> dict:
    """The best kernel's format, its figures in a loop of calls (host work included), and its share of the run's
    speed of light (the bound's time over the kernel's; None where the run had none, or a kernel ran faster than
    it: the estimate is wrong there)."""
    loop = evaluation.get("loop") or {}
    ms = (evaluation.get("candidate") or {}).get("median_ms")
    reliable = bound.get("bound_ms") and not bound.get("unreliable") and not beaten
    return {"format": evaluation.get("format") or "",
            "loop_speedup_eager": loop.get("speedup_eager"), "loop_speedup_compile": loop.get("speedup_compile"),
            # each replayed in a CUDA graph, as a model's is (a final on a GPU): what it can give a model there
            "graph": evaluation.get("graph"),
            "sol_share": bound["bound_ms"] / ms if reliable and ms else None}


def fast_p(rows: list[dict], p: float, baseline: str = "eager") -> float | None:
    """Share of `rows` correct and faster than p times the baseline; None for no rows, or when no
    correct row has a figure against that baseline (torch.compile not measured: not a 0)."""
    key = BASELINES[baseline]
    if not rows or not any(r["correct"] and r[key] is not None for r in rows) and any(r["correct"] for r in rows):
        return None
    return sum(1 for r in rows if r["correct"] and (r[key] or 0.0) > p) / len(rows)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list[dict], p_values: tuple[float, ...] = P_VALUES) -> dict[str, Any]:
    """The suite's figures: correct rate, fast_p (all tasks and non-degenerate ones) against eager
    and torch.compile, geomean speedups over correct tasks (device time, and in a loop with the host's work),
    totals of cost, calls, tokens and wall time."""
    healthy = [r for r in rows if not r["degenerate"]]
    correct = [r for r in rows if r["correct"]]
    return {
        "tasks": len(rows), "done": sum(r["status"] in ("done", "failed") for r in rows),
        "correct": len(correct), "correct_rate": len(correct) / len(rows) if rows else None,
        "degenerate": len(rows) - len(healthy), "specialized": sum(1 for r in correct if r["specialized"]),
        "fast_p": {b: {str(p): fast_p(rows, p, b) for p in p_values} for b in BASELINES},
        "fast_p_healthy": {b: {str(p): fast_p(healthy, p, b) for p in p_values} for b in BASELINES},
        "geomean": {b: geomean([r[k] for r in correct]) for b, k in BASELINES.items()},
        # in a loop of calls, host work included (the final judgement's twin of the device figures)
        "geomean_loop": {b: geomean([r[f"loop_{k}"] for r in correct]) for b, k in BASELINES.items()},
        "input_tokens": sum(r["input_tokens"] for r in rows), "output_tokens": sum(r["output_tokens"] for r in rows),
        "cost_usd": sum(r["cost_usd"] for r in rows), "calls": sum(r["calls"] for r in rows),
        "unknown_cost_calls": sum(r["unknown_cost_calls"] for r in rows), "replayed": sum(r["replayed"] for r in rows),
        "wall_s": sum(r["wall_s"] for r in rows),
    }


def curve(rows: list[dict], baseline: str, top: float | None = None, steps: int = 60) -> list[tuple[float, float]]:
    """(p, fast_p) from p = 0 to past the largest speedup: the fast_p curve of the report."""
    key = BASELINES[baseline]
    largest = max([r[key] or 0.0 for r in rows if r["correct"]] + [2.0])
    top = top or largest * 1.1
    return [(top * i / steps, fast_p(rows, top * i / steps, baseline) or 0.0) for i in range(steps + 1)]


def bench_table(store, bench_id: str) -> dict[str, Any]:
    """{'bench': its record as a dict, 'tasks': table rows, 'suite': summary, 'baseline': what the searches ranked
    kernels against ("compile" or "eager"; benches stored before the choice existed ranked by eager)};
    KeyError for an unknown bench."""
    bench = store.bench(bench_id)
    if bench is None:
        raise KeyError(f"no bench {bench_id} in {store.path}; `kernelevo bench ls` lists them")
    rows = task_rows(store.bench_tasks(bench_id))
    return {"bench": dataclasses.asdict(bench), "tasks": rows, "suite": summary(rows),
            "baseline": bench.config.get("baseline", "eager")}


def compare(a: dict, b: dict) -> dict[str, Any]:
    """Two bench tables side by side: tasks matched by name (in A's order, then B's own), and both suites."""
    by_name = {r["name"]: r for r in b["tasks"]}
    names = [r["name"] for r in a["tasks"]] + [r["name"] for r in b["tasks"] if r["name"] not in
                                                {x["name"] for x in a["tasks"]}]
    a_rows = {r["name"]: r for r in a["tasks"]}
    return {"a": a["bench"]["id"], "b": b["bench"]["id"],
            "tasks": [{"name": n, "a": a_rows.get(n), "b": by_name.get(n)} for n in names],
            "suite": {"a": a["suite"], "b": b["suite"]}}
