"""What a search gives back: its progress as the display shows it, Ctrl-C, the outcome of a run and
its exit codes, the drop-in file of the best kernel, and the small pure helpers around them (no room
is called from here: the loop coordinates). What a search is asked to do is in options.py."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kernelevo.evaluation import Evaluation
from kernelevo.archive.records import Counts, Spend
from kernelevo.text import graph_text, loop_text, speedup_text

from .population import BASELINES, Variant

EXIT_OK, EXIT_BUDGET, EXIT_UNREACHABLE = 0, 3, 4  # 4: the model server stopped answering
EXIT_LEFT = 5  # torch.compile already near the speed of light: nothing spent (--force searches anyway)


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
    replayed: int = 0  # of the calls, those answered from a recording (agent/replay.py), at no cost
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
    formats: list = field(default_factory=list)  # per format asked for (several: --format auto): archive.rows.by_format
    dropped: dict = field(default_factory=dict)  # model -> why it dropped out
    status: str = "starting"
    run_id: str = ""

    @property
    def per_minute(self) -> float:
        minutes = (time.monotonic() - self.started) / 60
        return self.judged_this_session / minutes if minutes > 0 else 0.0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C: the run is stored as 'stopped' and can be resumed by its id."""

    def __init__(self, run_id: str):
        super().__init__(run_id)
        self.run_id = run_id


@dataclass(frozen=True)
class BoundUsed:
    """The speed of light a run had: its time, where its peaks came from, and why it was not used ("": it was)."""

    bound_ms: float
    source: str  # "calibrated peaks", or the task's own measured peaks
    unreliable: str = ""


@dataclass(frozen=True)
class RunSummary:
    """A run summed up at its end, for its summary table: the archive's counters of the run (spend: cost, calls,
    unknown-cost calls, replayed; counts: evaluations and verdicts; calls: per operator, archive.call_yield;
    models and formats: per model and format asked), the models dropped and replays served, the speed of light
    it had, what its kernels were ranked against, and its best's figures in the search (eager, torch.compile)."""

    spend: Spend = field(default_factory=Spend)
    counts: Counts = field(default_factory=Counts)
    calls: dict = field(default_factory=dict)  # operator -> OperatorYield
    models: tuple[dict, ...] = ()
    formats: tuple[dict, ...] = ()
    dropped: dict = field(default_factory=dict)  # model -> why it dropped out
    replays: dict = field(default_factory=dict)  # replaying model -> what it served
    bound: BoundUsed | None = None
    baseline: str = ""  # "compile" or "eager"
    search_speedups: tuple[float | None, float | None] | None = None
    search_intervals: tuple | None = None


@dataclass(frozen=True)
class Outcome:
    run_id: str
    reason: str
    exit_code: int
    best: Evaluation | None = None
    best_kernel_id: int | None = None
    written: Path | None = None
    seeded: tuple[int, int] = (0, 0)  # kernels, tasks
    waiting: bool = False  # stopped for a reply: a replay's recording ended; answer its prompt, then --resume
    summary: RunSummary = field(default_factory=RunSummary)


def write_drop_in(member: Variant, evaluation: Evaluation, task_name: str, run_id: str, out_dir: Path) -> Path:
    """`<task>_kernelevo.py`: the kernel as judged, with where it came from in a leading comment."""
    from datetime import date

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{task_name}_kernelevo.py"
    header = (f"# kernelevo run {run_id}, kernel {member.kernel_id}, {date.today().isoformat()}: "
              f"{speedup_text(evaluation.speedup_eager, evaluation.speedup_eager_ci)} eager, "
              f"{speedup_text(evaluation.speedup_compile, evaluation.speedup_compile_ci)} torch.compile "
              f"on {evaluation.device_name or evaluation.device} (torch {evaluation.torch_version}), "
              f"re-judged in a fresh process (the search, which ranked kernels against {BASELINES[member.against]}, "
              f"measured {speedup_text(member.fitness, member.fitness_ci)} {BASELINES[member.against]}).\n"
              f"# Drop-in: `from {task_name}_kernelevo import ModelNew` replaces the task's Model.\n"
              f"# Format: {evaluation.format or member.format}"
              + (" (needs the triton package where it runs; CUDA builds of torch bring it)"
                 if (evaluation.format or member.format) == "triton" else "") + "\n")
    if evaluation.loop:  # the figures above are device time; a loop of calls pays the host's work too
        header += f"# In a loop, host work included: {loop_text(evaluation.loop)}.\n"
    if evaluation.graph:  # and inside a model's CUDA graph (reduce-overhead), where launch gaps are gone
        header += f"# In a CUDA graph: {graph_text(evaluation.graph)}.\n"
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


def elapsed_s(events: list, now: float) -> float:
    """Wall time the run has used over all its sessions: each session from its start event to its
    last event (a killed session still counts up to its last recorded event)."""
    total, start, last = 0.0, None, None
    for event in events:
        if event.kind == "session_start":
            if start is not None:
                total += last - start
            start = event.at
        last = event.at
    if start is not None:
        total += max(last, now) - start
    return total
