"""The search loop: the one place where the agent, the judge and the archive meet.

Steady state rather than lock-step generations: up to `llm_concurrency` operator calls are in
flight while the judge works on the children that came back, so neither the GPUs nor the models
wait for a generation boundary. A generation is `children_per_generation` judged children; it is
what migration, the plateau rule and the display count.

Everything is written to the archive as it happens (LLM calls when their reply arrives, kernels
before they are judged, evaluations when they come back), so a resumed run rebuilds its state
from rows and a kill -9 loses no completed evaluation and no paid reply.

A kernel that would be the new best of the run is judged a second time, in a fresh process, before
it is admitted: prompts show the best as the kernel to beat, and one lucky measurement (a run
offered a 1.78x kernel for ten calls that was 0.66x timed alone) would steer the search for long.
Ties (overlapping intervals) never make a new best: see population.beats.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from kernelevo.agent import operators
from kernelevo.agent.client import LLM, Metered, NotSent, Stop, Unreachable, prompt_hash
from kernelevo.agent.pool import CallPool
from kernelevo.agent.profile_block import profile_block
from kernelevo.agent.prompting import Context, Variant, approach, feedback_from

from kernelevo.archive.rows import by_model
from kernelevo.evaluation import Evaluation, Profile
from kernelevo.terminal.tables import speedup_text

from . import budget as budgets
from . import ensemble as ensembles
from . import attempts, islands, niches, placement, scheduling, selection, tune
from .novelty import NoveltyGate
from .population import Member, Population, beats
from .options import BUDGET_REASONS, OptimizeOptions, SearchSettings
from .outcome import EXIT_BUDGET, EXIT_OK, EXIT_UNREACHABLE, Interrupted, Outcome, Progress, elapsed_s, write_drop_in
from .state import RunState, member_from_row, remeasured


# Translations in a row that brought no new correct kernel (copies, failures) after which an empty
# island is left to migration: a scripted run spent 6 of 9 calls on translations that copied kernel 1.
BARREN_TRANSLATIONS = 2
PROFILE_WAIT_S = 60.0  # the longest a mutate call waits for its parent's profile (ncu took up to 10 s)


class Search:
    """One run of the search on one task; `run()` returns the reason it stopped."""

    def __init__(self, state: RunState, ensemble: ensembles.Ensemble, judge, settings: SearchSettings,
                 budget: budgets.Budget, gate: NoveltyGate, rng: random.Random,
                 on_progress: Callable[[Progress], None] | None = None, on_status: Callable[[str], None] | None = None):
        self.state, self.archive, self.ensemble, self.judge = state, state.archive, ensemble, judge
        self.settings, self.budget, self.gate, self.rng = settings, budget, gate, rng
        self.on_progress = on_progress or (lambda p: None)
        self.on_status = on_status or (lambda text: None)
        self.population: Population = state.population
        self.stats: dict[str, scheduling.OperatorStats] = state.operator_stats()
        self.progress = Progress(judged=state.judged(), run_id=state.run_id)  # from rows once; counted here afterwards
        self.progress.generation = self._generation()
        self.pool = CallPool(settings.llm_concurrency)
        self.llm_futures: dict[concurrent.futures.Future, dict] = {}
        self.judge_futures: dict[concurrent.futures.Future, dict] = {}
        self.profile_futures: dict[concurrent.futures.Future, dict] = {}
        self.profiled: Counter = Counter()  # generation -> profiles started
        self.ncu_generations: set[int] = set()  # generations that ran Nsight Compute
        self.device_load: Counter = Counter({d: 0 for d in judge.options.devices})
        self.improved_at = self.progress.generation  # generation of the last new best (plateau rule)
        self._island_turn = -1
        self.repair_tried: set[int] = state.repair_targets()  # one repair per failure, whatever came of it
        self.unreachable = ""  # why the model server is given up on (stops the run)
        self.crossed = state.crossed()  # parent sets already sent to crossover: the same prompt again
        self.asked = state.archive.answered_prompts(state.run_id)  # hashes of the prompts answered
        self.barren_translations = 0  # translations since the last one judged correct
        self.repeated: set[str] = set()  # prompts not sent because they were answered: counted once each
        self._refresh()

    def _generation(self) -> int:
        return self.progress.judged // max(1, self.settings.children_per_generation)

    # -- planning -----------------------------------------------------------------------------------

    def _plan(self) -> bool:
        """Start one child; False when no operator could start one (three draws) or the budget refuses."""
        return any(self._plan_once() for _ in range(3))

    def _plan_once(self) -> bool:
        """Start one child (an LLM call, or a tune variant straight to the judge)."""
        correct = self.population.correct()
        recent = [m for m in self.population.members[-40:] if m.kernel_id not in self.repair_tried]
        repairable = selection.pick_repair_target(recent, self.rng)
        tunable = any(tune.has_tunables(m.source) for m in correct)
        seeding = {m["island"] for m in [*self.llm_futures.values(), *self.judge_futures.values()]
                   if m["op"] == "translate"}
        seed_island = islands.needing_seed(self.population, self.settings.islands, seeding) \
            if self.barren_translations < BARREN_TRANSLATIONS else None
        op = scheduling.choose_operator(self.stats, bool(correct), selection.approaches(correct), repairable is not None,
                                        tunable, self.rng, translate_ok=seed_island is not None)
        if op == "tune":
            return self._start_tune(correct)
        if not correct and self.judge_futures:
            return False  # no correct kernel yet: the next translation waits for the last one's verdict
        job = self._job(op, correct, repairable, seed_island)
        if job is None:
            return False
        fn, args, parents, island = job
        key = (op, tuple(sorted(parents)))  # same operator, same parents: the same prompt
        if key in self._in_flight() or (op == "translate" and any(m["op"] == "translate"
                                                                  for m in self.llm_futures.values())):
            return False  # a second translation waits to be told what the first one did
        model = self.ensemble.choose(op, self.rng)
        if model is None:  # every model dropped out: the run is ending
            return False
        ctx = self.state.context(island, op)
        chosen = self.ensemble.llm(model)
        digest = prompt_hash(operators.first_prompt(op, ctx, args, chosen.edit_format))
        if digest in self.asked or digest in {m["digest"] for m in self.llm_futures.values()}:
            return self._repeat(op, parents, model, digest)
        s = self.settings
        estimate = self.ensemble.estimate_usd(model, s.prompt_tokens_estimate, s.output_tokens_estimate)
        reservation = self.budget.reserve(estimate)
        if reservation is None:
            return False
        # the first call is reserved here; a follow-up reserves its own slot from the pool thread
        llm = Metered(chosen, lambda: self.budget.extend(reservation, estimate))
        future = self.pool.submit(fn, llm, ctx, *args)
        self.llm_futures[future] = {"op": op, "parents": parents, "island": island, "reservation": reservation,
                                    "key": key, "model": model, "llm": llm, "digest": digest}
        return True

    def _repeat(self, op: str, parents: tuple[int, ...], model: str, digest: str) -> bool:
        """A prompt answered before (or in flight) is not sent again: counted once per prompt (the
        planner may draw it again every half second), and another draw is made."""
        if digest in self.repeated:
            return False
        self.repeated.add(digest)
        self.archive.add_event(self.state.run_id, "prompt_repeat", {"operator": op, "parents": list(parents),
                                                                    "model": model})
        self.progress.repeats_avoided += 1
        return False

    def _in_flight(self) -> set[tuple]:
        return {meta["key"] for meta in self.llm_futures.values()}

    def _job(self, op: str, correct: list[Member], repairable: Member | None, seed_island: int | None):
        """(operator function, its arguments, parent ids, island) of the next call; every kernel the
        prompt asks to change comes with what came of the earlier attempts on it (attempts.py)."""
        island = self._next_island()
        pool = [m for m in correct if m.island == island] or correct
        rows = self.archive.kernels(run_id=self.state.run_id)
        if op == "translate":  # the first kernels, then only to seed an empty or collapsed island
            return operators.translate, (attempts.translations(rows),), (), \
                seed_island if seed_island is not None else island
        if op == "mutate":
            top = selection.fastest_approaches(pool)  # the model's attempts are counted for these only
            tries = {m.kernel_id: attempts.count_on(m.kernel_id, rows) for m in top}
            parent = selection.pick_mutate_parent(top, tries, self.rng)
            self._profile_on_demand(parent)
            variant = self._variant(parent, "A", tried=attempts.on_kernel(parent.kernel_id, rows))
            return self._after_profile(parent.kernel_id), (variant,), (parent.kernel_id,), parent.island
        if op == "crossover":
            parents = selection.pick_crossover_parents(correct, self.rng, avoid=self.crossed)
            if len(parents) < 2:
                return None
            self.crossed.add(frozenset(p.kernel_id for p in parents))
            variants = [self._variant(p, "ABC"[i], notes=self._notes(p, rows),
                                      tried=attempts.on_kernel(p.kernel_id, rows, limit=3))
                        for i, p in enumerate(parents)]
            return operators.crossover, (variants,), tuple(p.kernel_id for p in parents), parents[0].island
        if op == "reflect":
            chosen = selection.pick_reflect_variants(correct, self.rng, self.settings.reflect_k)
            if len(chosen) < 2:
                return None
            variants = [self._variant(m, "ABCDEFGH"[i], notes=self._notes(m, rows),
                                      tried=attempts.on_kernel(m.kernel_id, rows, limit=3) if i == 0 else ())
                        for i, m in enumerate(chosen)]
            return operators.reflect, (variants,), tuple(m.kernel_id for m in chosen), chosen[0].island
        if op == "repair":  # among recent children: the selection checks a failure's parent and repairs
            self.repair_tried.add(repairable.kernel_id)
            evaluation = Evaluation.from_dict(self.archive.kernel(repairable.kernel_id)["evaluations"][-1]["data"])
            return (operators.repair, (self._variant(repairable, "A"), feedback_from(evaluation)),
                    (repairable.kernel_id,), repairable.island)
        return None

    def _after_profile(self, kernel_id: int):
        """operators.mutate, or, while the parent is being profiled, mutate after its profile is in:
        the call waits in its pool thread (seconds), not the loop, and the prompt shows the profile."""
        pending = [f for f, meta in self.profile_futures.items() if meta["kernel_id"] == kernel_id]
        if not pending:
            return operators.mutate

        def mutate(llm: LLM, ctx: Context, parent: Variant):
            try:
                parent = dataclasses.replace(parent, profile=profile_block(pending[0].result(timeout=PROFILE_WAIT_S)))
            except Exception:  # noqa: BLE001 - too slow or failed: the parent goes without its profile
                pass
            return operators.mutate(llm, ctx, parent)

        return mutate

    def _variant(self, m: Member, label: str, notes: str = "", tried: tuple[str, ...] = ()) -> Variant:
        profile = self.state.profile_text(m.kernel_id)
        return Variant(m.source, m.format, label, m.verdict, m.reason, "", m.speedup_eager, m.speedup_compile,
                       m.ms, profile, notes, m.eager_ms, m.kernel_id, tried)

    @staticmethod
    def _notes(m: Member, rows: list[dict]) -> str:
        """How a kernel shown beside others differs: its idea in the model's words, and its approach."""
        idea = attempts.idea_for(m.kernel_id, rows)
        return "\n".join(t for t in (f"Idea: {idea}" if idea else "",
                                      approach(niches.describe(m.source, m.format), m.format)) if t)

    def _next_island(self) -> int:
        self._island_turn = (self._island_turn + 1) % self.settings.islands
        return self._island_turn

    def _start_tune(self, correct: list[Member]) -> bool:
        """A variant of one of the best tunable kernels of an island, within the ranges its own
        `// tune:` marks list; the next of them when one has no untried variant left."""
        tunable = [m for m in correct if tune.has_tunables(m.source)]
        known = [m.source for m in self.population.members]
        for parent in selection.tune_parents(tunable, self.rng):
            # the gate knows every kernel submitted, judged or not: no variant is judged twice
            variants = [v for v in tune.tune_variants(parent.source, self.rng, limit=4, exclude=known)
                        if self.gate.check(v[0]).novel]
            if variants:
                break
        else:
            return False
        source, change = variants[0]
        self._submit_child("tune", source, (parent.kernel_id,), parent.island, None,
                           note=", ".join(f"{k}={v}" for k, v in change.items()))
        return True

    # -- children -----------------------------------------------------------------------------------

    def _proposal_done(self, future: concurrent.futures.Future) -> None:
        meta = self.llm_futures.pop(future)
        try:
            proposal = future.result()
        except Stop as exc:  # a refused key or request, or a server that is gone: the model drops out
            self._settle(meta)
            self._drop(meta["model"], exc)
            return
        except NotSent as exc:  # an operator with no use for its replies without the refused call
            self._settle(meta)
            self._not_sent(meta, str(exc), None)
            return
        self._settle(meta)
        answered = {c.prompt_hash for c in proposal.calls if c.outcome == "ok" and c.prompt_hash}
        if answered:  # a failed call (a 5xx, a timeout) may be asked again; an answered prompt may not
            self.asked |= answered | {meta["digest"]}
        call_id = self.state.call_id(proposal.calls[-1]) if proposal.calls else None
        stats = self.stats.get(meta["op"], scheduling.OperatorStats())
        self.stats[meta["op"]] = dataclasses.replace(stats, attempts=stats.attempts + 1,
                                                     cost_usd=stats.cost_usd + (proposal.cost_usd or 0.0))
        if proposal.analysis and call_id is not None:
            self.archive.add_reflection(self.state.run_id, call_id, proposal.analysis, list(meta["parents"]))
        if not proposal.ok:
            self.barren_translations += meta["op"] == "translate"
            kernel_id = self.state.add_kernel("", meta["op"], meta["parents"], meta["island"], call_id,
                                              self._generation(), thinking=proposal.thinking,
                                              problem=f"{proposal.outcome}: {proposal.problem}",
                                              account=proposal.account)
            self.progress.verdicts[proposal.outcome] += 1
            if proposal.unsent:
                self._not_sent(meta, proposal.unsent, kernel_id)
            return
        seen = self.gate.check(proposal.source)
        if meta["op"] == "translate" and not seen.novel:
            self.barren_translations += 1
        if not seen.novel:  # an exact or renamed copy; any change to the code is judged
            self.state.add_kernel(proposal.source, meta["op"], meta["parents"], meta["island"], call_id,
                                  self._generation(), thinking=proposal.thinking, problem=seen.problem(),
                                  account=proposal.account)
            self.progress.skipped_copies += 1
            return
        self._submit_child(meta["op"], proposal.source, meta["parents"], meta["island"], call_id,
                           thinking=proposal.thinking, account=proposal.account)

    def _settle(self, meta: dict) -> None:
        """Count the calls the operation sent (failed ones too, as a resume counts the rows) and
        free the slots it held and did not use; with none sent, release the reservation."""
        calls = meta["llm"].calls
        if not calls:
            self.budget.release(meta["reservation"])
            return
        costs = [c.cost_usd for c in calls]
        self.budget.settle(meta["reservation"], None if None in costs else sum(costs), len(calls))

    def _not_sent(self, meta: dict, why: str, kernel_id: int | None) -> None:
        """A reply paid for that could not be followed up (the budget refused the call): one event
        and one line, so it is not lost without a word."""
        self.archive.add_event(self.state.run_id, "call_not_sent", {
            "operator": meta["op"], "model": meta["model"], "parents": list(meta["parents"]),
            "kernel": kernel_id, "reason": why})
        self.on_status(f"{meta['op']}: follow-up call not sent, {why}; its reply is kept"
                       + (f" with kernel {kernel_id}" if kernel_id is not None else ""))

    def _drop(self, model: str, exc: Stop) -> None:
        """Take a model out of the ensemble with one line; with none left, a refused key ends the run
        (Stop propagates) and a server that is gone stops it once the judge's work is in."""
        if self.ensemble.drop(model, str(exc)):
            self.archive.add_event(self.state.run_id, "model_dropped", {"model": model, "reason": str(exc)})
            if self.ensemble.active:
                self.on_status(f"model {model} dropped out: {exc}; going on with {', '.join(self.ensemble.active)}")
        if self.ensemble.active:
            return
        if not isinstance(exc, Unreachable):
            raise exc
        self.unreachable = self.unreachable or str(exc)

    def _submit_child(self, op: str, source: str, parents: tuple[int, ...], island: int, call_id: int | None,
                      thinking: str = "", note: str = "", account: str = "") -> None:
        kernel_id = self.state.add_kernel(source, op, parents, island, call_id, self._generation(),
                                          thinking=thinking, note=note, account=account)
        self.resubmit({"id": kernel_id, "source": source, "operator": op, "island": island})

    def _judged(self, future: concurrent.futures.Future) -> None:
        meta = self.judge_futures.pop(future)
        self.device_load[meta["device"]] -= 1
        if "remeasure" in meta:
            return self._remeasured(future, meta)
        evaluation = future.result()
        evaluation_id = self.archive.add_evaluation(meta["kernel_id"], evaluation, purpose="search",
                                                    run_id=self.state.run_id)
        member = member_from_row(self.archive.kernel(meta["kernel_id"]))
        if meta["op"] == "translate":
            self.barren_translations = 0 if member.ok else self.barren_translations + 1
        improved = ""
        if member.ok and beats(member, self.population.best()):  # admitted once its figure holds again
            self.remeasure(member, meta["op"])
        else:
            improved = self._admit(member)
            if improved.startswith("new best"):
                self._profile(member, evaluation, evaluation_id)
        stats = self.stats.get(meta["op"], scheduling.OperatorStats())
        if meta["op"] == "tune":
            stats = dataclasses.replace(stats, attempts=stats.attempts + 1)
        self.stats[meta["op"]] = dataclasses.replace(stats, successes=stats.successes + member.ok,
                                                     improvements=stats.improvements + bool(improved))
        self.progress.verdicts[evaluation.verdict] += 1
        self.progress.judged += 1
        self.progress.judged_this_session += 1
        self._generation_tick()

    def remeasure(self, member: Member, op: str) -> None:
        """Judge a would-be new best of the run again in a fresh process; it stays out of the
        population (no prompt shows it, no parent is drawn from it) until its figure is in."""
        self._to_judge(member.kernel_id, member.source, op, member.island, remeasure=member)

    def _remeasured(self, future: concurrent.futures.Future, meta: dict) -> None:
        """The second figure replaces the first, and the kernel is admitted on it: the new best if it
        still beats the incumbent beyond the noise, else a kernel like any other."""
        first: Member = meta["remeasure"]
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
        improved = self._admit(member)
        best = self.population.best() is member
        self.archive.add_event(self.state.run_id, "remeasure", {
            "kernel": member.kernel_id, "search": first.speedup_eager, "search_ci": first.speedup_eager_ci,
            "verdict": member.verdict, "speedup_eager": member.speedup_eager, "ci": member.speedup_eager_ci,
            "best": best, "incumbent": incumbent.kernel_id if incumbent else None})
        if evaluation is not None and improved.startswith("new best"):
            self._profile(member, evaluation, evaluation_id)
        if not best:  # said once: the search's figure was noise (or luck)
            self.on_status(f"kernel {member.kernel_id}: {speedup_text(first.fitness, first.speedup_eager_ci)} in the "
                           f"search, {speedup_text(member.fitness, member.speedup_eager_ci)} re-measured "
                           f"({member.verdict}): not the run's new best")
        stats = self.stats.get(meta["op"], scheduling.OperatorStats())
        self.stats[meta["op"]] = dataclasses.replace(stats, improvements=stats.improvements + bool(improved))

    def _admit(self, member: Member) -> str:
        """Add a judged child; mark stepping stones. Returns why it matters ('' when it does not)."""
        best_before = self.population.best()
        island_best = self.population.best(member.island)
        niche_new = member.ok and member.niche not in self.population.elites()
        self.population.add(member)
        if member.ok:  # near-copies are skipped only of kernels known to be correct
            self.gate.add_source(member.kernel_id, member.source)
        reason = ""
        if member.fitness > 0 and beats(member, island_best):  # inside the incumbent's noise: a tie
            reason = f"new best of island {member.island}: {member.fitness:.2f}x eager"
        elif niche_new:
            reason = f"opened niche {member.niche}"
        if reason:
            self.archive.mark_stepping_stone(member.kernel_id, reason)
            for parent in member.parents:  # the parent led to an improvement
                self.archive.mark_stepping_stone(parent, reason, via=member.kernel_id)
        if beats(member, best_before):  # a tie does not reset the plateau
            self.improved_at = self.progress.generation
        return reason

    def _profile(self, member: Member, evaluation: Evaluation, evaluation_id: int) -> None:
        """Profile a new island best, at most profile_per_generation a generation: those are the
        kernels mutate and reflect most often start from. Profiling holds the device (H100, starter
        suite: 0.1-0.7 s; judging every child's profile cut throughput from 41 to 28 per minute), and
        Nsight Compute takes 7-9 s more, so it runs only for a new best of the whole run, once a
        generation at most."""
        generation = self.progress.generation
        if self.profiled[generation] >= self.settings.profile_per_generation:
            return
        self.profiled[generation] += 1
        best = self.population.best()
        ncu = self.settings.ncu and best is not None and best.kernel_id == member.kernel_id \
            and generation not in self.ncu_generations
        if ncu:
            self.ncu_generations.add(generation)
        self._start_profile(member.kernel_id, evaluation, evaluation_id, ncu)

    def _start_profile(self, kernel_id: int, evaluation: Evaluation, evaluation_id: int, ncu: bool) -> None:
        self.device_load[evaluation.device] += 1
        future = self.judge.profile(self.state.task, self.state.kernel_path(kernel_id), evaluation, ncu=ncu)
        self.profile_futures[future] = {"kernel_id": kernel_id, "evaluation_id": evaluation_id,
                                        "device": evaluation.device}

    def _profile_on_demand(self, member: Member) -> None:
        """Profile mutate's parent now if it never was: the prompt then shows where its time goes
        (the call waits for it, _after_profile), and a kernel need not have been profiled by chance
        to be chosen. Without Nsight Compute: a tenth of a second to a second of device time."""
        pending = any(meta["kernel_id"] == member.kernel_id for meta in self.profile_futures.values())
        if not self.settings.profile_per_generation or pending or member.kernel_id in self.state.profiles:
            return
        judged = [e for e in self.archive.kernel(member.kernel_id)["evaluations"] if e["verdict"] == "ok"]
        if judged:
            self._start_profile(member.kernel_id, Evaluation.from_dict(judged[-1]["data"]), judged[-1]["id"], False)

    def _profiled(self, future: concurrent.futures.Future) -> None:
        meta = self.profile_futures.pop(future)
        self.device_load[meta["device"]] -= 1
        try:
            profile = future.result()
        except Exception as exc:  # noqa: BLE001 - a profile is advice: the search goes on without it
            profile = Profile(device_name="", notes=(f"profiling failed: {type(exc).__name__}: {exc}"[:300],))
        self.state.set_profile(meta["kernel_id"], meta["evaluation_id"], profile)
        self.archive.add_event(self.state.run_id, "profile", {
            "kernel": meta["kernel_id"], "cost_s": profile.cost_s, "notes": list(profile.notes),
            "sol_pct": profile.sol.candidate_pct if profile.sol else None})

    def _generation_tick(self) -> None:
        generation = self._generation()
        if generation == self.progress.generation:
            return
        self.progress.generation = generation
        moves = islands.migrate(self.population, self.settings.islands, self.rng, generation)
        for kernel_id, to_island in moves:
            self.population.migrate_in(kernel_id, to_island)
            self.archive.add_event(self.state.run_id, "migration", {"kernel": kernel_id, "to_island": to_island})
        self.archive.add_event(self.state.run_id, "generation", {"generation": generation,
                                                                 "best_eager": self.progress.best_eager})

    # -- the loop -----------------------------------------------------------------------------------

    def _refresh(self, reread: bool = True) -> None:
        """Update the display's Progress; `reread`: also the spend and yield, which come from the
        archive's rows and change only when a call or a judgement finished (not every 0.5 s tick)."""
        best = self.population.best()
        p = self.progress
        p.best_eager = best.speedup_eager if best else None
        p.best_compile = best.speedup_compile if best else None
        p.best_eager_ci = best.speedup_eager_ci if best else None
        p.best_compile_ci = best.speedup_compile_ci if best else None
        p.llm_in_flight, p.judging = len(self.llm_futures), len(self.judge_futures)
        p.remeasuring = sum("remeasure" in meta for meta in self.judge_futures.values())
        if not reread:
            return self.on_progress(p)
        spend = self.archive.spend(self.state.run_id)
        p.spend_usd, p.unknown_cost_calls, p.calls = spend["cost_usd"], spend["unknown_cost_calls"], spend["calls"]
        prompt = spend["input_tokens"] + spend["cache_read_tokens"] + spend["cache_write_tokens"]
        p.cache_hit = spend["cache_read_tokens"] / prompt if prompt else None
        calls = self.archive.call_yield(self.state.run_id)
        p.calls_by_operator = {op: row["calls"] for op, row in calls.items() if row["calls"]}
        p.replies, p.replies_judged = (sum(row[k] for row in calls.values()) for k in ("replies", "judged"))
        models = self.archive.model_yield(self.state.run_id)
        self.ensemble.update(models)  # what the next calls' models are chosen by
        p.models, p.dropped = by_model(models, self.ensemble.labels), dict(self.ensemble.dropped)
        self.on_progress(p)

    def _stop_reason(self) -> str | None:
        if self.unreachable:
            return f"model unreachable: {self.unreachable}"
        since = self.progress.generation - self.improved_at
        return self.budget.exhausted(self.progress.generation, since)

    def run(self) -> str:
        """Search until a limit is reached; returns the reason. Ctrl-C propagates (the caller stops)."""
        reason = None
        self.progress.status = "searching"
        while True:
            reason = reason or self._stop_reason()
            if reason is None:
                while len(self.llm_futures) < self.settings.llm_concurrency and len(self.judge_futures) < \
                        2 * len(self.device_load) + 2 and self._plan():
                    pass
            if not self.llm_futures and not self.judge_futures and not self.profile_futures:
                break
            waiting = list(self.llm_futures) + list(self.judge_futures) + list(self.profile_futures)
            done, _ = concurrent.futures.wait(waiting, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                if future in self.llm_futures:
                    self._proposal_done(future)
                elif future in self.profile_futures:
                    self._profiled(future)
                else:
                    self._judged(future)
            if reason:
                self.progress.status = f"finishing: {reason}"
            self._refresh(reread=bool(done))
        self.pool.shutdown(0.0)
        return reason or "nothing left to try"

    def resubmit(self, row: dict) -> None:
        """Judge a stored child (new, or stored but not judged before the run was killed) on the
        least loaded device; its file is written here, the one place a kernel file is written."""
        # Known to the gate by fingerprint from now on, not once judged: two concurrent replies with
        # the same kernel must not both reach the GPU (nor count as two parents for crossover).
        self.gate.remember(row["id"], row["source"])
        self._to_judge(row["id"], row["source"], row["operator"], row.get("island", 0))

    def _to_judge(self, kernel_id: int, source: str, op: str, island: int, **extra) -> None:
        """Write the kernel's file (there already, unless a resumed run lost its folder) and judge it
        on the least loaded device; `extra` goes into the job's bookkeeping."""
        path = self.state.kernel_path(kernel_id)
        path.write_text(source)
        device = min(self.device_load, key=lambda d: self.device_load[d])
        self.device_load[device] += 1
        future = self.judge.submit(self.state.task, path, device)
        self.judge_futures[future] = {"kernel_id": kernel_id, "device": device, "op": op, "island": island, **extra}

    def abandon(self, grace_s: float = 0.0) -> int:
        """Ctrl-C: stop planning, cancel queued calls; returns calls still in flight after `grace_s`."""
        return self.pool.shutdown(grace_s)


def run_config(**values: Any) -> dict:
    """The effective configuration as stored with the run and echoed at start (JSON-friendly)."""
    return {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
            for k, v in values.items()}


# -- a whole run: set up, search, re-judge the best, write it out ---------------------------------------

def final_judgement(search: Search, options: OptimizeOptions, on_status: Callable[[str], None]):
    """The best kernel, then the next fastest two, re-judged in a fresh process; the first that passes
    is announced. The best is the incumbent (population.best_of), not a faster median inside its noise."""
    best = search.population.best()
    others = sorted((m for m in search.population.correct() if best is None or m.kernel_id != best.kernel_id),
                    key=lambda m: -m.fitness)
    for member in ([best] if best else []) + others[:3 - bool(best)]:
        on_status(f"re-judging kernel {member.kernel_id} ({speedup_text(member.fitness, member.speedup_eager_ci)}) "
                  "in a fresh process")
        evaluation = search.judge.evaluate(search.state.task, search.state.kernel_path(member.kernel_id),
                                           options.devices[0], final=True)
        search.archive.add_evaluation(member.kernel_id, evaluation, purpose="final", run_id=search.state.run_id)
        search.archive.add_event(search.state.run_id, "final", {"kernel": member.kernel_id,
                                                                "verdict": evaluation.verdict,
                                                                "speedup_eager": evaluation.speedup_eager})
        if evaluation.ok:
            return member, evaluation
    return None, None


def optimize(options: OptimizeOptions, on_progress: Callable[[Progress], None] | None = None,
             on_status: Callable[[str], None] = lambda text: None) -> Outcome:
    """A whole run. Raises agent.client.Stop (bad key or request), tasks.TaskError, ValueError on
    bad options; KeyboardInterrupt leaves the run 'stopped' and resumable."""
    from kernelevo.agent.prompting import task_view
    from kernelevo.archive.store import Archive
    from kernelevo.judge.api import Judge, JudgeOptions

    from kernelevo.config import load_config
    from kernelevo.tasks import load_task

    from .novelty import default_embedder

    task = load_task(options.task_path)
    config = load_config(options.config_path)
    names, pins = _model_names(options, on_status)
    tokens = (options.settings.prompt_tokens_estimate, options.settings.output_tokens_estimate)
    ensemble = ensembles.build(config, names, pins, tokens, on_status)  # its calls are recorded once the run exists
    archive = Archive.open(options.archive_path)
    try:
        task_id, run_id, seed, fmt = _open_run(archive, task, options, ensemble, (names, pins))
        embedder = default_embedder(config.embed_model())
        on_status(f"embedder: {embedder.why}")
        stones, seeded = _stepping_stones(archive, task, task_id, embedder, options, on_status)
        ctx = Context(task_view(task), placement.target(options, fmt), inspirations=stones)
        state = RunState(archive, run_id, task, task_id, ctx, Path(options.archive_path).parent / "runs" / run_id, fmt)
        ensemble.set_on_call(state.record_call)
        on_status(f"run {run_id}" + (" (resumed)" if options.resume else "") + f"; kernels in {state.run_dir}")
        archive.add_event(run_id, "session_start", {"resume": bool(options.resume), "seeded": list(seeded),
                                                    "models": ensemble.active, "model_for": ensemble.pins})
        for model, why in ensemble.dropped.items():
            archive.add_event(run_id, "model_dropped", {"model": model, "reason": why})
        budget = budgets.Budget(options.limits)
        spend = archive.spend(run_id)
        budget.restore(spend["cost_usd"], spend["calls"], elapsed_s(archive.events(run_id), time.time()))
        gate = NoveltyGate(embedder)
        for member in state.population.members:  # children left unjudged join it when resubmitted
            if member.ok:
                gate.add_source(member.kernel_id, member.source)
            else:
                gate.remember(member.kernel_id, member.source)
        # One spare worker per device: a started worker waits while another runs, so the device does
        # not wait for Python and torch to import (the search always has the next child ready).
        judge_options = JudgeOptions(devices=options.devices, policy=options.policy, trials=options.trials,
                                     seed=seed, compile_baseline=options.compile_baseline, spares=1,
                                     shapes=options.shapes, executor=options.executor,
                                     ray_address=options.ray_address,
                                     **({"timing": options.timing} if options.timing else {}))
        with Judge(options.cache_dir, judge_options) as judge:
            rng = random.Random(f"{seed}:{state.judged()}")  # a resumed run does not replay its draws
            search = Search(state, ensemble, judge, options.settings, budget, gate, rng, on_progress, on_status)
            for row in state.unjudged():  # stored before a kill, never judged
                search.resubmit(row)
            if state.unconfirmed is not None:  # a new best whose re-measurement a kill cut off
                gate.remember(state.unconfirmed.kernel_id, state.unconfirmed.source)
                search.remeasure(state.unconfirmed, state.unconfirmed.operator)
            try:
                reason = search.run()
            except KeyboardInterrupt:
                search.abandon(0.0)
                archive.add_event(run_id, "stopped", {"by": "ctrl-c"})
                archive.finish_run(run_id, "stopped", "interrupted (Ctrl-C)")
                raise Interrupted(run_id) from None
            member, final = final_judgement(search, options, on_status)
        written = write_drop_in(member, final, task.name, run_id, options.out_dir) if final else None
        budget_hit, unreachable = reason.startswith(BUDGET_REASONS), bool(search.unreachable)
        archive.finish_run(run_id, "stopped" if unreachable else "budget" if budget_hit else "finished", reason)
        archive.add_event(run_id, "finished", {"reason": reason, "written": str(written) if written else None})
        code = EXIT_UNREACHABLE if unreachable else EXIT_BUDGET if budget_hit else EXIT_OK
        return Outcome(run_id, reason, code, final, member.kernel_id if member else None, written, seeded,
                       {"spend": archive.spend(run_id), "counts": archive.counts(run_id),
                        "calls": archive.call_yield(run_id),
                        "models": by_model(archive.model_yield(run_id), ensemble.labels),
                        "dropped": dict(ensemble.dropped),
                        "search_speedups": (member.speedup_eager, member.speedup_compile) if member else None,
                        "search_intervals": (member.speedup_eager_ci, member.speedup_compile_ci) if member else None})
    finally:
        archive.close()


def _model_names(options: OptimizeOptions, on_status: Callable[[str], None] = lambda text: None
                 ) -> tuple[list[str], dict[str, str]]:
    """The run's models and operator pins: the options', else (resuming) the ones the run had."""
    names, pins = list(options.models), dict(options.model_for or ())
    if options.resume and (not names or options.model_for is None):
        from kernelevo.archive.store import Archive

        with Archive.open_readonly(options.archive_path) as archive:
            run = archive.run(options.resume)
        stored = ensembles.given_or_stored(options.models, options.model_for, (run or {}).get("config") or {})
        names, pins = list(stored[0]), dict(stored[1])
        pinned = ", ".join(f"{op} -> {m}" for op, m in pins.items())
        on_status(f"models of run {options.resume}: {', '.join(names)}" + (f" ({pinned})" if pinned else ""))
    if not names:
        raise ValueError("no model to call: pass --model (or set ensemble = [...] in kernelevo.toml)")
    return names, pins


def _open_run(archive, task, options: OptimizeOptions, ensemble: ensembles.Ensemble,
              given: tuple[list[str], dict[str, str]]) -> tuple[int, str, int, str]:
    """(task id, run id, seed, format) of a new run, or of the run being resumed (same task required).
    The run stores its models as `given` (names a resume can find again) and by label for display."""
    task_id = archive.add_task(task.name, task.source, task.source_hash)
    fmt = options.fmt or ("c" if options.devices[0] == "cpu" else "nvrtc")
    if options.resume:
        run = archive.run(options.resume)
        if run is None:
            raise ValueError(f"--resume {options.resume}: no such run in {options.archive_path}; "
                             "`kernelevo archive ls runs` lists them")
        if run["task_id"] != task_id:
            raise ValueError(f"--resume {options.resume}: that run is for another task (or this task file changed)")
        archive.set_run_status(options.resume, "running")
        return task_id, options.resume, run["seed"], run["config"].get("format", fmt)
    gpu, torch_version, cuda_version = placement.label(options)
    config = run_config(task=options.task_path, model=", ".join(ensemble.labels), models=given[0],
                        model_for=given[1], devices=options.devices, format=fmt,
                        policy=options.policy, trials=options.trials, shapes=options.shapes, seed=options.seed,
                        limits=dataclasses.asdict(options.limits), search=dataclasses.asdict(options.settings),
                        seed_from=options.seed_from, executor=options.executor)
    run_id = archive.start_run(task_id, config, options.seed, ",".join(options.devices), gpu,
                               torch_version, cuda_version)
    return task_id, run_id, options.seed, fmt


def _stepping_stones(archive, task, task_id: int, embedder, options: OptimizeOptions,
                     on_status) -> tuple[tuple[Variant, ...], tuple[int, int]]:
    """Kernels earlier runs marked as stepping stones: this task first (this archive and --seed-from
    files, matched by source hash), then similar tasks by embedding."""
    from kernelevo.archive.store import Archive

    from .state import inspirations

    rows = [r for r in archive.stepping_stones(task_hash=task.source_hash) if r.get("run_id") != options.resume]
    for path in options.seed_from:
        with Archive.open_readonly(path) as other:
            rows += other.stepping_stones(task_hash=task.source_hash)
    if len(rows) < 3:
        vector = embedder.embed([task.source])[0]
        archive.put_embedding("task", task_id, embedder.name, vector, task.source_hash)
        similar = [tid for tid, score in archive.similar_tasks(vector, embedder.name, exclude_task_id=task_id)
                   if score > 0.8]
        if similar:
            rows += archive.stepping_stones(task_ids=similar)
    chosen = inspirations(rows)
    tasks = {r.get("task_id") for r in rows if r.get("source") in {v.source for v in chosen}}
    if chosen:
        on_status(f"seeded from {len(chosen)} kernels of {len(tasks)} tasks")
    return chosen, (len(chosen), len(tasks))
