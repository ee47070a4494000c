"""A run's state as the archive holds it: rebuilt from rows on resume, never kept in a counter file.

RunState is the loop's window on one run: the task, the population, the prompt context, and the
writes the loop makes (kernels are written to the archive before they are judged).
"""
from __future__ import annotations

import dataclasses
import math
import threading
from pathlib import Path

from kernelevo.agent.profile_block import profile_block
from kernelevo.agent.prompting import Context, insight
from kernelevo.archive.records import EvaluationRecord, KernelRecord
from kernelevo.archive.rows import unique
from kernelevo.evaluation import Evaluation, Figures, Lineage, Profile, Shown, Verdict
from kernelevo.llm_call import LLMCall
from kernelevo.tasks import Task
from kernelevo.twins import host_share

from . import niches, scheduling
from .population import Variant, Population, best_of

INSIGHTS = 2  # analyses shown in a prompt: the latest of each island, newest first


def judged(kernel: Variant, evaluation: Evaluation) -> Variant:
    """A stored kernel (RunState.add_kernel, or unjudged) with its search evaluation, built from what the
    loop holds: the same figures member_from_row reads back from the rows add_evaluation writes."""
    return remeasured(kernel, evaluation, stored=True)


def member_from_row(row: KernelRecord, baseline: str = "eager") -> Variant:
    """A Variant from an archive kernel (with its latest search evaluation), ranked against `baseline`."""
    ci, compile_ci = row.speedup_eager_ci, row.speedup_compile_ci
    figures = Figures(verdict=row.verdict or "", reason=row.reason or "",
                      speedup_eager=row.speedup_eager, speedup_compile=row.speedup_compile,
                      speedup_eager_ci=tuple(ci) if ci else None, speedup_compile_ci=tuple(compile_ci) if compile_ci else None,
                      ms=row.candidate_ms, eager_ms=row.eager_ms, loop_ms=row.loop_ms,
                      host_share=host_share(row.loop_device_ms, row.loop_ms))
    lineage = Lineage(operator=row.operator, parents=tuple(row.parents), island=row.island or 0,
                      generation=row.generation or 0, niche=row.niche or "")
    return Variant(row.source, row.format or "", row.id, figures, lineage, baseline=baseline)


def remeasured(member: Variant, evaluation: Evaluation, stored: bool = False) -> Variant:
    """The member with a re-measurement's figures in place of the search's: what selection then uses.
    `stored`: the speedups as an archive row holds them (an infinite one is None)."""
    return dataclasses.replace(member, figures=figures_of(evaluation, stored))


def figures_of(evaluation: Evaluation, stored: bool = False) -> Figures:
    """A search's figures of a kernel from its evaluation; `stored`: as an archive row holds them (an infinite speedup
    is None)."""
    figures = Figures.of(evaluation)
    if not stored:
        return figures
    return dataclasses.replace(figures, speedup_eager=_finite(figures.speedup_eager),
                               speedup_compile=_finite(figures.speedup_compile),
                               speedup_eager_ci=_finite_ci(figures.speedup_eager_ci),
                               speedup_compile_ci=_finite_ci(figures.speedup_compile_ci))


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None  # as archive.rows stores a speedup


