"""What comes back to the search loop: replies settled and recorded, children judged, admitted,
re-measured and profiled.

A reply's calls are settled with the budget and its kernel (or its failure) stored before it is
judged; a copy is stored but not judged. A would-be new best is judged again in a fresh process
before it is admitted (see the package's docstring); a new island best is profiled. Every judged
child counts towards the generation, whose tick runs migration.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import enum

from kernelevo.agent.client import NotSent, Stop
from kernelevo.agent.replay import ReplayEnded
from kernelevo.evaluation import Evaluation
from kernelevo.text import speedup_text

from .. import islands, scheduling
from ..population import BASELINES, Variant, beats
from ..state import WaitingCall, judged, remeasured
from .flight import Call, Judging
from .shared import Shared
from .stopping import Stopping


class Admission(enum.Enum):
    """What admitting a judged child meant: a new best of its island (beyond the incumbent's noise),
    the first kernel of its niche, or neither. The first two make it (and its parents) stepping stones."""

    ISLAND_BEST = "island best"
    NEW_NICHE = "new niche"
    ADMITTED = "admitted"

    @property
    def improved(self) -> bool:
        return self is not Admission.ADMITTED


def stepping_stone_reason(admission: Admission, member: Variant) -> str:
    """The sentence the archive stores with a stepping stone ('' for none)."""
    if admission is Admission.ISLAND_BEST:
        return f"new best of island {member.lineage.island}: {member.fitness:.2f}x {BASELINES[member.against]}"
    if admission is Admission.NEW_NICHE:
        return f"opened niche {member.lineage.niche}"
    return ""


class Children:
    """What comes back to the search, and what goes to the judge: replies settled with the budget and stored,
    children sent to the judge (`submit`, `resubmit`, `remeasure`) on the least loaded device, and judged
    children admitted, re-measured and profiled.

    Holds the run's shared objects (Shared), the judge and the stopping state (a new best, models gone). Writes
    flight (its calls and judge jobs, popping what is done, and the work per device), stats, progress (verdicts,
    counts, generation), population (admitted and migrated children) and memory (prompts answered, barren
    translations); asks the profiler for a new island best's profile."""

    def __init__(self, shared: Shared, judge, stopping: Stopping) -> None:
        self.shared, self.judge, self.stopping = shared, judge, stopping
        self.state, self.archive, self.settings, self.rng = shared.state, shared.archive, shared.settings, shared.rng
        self.ensemble, self.budget, self.gate, self.on_status = shared.ensemble, shared.budget, shared.gate, \
            shared.on_status
        self.population, self.stats, self.progress = shared.population, shared.stats, shared.progress
        self.flight, self.profiler, self.memory = shared.flight, shared.profiler, shared.memory
        self.baseline_said = False  # the fall back to eager, where torch.compile gives no figure, said once

    def proposal_done(self, future: concurrent.futures.Future) -> None:
        meta = self.flight.calls.pop(future)
        try:
            proposal = future.result()
        except Stop as exc:  # a refused key or request, or a server that is gone: the model drops out
            self._settle(meta)
            if isinstance(exc, ReplayEnded) and exc.written:  # the call a resumed run asks first
                self.state.wait_for(WaitingCall(meta.op, meta.parents, meta.island, meta.format))
            self._drop(meta.model, exc)
            return
        except NotSent as exc:  # an operator with no use for its replies without the refused call
            self._settle(meta)
            self._not_sent(meta, str(exc), None)
            return
        self._settle(meta)
        answered = {c.prompt_hash for c in proposal.calls if c.outcome == "ok" and c.prompt_hash}
        if answered:  # a failed call (a 5xx, a timeout) may be asked again; an answered prompt may not
            self.memory.asked |= answered | {meta.digest}
        call_id = self.state.call_id(proposal.calls[-1]) if proposal.calls else None
        stats = self.stats.get(meta.op, scheduling.OperatorStats())
        self.stats[meta.op] = dataclasses.replace(stats, attempts=stats.attempts + 1,
                                                  cost_usd=stats.cost_usd + (proposal.cost_usd or 0.0))
        if proposal.analysis and call_id is not None:
            self.archive.add_reflection(self.state.run_id, call_id, proposal.analysis, list(meta.parents))
        if not proposal.ok:
            self.memory.barren_translations += meta.op == "translate"
            kernel_id = self.state.add_kernel("", meta.op, meta.parents, meta.island, call_id,
                                              self.shared.generation(), thinking=proposal.thinking,
                                              problem=f"{proposal.outcome}: {proposal.problem}",
                                              account=proposal.account).kernel_id
            self.progress.verdicts[proposal.outcome] += 1
            if proposal.unsent:
                self._not_sent(meta, proposal.unsent, kernel_id)
            return
        seen = self.gate.check(proposal.source)
        if meta.op == "translate" and not seen.novel:
            self.memory.barren_translations += 1
        if not seen.novel:  # an exact or renamed copy; any change to the code is judged
            self.state.add_kernel(proposal.source, meta.op, meta.parents, meta.island, call_id,
                                  self.shared.generation(), thinking=proposal.thinking, problem=seen.problem(),
                                  account=proposal.account)
            self.progress.skipped_copies += 1
            return
        self.submit(meta.op, proposal.source, meta.parents, meta.island, call_id,
                    thinking=proposal.thinking, account=proposal.account)

    def _settle(self, meta: Call) -> None:
        """Count the calls the operation sent (failed ones too, as a resume counts the rows) and
        free the slots it held and did not use; with none sent, release the reservation."""
        calls = meta.llm.calls
        if not calls:
            self.budget.release(meta.reservation)
            return
        costs = [c.cost_usd for c in calls]
        self.budget.settle(meta.reservation, None if None in costs else sum(costs), len(calls))

    def _not_sent(self, meta: Call, why: str, kernel_id: int | None) -> None:
        """A reply paid for that could not be followed up (the budget refused the call): one event
        and one line, so it is not lost without a word."""
        self.archive.add_event(self.state.run_id, "call_not_sent", {
            "operator": meta.op, "model": meta.model, "parents": list(meta.parents),
            "kernel": kernel_id, "reason": why})
        self.on_status(f"{meta.op}: follow-up call not sent, {why}; its reply is kept"
                       + (f" with kernel {kernel_id}" if kernel_id is not None else ""))

    def _drop(self, model: str, exc: Stop) -> None:
        """Take a model out of the ensemble with one line; with none left, a refused key ends the run
        (Stop propagates) and a server that is gone stops it once the judge's work is in."""
        if self.ensemble.drop(model, str(exc)):
            self.archive.add_event(self.state.run_id, "model_dropped", {"model": model, "reason": str(exc)})
            if self.ensemble.active:
                self.on_status(f"model {model} dropped out: {exc}; going on with {', '.join(self.ensemble.active)}")
        if not self.ensemble.active:
            self.stopping.models_gone(exc)

    def submit(self, op: str, source: str, parents: tuple[int, ...], island: int, call_id: int | None,
               thinking: str = "", note: str = "", account: str = "") -> None:
        self.resubmit(self.state.add_kernel(source, op, parents, island, call_id, self.shared.generation(),
                                            thinking=thinking, note=note, account=account))

    def resubmit(self, child: Variant) -> None:
        """Judge a stored child (new, or stored but not judged before the run was killed) on the
        least loaded device."""
        # Known to the gate by fingerprint from now on, not once judged: two concurrent replies with
        # the same kernel must not both reach the GPU (nor count as two parents for crossover).
        self.gate.remember(child.kernel_id, child.source)
        self._to_judge(child, child.lineage.operator)

    def _to_judge(self, child: Variant, op: str, remeasure: bool = False) -> None:
        """Judge the kernel's file (written from the archive, state.kernel_path), the source and format held
        here, on the least loaded device; `remeasure`: `child` is a judged kernel, judged again."""
        path = self.state.kernel_path(child.kernel_id)
        device = min(self.flight.load, key=lambda d: self.flight.load[d])
        self.flight.load[device] += 1
        future = self.judge.submit(self.state.task, path, device, source=child.source, fmt=child.format)
        self.flight.judging[future] = Judging(child, device, op, remeasure)

    def judged(self, future: concurrent.futures.Future) -> None:
        meta = self.flight.judging.pop(future)
        self.flight.load[meta.device] -= 1
        if meta.remeasure:
            return self._remeasured(future, meta)
        evaluation = future.result()
        evaluation_id = self.archive.add_evaluation(meta.kernel_id, evaluation, purpose="search",
                                                    run_id=self.state.run_id)
        member = judged(meta.kernel, evaluation)  # as the rows just written hold it
        self._say_baseline(member, evaluation)
        if meta.op == "translate":
            self.memory.barren_translations = 0 if member.ok else self.memory.barren_translations + 1
        admission = Admission.ADMITTED
        if member.ok and beats(member, self.population.best()):  # admitted once its figure holds again
            self.remeasure(member, meta.op)
        else:
            admission = self._admit(member)
            if admission is Admission.ISLAND_BEST:
                self.profiler.island_best(member, evaluation, evaluation_id)
        stats = self.stats.get(meta.op, scheduling.OperatorStats())
        if meta.op == "tune":
            stats = dataclasses.replace(stats, attempts=stats.attempts + 1)
        self.stats[meta.op] = dataclasses.replace(stats, successes=stats.successes + member.ok,
                                                  improvements=stats.improvements + admission.improved)
        self.progress.verdicts[evaluation.verdict] += 1
        self.progress.judged += 1
        self.progress.judged_this_session += 1
        self._generation_tick()

    def _say_baseline(self, member: Variant, evaluation: Evaluation) -> None:
        """Once: a run asked to beat torch.compile ranks by eager when torch.compile gave no figure."""
        untimed = member.figures.speedup_eager is None  # Triton's interpreter: no figure of either kind
        if self.baseline_said or member.baseline != "compile" or untimed or member.against == "compile":
            return
        self.baseline_said = True
        why = next((n for n in evaluation.notes if "torch.compile" in n), "torch.compile was not measured")
        self.on_status(f"baseline: eager for this run, since torch.compile gave no figure ({why})")
        self.archive.add_event(self.state.run_id, "baseline", {"against": "eager", "why": why})

    def remeasure(self, member: Variant, op: str) -> None:
        """Judge a would-be new best of the run again in a fresh process; it stays out of the
        population (no prompt shows it, no parent is drawn from it) until its figure is in."""
        self._to_judge(member, op, remeasure=True)

    def _remeasured(self, future: concurrent.futures.Future, meta: Judging) -> None:
        """The second figure replaces the first, and the kernel is admitted on it: the new best if it
        still beats the incumbent beyond the noise, else a kernel like any other."""
        first = meta.kernel
        try:
            evaluation = future.result()
        except Exception as exc:  # noqa: BLE001 - a fault of the judge, not the kernel: the first figure stands
            self.on_status(f"kernel {first.kernel_id}: re-measurement failed ({type(exc).__name__}: {exc}); "
                           "its search figure stands")
            evaluation, member = None, first
        else:
            evaluation_id = self.archive.add_evaluation(first.kernel_id, evaluation, purpose="rejudge",
                                                        run_id=self.state.run_id)
            member = remeasured(first, evaluation)
        incumbent = self.population.best()
        admission = self._admit(member)
        best = self.population.best() is member
        self.archive.add_event(self.state.run_id, "remeasure", {
            "kernel": member.kernel_id, "search": first.figures.speedup_eager,
            "search_ci": first.figures.speedup_eager_ci, "verdict": member.figures.verdict,
            "speedup_eager": member.figures.speedup_eager, "ci": member.figures.speedup_eager_ci,
            "against": member.against, "fitness": member.fitness, "fitness_ci": member.fitness_ci,
            "best": best, "incumbent": incumbent.kernel_id if incumbent else None})
        if evaluation is not None and admission is Admission.ISLAND_BEST:
            self.profiler.island_best(member, evaluation, evaluation_id)
        if not best:  # said once: the search's figure was noise (or luck)
            self.on_status(f"kernel {member.kernel_id}: {speedup_text(first.fitness, first.fitness_ci)} in the "
                           f"search, {speedup_text(member.fitness, member.fitness_ci)} re-measured "
                           f"({member.figures.verdict}, over {BASELINES[member.against]}): not the run's new best")
        stats = self.stats.get(meta.op, scheduling.OperatorStats())
        self.stats[meta.op] = dataclasses.replace(stats, improvements=stats.improvements + admission.improved)

    def _admit(self, member: Variant) -> Admission:
        """Add a judged child; mark stepping stones. Returns what its admission meant."""
        best_before = self.population.best()
        island_best = self.population.best(member.lineage.island)
        niche_new = member.ok and member.lineage.niche not in self.population.elites()
        self.population.add(member)
        if member.ok:  # near-copies are skipped only of kernels known to be correct
            self.gate.add_source(member.kernel_id, member.source)
        admission = Admission.ADMITTED
        if member.fitness > 0 and beats(member, island_best):  # inside the incumbent's noise: a tie
            admission = Admission.ISLAND_BEST
        elif niche_new:
            admission = Admission.NEW_NICHE
        if admission.improved:
            reason = stepping_stone_reason(admission, member)
            self.archive.mark_stepping_stone(member.kernel_id, reason)
            for parent in member.lineage.parents:  # the parent led to an improvement
                self.archive.mark_stepping_stone(parent, reason, via=member.kernel_id)
        if beats(member, best_before):  # a tie does not reset the plateau
            self.stopping.improved(self.progress.generation)
        return admission

    def _generation_tick(self) -> None:
        generation = self.shared.generation()
        if generation == self.progress.generation:
            return
        self.progress.generation = generation
        moves = islands.migrate(self.population, self.settings.islands, self.rng, generation)
        for kernel_id, to_island in moves:
            self.population.migrate_in(kernel_id, to_island)
            self.archive.add_event(self.state.run_id, "migration", {"kernel": kernel_id, "to_island": to_island})
        self.archive.add_event(self.state.run_id, "generation", {"generation": generation,
                                                                 "best_eager": self.progress.best_eager})
