"""What a run's report shows, read from the archive into one plain dict (JSON-ready).

Kept apart from the HTML so that the numbers can be tested, and printed with --json, without a
browser. Everything is derived from stored rows; nothing is recomputed or measured here.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from kernelevo.evaluation import Verdict, faster_beyond_noise

from ..export import profile_summary
from ..records import CallUsage, EvaluationRecord, Judged, KernelRecord, RunRecord, Spend, TaskRecord
from ..rows import announced, call_operator, source_diff

if TYPE_CHECKING:
    from ..store import Archive

TOP_KERNELS = 5
MAX_DIFF_LINES = 400  # a whole-file rewrite is shown as such, not as 2,000 lines of diff


def report_data(store: Archive, run_id: str, top: int = TOP_KERNELS) -> dict[str, Any]:
    """The report of run `run_id`: run facts, progress, lineage, top kernels, verdicts, yield and cost."""
    run = store.run(run_id)
    if run is None:
        raise KeyError(run_id)
    task = store.task(run.task_id)
    kernels = store.kernels(run_id=run_id)
    by_id = {k.id: k for k in kernels}
    calls = store.call_models(run_id)
    models = {k.id: calls.get(k.llm_call_id) for k in kernels}
    asked = store.call_formats(run_id)  # a kernel's format: the one its call asked for, else its own (tune)
    formats = {k.id: asked.get(k.llm_call_id) or k.format or "(none)" for k in kernels}
    timeline = _progress(store.timeline(run_id), store.remeasurements(run_id))
    finals = store.final_evaluations(run_id)
    best = _announced(finals, by_id) or store.best_kernel(run_id)
    path = _best_path(best.id, by_id) if best else []
    usage, counts = store.llm_usage(run_id), store.counts(run_id)
    repeats = [e.data for e in store.events(run_id, "prompt_repeat")]
    return {
        "run": {**_run_facts(run, task, store.spend(run_id), best, finals),
                "dropped": [f"{e.data['model']}: {e.data['reason']}" for e in store.events(run_id, "model_dropped")]},
        "progress": timeline,
        "lineage": [_node(k, models.get(k.id), set(path)) for k in kernels],
        "best_path": path,
        "top": _top_kernels(store, kernels, by_id, store.profiles(run_id), top, finals),
        "verdicts": counts.verdicts,
        "problems": counts.problems,
        "operators": _repeats(_yield_by(kernels, timeline, usage, "operator", lambda k: k.operator),
                              repeats, "operator"),
        "models": _repeats(_yield_by(kernels, timeline, usage, "model", lambda k: models.get(k.id) or "(none)"),
                           repeats, "model"),
        "formats": _yield_by(kernels, timeline, usage, "format", lambda k: formats[k.id]),
        "reflections": [{"kernel": r.kernel_id, "analysis": r.analysis, "variants": r.variant_ids}
                        for r in store.reflections(run_id=run_id)],
        "generated_at": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
    }


def _announced(finals: dict[int, EvaluationRecord], by_id: dict[int, KernelRecord]) -> KernelRecord | None:
    """The row of the kernel the run wrote out (rows.announced), or None before a run has one."""
    return by_id.get(announced(finals))


def _run_facts(run: RunRecord, task: TaskRecord | None, spend: Spend, best: KernelRecord | None,
               finals: dict[int, EvaluationRecord]) -> dict:
    config = run.config
    return {
        "id": run.id, "task": task.name if task else "", "task_hash": task.source_hash if task else "",
        "status": run.status, "stop_reason": run.stop_reason or "",
        "started": _when(run.created_at), "finished": _when(run.finished_at),
        "gpu": run.gpu_name or run.device or "", "torch": run.torch_version or "",
        "model": config.get("model") or "",
        "model_for": ", ".join(f"{op}={m}" for op, m in (config.get("model_for") or {}).items()),
        "format": config.get("format") or "", "policy": config.get("policy") or "",
        # what the search ranked kernels against (runs stored before the choice ranked by eager)
        "baseline": "torch.compile" if config.get("baseline") == "compile" and config.get("compile_baseline", True)
        else "eager",
        "calls": spend.calls, "failed_calls": spend.failed_calls, "cost_usd": spend.cost_usd,
        "unknown_cost_calls": spend.unknown_cost_calls,
        "best_kernel": best.id if best else None,
        # one truth per kernel: the final re-judgement's figures where there is one, the
        # search's (labelled "search") otherwise; the search's figure is kept beside it
        **_figures(best, finals, "best_"),
    }


def _figures(kernel: KernelRecord | None, finals: dict[int, EvaluationRecord], prefix: str = "") -> dict:
    """The speedups, their 95 % intervals ([low, high] or None), and which measurement they are."""
    final = finals.get(kernel.id) if kernel else None
    final = final if final and final.verdict == Verdict.OK else None
    shown = final or kernel
    eager, eager_ci, compiled, compiled_ci = \
        (shown.speedup_eager, shown.speedup_eager_ci, shown.speedup_compile, shown.speedup_compile_ci) if shown else \
        (None, None, None, None)
    return {f"{prefix}speedup": eager, f"{prefix}speedup_ci": eager_ci,
            f"{prefix}speedup_compile": compiled, f"{prefix}speedup_compile_ci": compiled_ci,
            f"{prefix}figures": "final" if final else "search" if kernel else None,
            f"{prefix}loop": final.data.get("loop") if final else None,  # calls back to back, host work included
            f"{prefix}search_speedup": kernel.speedup_eager if kernel else None,
            f"{prefix}search_speedup_ci": kernel.speedup_eager_ci if kernel else None,
            f"{prefix}search_speedup_compile": kernel.speedup_compile if kernel else None}


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""


def _progress(rows: list[Judged], remeasures: dict[int, EvaluationRecord] | None = None) -> list[dict]:
    """One point per judged candidate: its speedup (None unless ok) and its interval, the best so far,
    the spend so far. A new best beats the one before beyond the noise, on its re-measured figure
    where it was re-measured (`remeasures`: Archive.remeasurements), as the search counts it."""
    points, best, best_ci = [], None, None
    for n, r in enumerate(rows, 1):
        speedup = r.speedup_eager if r.verdict == Verdict.OK else None
        ci = r.speedup_eager_ci if speedup is not None else None
        again = (remeasures or {}).get(r.kernel_id) if speedup is not None else None
        held = (again.speedup_eager if again.verdict == Verdict.OK else None, again.speedup_eager_ci) \
            if again else (speedup, ci)
        improved = faster_beyond_noise(*held, best, best_ci)
        best, best_ci = held if improved else (best, best_ci)
        points.append({"n": n, "kernel": r.kernel_id, "verdict": r.verdict, "speedup": speedup,
                       "speedup_ci": ci, "best": best, "improved": improved, "spent_usd": round(r.spent_usd, 6)})
    return points


def _best_path(best_id: int, by_id: dict[int, KernelRecord]) -> list[int]:
    """Root to the best kernel through first parents (a crossover's first parent is its main one)."""
    path, seen, node = [], set(), best_id
    while node is not None and node in by_id and node not in seen:
        seen.add(node)
        path.append(node)
        parents = [p for p in by_id[node].parents if p in by_id]
        node = parents[0] if parents else None
    return path[::-1]


def _node(k: KernelRecord, model: str | None, on_path: set[int]) -> dict:
    return {"id": k.id, "parents": k.parents, "operator": k.operator, "generation": k.generation,
            "island": k.island, "verdict": k.verdict or ("not judged" if k.source else "no kernel"),
            "reason": k.reason or k.problem or "", "speedup": k.speedup_eager,
            "speedup_ci": k.speedup_eager_ci, "model": model or "",
            "stepping_stone": k.stepping_stone, "on_best_path": k.id in on_path}


def _top_kernels(store: Archive, kernels: list[KernelRecord], by_id: dict[int, KernelRecord], profiles: dict, top: int,
                 finals: dict[int, EvaluationRecord]) -> list[dict]:
    ok = sorted((k for k in kernels if k.verdict == Verdict.OK and k.speedup_eager is not None),
                key=lambda k: (-k.speedup_eager, k.id))[:top]
    out = []
    for k in ok:
        parent = next((by_id.get(p) or store.kernel(p) for p in k.parents), None)
        out.append({"id": k.id, "operator": k.operator, "format": k.format, "parents": k.parents,
                    **_figures(k, finals),
                    "candidate_ms": k.candidate_ms, "source": k.source,
                    "parent": parent.id if parent else None,
                    "parent_speedup": parent.speedup_eager if parent else None,
                    "parent_speedup_ci": parent.speedup_eager_ci if parent else None,
                    "diff": _diff(parent.source, k.source, parent.id, k.id) if parent else "",
                    "profile": profile_summary(profiles[k.id].to_dict() if k.id in profiles else None), "thinking": k.thinking or "", "account": k.account or "",
                    "shapes": _shapes(store, k.evaluation_id)})
    return out


def _shapes(store: Archive, evaluation_id: int | None) -> dict | None:
    """The input shapes the kernel's evaluation checked (supported, refused), when it says."""
    row = store.evaluation(evaluation_id) if evaluation_id is not None else None
    shapes = row.data.get("shapes") if row else None
    return {"specialized": bool(shapes.get("refused")), **shapes} if shapes else None


def _diff(old: str, new: str, old_id: int, new_id: int) -> str:
    lines = source_diff(old, new, old_id, new_id)
    if len(lines) > MAX_DIFF_LINES:
        return "\n".join(lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"])
    return "\n".join(lines)


def _yield_by(kernels: list[KernelRecord], progress: list[dict], usage: list[CallUsage], key: str, of) -> list[dict]:
    """Per operator (or model, or format asked for): kernels written, judged, ok, replies that copied a kernel of the run,
    replies received and judged (yield: the
    share of replies the judge got), new bests of the run set, improvements (new island bests and
    niches: what the search's bandits count), best speedup, spend, improvements per dollar."""
    improved = {p["kernel"] for p in progress if p["improved"]}
    groups: dict[str, dict] = {}
    for k in kernels:
        g = groups.setdefault(of(k), _empty(key, of(k)))
        g["kernels"] += 1
        g["judged"] += k.verdict is not None
        if k.llm_call_id is not None and not (k.problem or "").startswith("failed_call"):
            g["replies"] += 1  # a reply came back; judged unless it was a copy or held no kernel
            g["replies_judged"] += bool(k.source) and not k.problem
        g["ok"] += k.verdict == Verdict.OK
        g["copies"] += (k.problem or "").startswith(("copy:", "renamed_copy:"))
        g["new_bests"] += k.id in improved
        g["improvements"] += k.own_improvement
        if k.verdict == Verdict.OK and k.speedup_eager is not None:
            g["best_speedup"] = max(g["best_speedup"] or 0.0, k.speedup_eager)
    for u in usage:
        name = call_operator(u.operator) if key == "operator" else getattr(u, key) or "(none)"
        g = groups.setdefault(name, _empty(key, name))
        g["calls"] += u.spend.calls
        g["failed_calls"] += u.spend.failed_calls
        g["cost_usd"] += u.spend.cost_usd
        g["tokens"] += u.spend.prompt_tokens + u.spend.output_tokens
    for g in groups.values():
        g["yield"] = g["replies_judged"] / g["replies"] if g["replies"] else None  # as the live panel's
        g["ok_rate"] = g["ok"] / g["judged"] if g["judged"] else None
        g["usd_per_ok"] = g["cost_usd"] / g["ok"] if g["ok"] and g["calls"] else None
        g["improvements_per_usd"] = g["improvements"] / g["cost_usd"] if g["cost_usd"] > 0 else None
        g["cost_usd"] = round(g["cost_usd"], 6)
    return sorted(groups.values(), key=lambda g: (-g["kernels"], g[key]))


def _repeats(rows: list[dict], repeats: list[dict], key: str) -> list[dict]:
    """Per operator (or model), the prompts not sent because the same prompt had been answered."""
    counts = Counter(r.get(key) or "(none)" for r in repeats)
    for row in rows:
        row["repeats"] = counts.pop(row[key], 0)
    return rows + [{**_empty(key, name), "repeats": n} for name, n in sorted(counts.items())]


def _empty(key: str, name: str) -> dict:
    return {key: name, "kernels": 0, "judged": 0, "ok": 0, "copies": 0, "replies": 0, "replies_judged": 0,
            "new_bests": 0,
            "improvements": 0,
            "best_speedup": None,
            "calls": 0, "failed_calls": 0, "cost_usd": 0.0, "tokens": 0}