def _finite_ci(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    low, high = (_finite(x) for x in ci) if ci else (None, None)
    return (low, high) if low is not None and high is not None else None


def resumed_members(rows: list[KernelRecord], remeasures: dict[int, EvaluationRecord],
                    baseline: str = "eager") -> tuple[list[Variant], Variant | None]:
    """The judged members of a run's rows, each passing one with its latest re-measurement's figures
    where it has one (the loop re-measures only kernels that passed), in the order their figures
    were stored (the order the live run admitted them, which decides who is the incumbent best);
    and apart, the best if it was never re-measured (a run killed while its re-measurement was
    pending): it must be re-measured before it is shown."""
    judged = [row.with_evaluation(remeasures[row.id]) if row.verdict == Verdict.OK and row.id in remeasures else row
              for row in rows if row.verdict]
    judged.sort(key=lambda row: row.evaluation_id or 0)
    members = [member_from_row(row, baseline) for row in judged]
    best = best_of(members)
    if best is None or best.kernel_id in remeasures:
        return members, None
    return [m for m in members if m.kernel_id != best.kernel_id], best


@dataclasses.dataclass(frozen=True)
class WaitingCall:
    """The call a replay stopped at, its prompt written out for an answer: a resumed run asks it first
    (loop/planning.py), with the same parents, so the answer is served to the call it was written for.
    Planned afresh, a resumed search drew another operator (issue 52's third round: 40_LayerNorm's answered
    mutation went unserved, a crossover asked instead)."""

    op: str
    parents: tuple[int, ...]
    island: int
    format: str
    calls: int = 0  # the run's calls when it waited: a call made since has answered it


class RunState:
    def __init__(self, archive, run_id: str, task: Task, task_id: int, context: Context, run_dir: Path,
                 formats: tuple[str, ...], baseline: str = "eager"):
        self.archive, self.run_id, self.task, self.task_id = archive, run_id, task, task_id
        self.baseline = baseline  # what fitness is a speedup over: "compile" or "eager" (Variant.against)
        self.base_context, self.run_dir = context, Path(run_dir)
        self.formats = formats  # the formats calls ask for; island i's is formats[i % len(formats)]
        (self.run_dir / "kernels").mkdir(parents=True, exist_ok=True)
        self._call_ids: dict[int, int] = {}
        self._lock = threading.Lock()
        self._rows_at_start = archive.kernels(run_id=run_id)  # read once: population, stats, leftovers
        self.profiles = archive.profiles(run_id)
        # judged children only; unjudged ones are re-judged by the caller, and so is an unconfirmed best
        members, self.unconfirmed = resumed_members(self._rows_at_start, archive.remeasurements(run_id), baseline)
        self.population = Population(members)

    # -- records ------------------------------------------------------------------------------------

    def record_call(self, call: LLMCall) -> None:
        """on_call of the LLM client: the reply is stored the moment it arrives (any thread)."""
        call_id = self.archive.add_llm_call(self.run_id, call)
        with self._lock:
            self._call_ids[id(call)] = call_id

    def call_id(self, call: LLMCall) -> int | None:
        with self._lock:
            return self._call_ids.get(id(call))

    def add_kernel(self, source: str, operator: str, parents: tuple[int, ...], island: int,
                   call_id: int | None, generation: int, thinking: str = "", problem: str = "",
                   note: str = "", account: str = "") -> Variant:
        """Store a child (or an operator outcome without one, whose source is ''); returns it as stored,
        not judged yet (its verdict is ''), its format detected once here."""
        from kernelevo.formats import detect_format

        fmt, descriptors, niche = "", None, ""
        if source:
            try:
                fmt = detect_format(source)
            except (SyntaxError, ValueError):
                fmt = "unknown"
            descriptors = niches.describe(source, fmt)
            niche = niches.niche_key(descriptors)
        kernel_id = self.archive.add_kernel(
            self.task_id, source, fmt, operator, run_id=self.run_id, parents=parents, llm_call_id=call_id,
            generation=generation, island=island, origin="run", descriptors=descriptors,
            niche=niche, thinking=thinking or note, problem=problem,  # tune children: the change, as their "thinking"
            account=account)
        return Variant(source, fmt, kernel_id, Figures(verdict=""),
                       Lineage(operator, tuple(unique(parents)), island, generation, niche), baseline=self.baseline)

    def kernel_path(self, kernel_id: int) -> Path:
        """Where a kernel's source is written for the judge. A resumed run whose folder is gone (another
        machine, the folder deleted) has it written again from the archive, which holds every source: a
        final re-judgement or a profile of a kernel judged in an earlier session reads it from here."""
        path = self.run_dir / "kernels" / f"k{kernel_id}.py"
        if not path.exists():
            row = self.archive.kernel(kernel_id)
            if row and row.source:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(row.source)
        return path

    def wait_for(self, call: WaitingCall) -> None:
        """Store the call a replay stopped at (a 'waits_for' event), with the run's calls so far."""
        data = {**dataclasses.asdict(call), "calls": self.archive.spend(self.run_id).calls}
        self.archive.add_event(self.run_id, "waits_for", data)

    def waiting_call(self) -> WaitingCall | None:
        """The call the run waited at when it stopped, if no call was made since (it is still unanswered)."""
        events = self.archive.events(self.run_id, kind="waits_for")
        if not events:
            return None
        data = events[-1].data
        if data["calls"] != self.archive.spend(self.run_id).calls:
            return None
        return WaitingCall(data["op"], tuple(data["parents"]), data["island"], data["format"], data["calls"])

    # -- derived counters ---------------------------------------------------------------------------

    def judged(self) -> int:
        return self.archive.counts(self.run_id).evaluations

    def crossed(self) -> set[frozenset]:
        """Parent sets crossover was called on before this session (whatever came of each call)."""
        return {frozenset(r.parents) for r in self._rows_at_start if r.operator == "crossover"}

    def unjudged(self) -> list[Variant]:
        """Children stored but never judged (the run was killed while they waited): judge them first."""
        return [member_from_row(r, self.baseline) for r in self._rows_at_start
                if r.source and not r.verdict and not r.problem]

    def repair_targets(self) -> set[int]:
        """Kernels a repair was already asked for (judged or not), from the run's rows."""
        return {p for r in self._rows_at_start if r.operator == "repair" for p in r.parents}

    def operator_stats(self) -> dict[str, scheduling.OperatorStats]:
        """Per-operator attempts, successes, improvements and spend, derived from the run's rows."""
        stats: dict[str, scheduling.OperatorStats] = {}
        for row in self._rows_at_start:
            s = stats.get(row.operator, scheduling.OperatorStats())
            stats[row.operator] = s.record(row.verdict == Verdict.OK, row.own_improvement)
        for op, cost in self.archive.operator_costs(self.run_id).items():
            s = stats.get(op, scheduling.OperatorStats())
            stats[op] = dataclasses.replace(s, cost_usd=cost)
        return stats

    # -- prompts ------------------------------------------------------------------------------------

    def island_format(self, island: int) -> str:
        """The format an island's kernels are asked in (with --format auto, islands alternate)."""
        return self.formats[island % len(self.formats)]

    def context(self, island: int | None = None, operator: str = "", fmt: str = "") -> Context:
        """The prompt context: the run's fixed prefix, plus what reflection found: the latest analysis
        of each island (an analysis is knowledge, not a transcript: one that a later reflect on the
        same island replaced is not shown), newest first, at most INSIGHTS. A reflect prompt leaves
        out its own island's, which the model wrote in that island's previous reflect. `fmt`: the
        format the call asks for (the run's first, unless given)."""
        speedups = {m.kernel_id: m.figures.speedup_eager for m in self.population.members}
        where = {m.kernel_id: m.lineage.island for m in self.population.members}
        latest = {}
        for r in self.archive.reflections(run_id=self.run_id):  # oldest first: the newest of an island wins
            latest[where.get((r.variant_ids or [None])[0], 0)] = r
        shown = sorted(((i, r) for i, r in latest.items() if not (operator == "reflect" and i == island)),
                       key=lambda item: -item[1].id)[:INSIGHTS]
        analyses = [insight(r.analysis, [(k, speedups.get(k)) for k in r.variant_ids]) for _, r in shown]
        target = dataclasses.replace(self.base_context.target, format=fmt or self.formats[0])
        return dataclasses.replace(self.base_context, target=target, insights=tuple(analyses))

    def profile_text(self, kernel_id: int) -> str:
        """The condensed profile of a kernel for prompts ("" when it was not profiled)."""
        profile = self.profiles.get(kernel_id)
        return profile_block(profile) if profile else ""

    def set_profile(self, kernel_id: int, evaluation_id: int, profile: Profile) -> None:
        self.archive.set_profile(evaluation_id, profile.to_dict())
        self.profiles[kernel_id] = profile


def inspirations(rows: list[KernelRecord], limit: int = 3) -> tuple[Variant, ...]:
    """Stepping stones of earlier runs (or other archives) as prompt variants, best first."""
    chosen = sorted((r for r in rows if r.source), key=lambda r: -(r.speedup_eager or 0.0))[:limit]
    return tuple(Variant(r.source, r.format or "",
                         figures=Figures(speedup_eager=r.speedup_eager, speedup_compile=r.speedup_compile,
                                         ms=r.candidate_ms, eager_ms=r.eager_ms),
                         shown=Shown(label=f"S{i + 1}"))
                 for i, r in enumerate(chosen))
