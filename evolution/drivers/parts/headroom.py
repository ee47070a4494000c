"""What the compiler leaves on the table, part by part.

Each written part is measured as the judge measures a task's baseline (judge.api.Judge.baseline,
cached, so a later search of the part reuses it): eager, the part compiled alone under torch.compile,
and the speed of light of its work on this device (the reference's FLOPs at the calibrated compute
peak, or its bytes at the calibrated bandwidth). headroom_ms = compiled time - speed of light: what a
kernel could still win over the compiler. Parts are listed most headroom first; a part whose compiled
time is within LEFT_TO_COMPILER of moving its bytes once (the floor of any kernel, evolution/bound.py) is
"left to the compiler".
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kernelevo.baseline import Baseline

from ...bound import peaks_from, unreliable

if TYPE_CHECKING:
    from kernelevo.judge.api import JobResult

LEFT_TO_COMPILER = 1.2  # compiled time within this factor of the speed of light: no room for a kernel


def measure(data: dict, out_dir: Path, device: str, cache_dir: Path | None, seed: int = 0,
            on_status: Callable[[str], None] = lambda text: None) -> dict:
    """split.json's data with ms_compiled, sol_ms, headroom_ms and left_to_compiler per task, the tasks
    ordered by headroom (those without a figure last, in their order)."""
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.runtime import cache_dir as default_cache
    from kernelevo.tasks import load_task

    on_status(f"timing {len(data['tasks'])} parts under torch.compile, and their speed of light, on {device}")
    options = JudgeOptions(devices=(device,), seed=seed, sol=True)
    with Judge(Path(cache_dir) if cache_dir else default_cache(), options) as judge:
        tasks = [load_task(out_dir / t["task"]) for t in data["tasks"]]
        futures = [judge.prefetch_baseline(task, device) for task in tasks]  # their compiles overlap
        measured = [f.result() for f in futures]
    rows = [{**t, **_figures(*_read(m), weighted_calls(t["call_sites"]))} for t, m in zip(data["tasks"], measured)]
    ranked = sorted(rows, key=lambda t: -t["headroom_ms"] if t["headroom_ms"] is not None else float("inf"))
    return {**data, "tasks": ranked, "ranked_by": "headroom_ms"}


def weighted_calls(sites: list[dict]) -> float:
    """The part's calls in a forward, each counted at its task's size. A task folded over sites built
    at other sizes (a site with `built` > 0, fold.py) is timed at its own size only; such a site counts
    as its eager time over the task's own sites' eager time per call (a 1x1 convolution of a quarter
    of the channels counts about a quarter), where counting it whole overstated the part's headroom
    by the smaller sites' difference."""
    own = [s for s in sites if not s.get("built")]
    per_call = sum(s.get("ms") or 0.0 for s in own) / max(1, sum(s["calls"] for s in own))
    return sum(s["ms"] / per_call if s.get("built") and s.get("ms") and per_call > 0 else s["calls"] for s in sites)


def _read(job: JobResult) -> tuple[Baseline | None, str]:
    """The baseline job's result as the judge returned it (a JobResult): the Baseline where it passed, else why
    not."""
    if job.passed:
        return Baseline.of(job.to_dict()), ""
    return None, job.opponent.compile_error or job.message or "not measured"


def _figures(baseline: Baseline | None, failure: str = "", calls: float = 1) -> dict:
    """The part's compiled time, bound and headroom per forward of the model (a call's, times the
    part's `calls` in a forward: as its eager `ms` counts), from its baseline (None where not measured:
    `failure` says why)."""
    compiled = baseline.compiled_ms if baseline else None
    sol = baseline.sol if baseline else {}
    # a bound one of the part's baselines beats is wrong (bound.py): no gate, and the whole compiled time is headroom
    wrong = unreliable(sol.get("bound_ms"), {"eager PyTorch": baseline.eager_ms if baseline else None,
                                             "torch.compile": compiled})
    sol_ms, floor_ms = sol.get("bound_ms"), sol.get("memory_ms")
    compiled = compiled * calls if compiled is not None else None
    sol_ms = sol_ms * calls if sol_ms is not None else None
    floor_ms = floor_ms * calls if floor_ms is not None else None
    headroom = compiled - (0.0 if wrong else sol_ms) if compiled is not None and sol_ms is not None else None
    why = baseline.compile_error if baseline else failure
    used = peaks_from(sol)
    return {"ms_compiled": _round(compiled), "sol_ms": _round(sol_ms), "floor_ms": _round(floor_ms), "headroom_ms": _round(headroom),
            # near the floor of any kernel (its bytes moved once), not near a compute bound: a kernel may do less
            "left_to_compiler": bool(not wrong and compiled is not None and floor_ms and compiled <= LEFT_TO_COMPILER * floor_ms),
            **({"sol_from": used} if used else {}), **({"sol_unreliable": wrong} if wrong else {}),
            **({"not_measured": why} if compiled is None else {})}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def searched(data: dict, parts: int) -> list[dict]:
    """The `parts` tasks a model's search takes: most headroom first, none left to the compiler; by
    eager time where headroom was not measured (split.json's order then)."""
    return [t for t in data["tasks"] if not t.get("left_to_compiler")][:parts]
