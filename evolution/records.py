"""The search's records: its settings, what the display shows, a run's options and outcome, and
the small pure helpers around them (no room is called from here: loop/ coordinates)."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.records import Evaluation
from kernelevo.report import speedup_text

from . import budget as budgets
from .population import Member

EXIT_OK, EXIT_BUDGET, EXIT_UNREACHABLE = 0, 3, 4  # 4: the model server stopped answering
BUDGET_REASONS = ("max-cost-usd", "max-llm-calls", "max-wall-time")


@dataclass(frozen=True)
class SearchSettings:
    children_per_generation: int = 8
    islands: int = 2
    llm_concurrency: int = 4
    reflect_k: int = 4
    prompt_tokens_estimate: int = 12000  # what a call is reserved at before it is made
    output_tokens_estimate: int = 6000
    profile_per_generation: int = 2  # new island bests profiled per generation (0: none); see loop/children.py
    ncu: bool = True  # a new best of the run gets Nsight Compute's metrics too, when ncu is installed


@dataclass
class Progress:
    """What the display shows; a snapshot is handed to `on_progress` after every event."""

    generation: int = 0
    judged: int = 0
    started: float = field(default_factory=time.monotonic)
    judged_this_session: int = 0
    best_eager: float | None = None
    best_compile: float | None = None
    best_eager_ci: tuple[float, float] | None = None  # 95 % intervals of the two, where measured
    best_compile_ci: tuple[float, float] | None = None
    spend_usd: float = 0.0
    unknown_cost_calls: int = 0
    calls: int = 0
    cache_hit: float | None = None
    verdicts: Counter = field(default_factory=Counter)
    llm_in_flight: int = 0
    judging: int = 0
    remeasuring: int = 0  # of those being judged, new bests measured again before they count
    skipped_copies: int = 0  # replies that were exact or renamed copies of a known kernel
    repeats_avoided: int = 0  # prompts not sent because the same prompt was answered (or in flight) before
    calls_by_operator: dict = field(default_factory=dict)  # operator -> LLM calls
    replies: int = 0  # replies that came back and became a kernel row
    replies_judged: int = 0  # of those, the ones the judge got
    models: list = field(default_factory=list)  # per model of the run: archive.rows.by_model's figures
    dropped: dict = field(default_factory=dict)  # model -> why it dropped out
    status: str = "starting"
    run_id: str = ""

    @property
    def per_minute(self) -> float:
        minutes = (time.monotonic() - self.started) / 60
        return self.judged_this_session / minutes if minutes > 0 else 0.0


@dataclass(frozen=True)
class OptimizeOptions:
    task_path: Path
    models: tuple[str, ...]  # "provider:MODEL" or [models.ALIAS] names; several: an ensemble; (): a resumed run's
    devices: tuple[str, ...]  # judge devices: ("cpu",) or ("cuda:0", "cuda:1", ...)
    archive_path: Path
    out_dir: Path
    cache_dir: Path
    fmt: str | None = None  # candidate format asked for; nvrtc on a GPU, c on the CPU
    limits: budgets.Limits = field(default_factory=budgets.Limits)
    settings: SearchSettings = field(default_factory=SearchSettings)
    seed: int = 0
    policy: str = "mixed"
    trials: int = 5
    seed_from: tuple[Path, ...] = ()
    resume: str | None = None
    config_path: Path | None = None
    timing: Any = None  # a judge TimingConfig; None: the judge's default
    compile_baseline: bool = True
    shapes: str = "general"  # or "exact": the judge derives no other input shapes (judge/shapes.py)
    executor: str = "local"  # or "ray": judge jobs run on a Ray cluster (judge/ray_executor.py)
    ray_address: str | None = None  # None: $RAY_ADDRESS, else a cluster started on this machine
    model_for: tuple[tuple[str, str], ...] | None = None  # (operator, model) pins; None: a resumed run's own


class Interrupted(KeyboardInterrupt):
    """Ctrl-C: the run is stored as 'stopped' and can be resumed by its id."""

    def __init__(self, run_id: str):
        super().__init__(run_id)
        self.run_id = run_id


@dataclass(frozen=True)
class Outcome:
    run_id: str
    reason: str
    exit_code: int
    best: Evaluation | None = None
    best_kernel_id: int | None = None
    written: Path | None = None
    seeded: tuple[int, int] = (0, 0)  # kernels, tasks
    summary: dict = field(default_factory=dict)


def write_drop_in(member: Member, evaluation: Evaluation, task_name: str, run_id: str, out_dir: Path) -> Path:
    """`<task>_kernelevo.py`: the kernel as judged, with where it came from in a leading comment."""
    from datetime import date

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{task_name}_kernelevo.py"
    header = (f"# kernelevo run {run_id}, kernel {member.kernel_id}, {date.today().isoformat()}: "
              f"{speedup_text(evaluation.speedup_eager, evaluation.speedup_eager_ci)} eager, "
              f"{speedup_text(evaluation.speedup_compile, evaluation.speedup_compile_ci)} torch.compile "
              f"on {evaluation.device_name or evaluation.device} (torch {evaluation.torch_version}), "
              f"re-judged in a fresh process (the search measured "
              f"{speedup_text(member.fitness, member.speedup_eager_ci)} eager).\n"
              f"# Drop-in: `from {task_name}_kernelevo import ModelNew` replaces the task's Model.\n")
    header += _shapes_comment(evaluation)
    path.write_text(header + member.source)
    return path


def _shapes_comment(evaluation: Evaluation) -> str:
    """The input shapes the kernel was verified on; for a specialized kernel, loudly, the ones it
    refuses, so that whoever drops it in knows where it does not apply."""
    shapes = evaluation.shapes
    if shapes is None:
        return ""
    checked = "\n".join(f"#   {s}" for s in shapes.supported)
    if shapes.specialized:
        refused = "\n".join(f"#   {s}" for s in shapes.refused)
        return (f"# SPECIALIZED: verified correct only on these input shapes:\n{checked}\n"
                f"# It refuses (raises on) others the reference handles, e.g.:\n{refused}\n")
    if shapes.mode == "exact":
        return f"# Verified on the task's own input shapes only (--shapes exact):\n{checked}\n"
    return f"# Verified correct on these input shapes (the task's and ones the judge derived):\n{checked}\n"


def elapsed_s(events: list[dict], now: float) -> float:
    """Wall time the run has used over all its sessions: each session from its start event to its
    last event (a killed session still counts up to its last recorded event)."""
    total, start, last = 0.0, None, None
    for event in events:
        if event["kind"] == "session_start":
            if start is not None:
                total += last - start
            start = event["at"]
        last = event["at"]
    if start is not None:
        total += max(last, now) - start
    return total
