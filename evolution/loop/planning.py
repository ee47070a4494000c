"""Planning, the first phase of the search loop: which child to start next and with what prompt.

An operator is drawn (scheduling), its parents chosen (selection), and its prompt built with what
came of earlier attempts on them (attempts); the call goes to the pool, or a tune variant straight
to the judge. A prompt answered before is not sent again, and the budget reserves each call first.
"""
from __future__ import annotations

import dataclasses

from kernelevo.agent import operators
from kernelevo.agent.client import LLM, Metered, prompt_hash
from kernelevo.agent.pool import CallPool
from kernelevo.agent.profile_block import FAR, profile_block
from kernelevo.agent.prompting import Context, approach, feedback_from
from kernelevo.archive.records import KernelRecord
from kernelevo.evaluation import Shown

from .. import attempts, islands, niches, scheduling, selection, tune
from ..population import Variant
from .children import Children
from .flight import Call
from .shared import Shared
from .turns import Turns


# Translations in a row that brought no new correct kernel (copies, failures) after which an empty
# island is left to migration: a scripted run spent 6 of 9 calls on translations that copied kernel 1.
BARREN_TRANSLATIONS = 2
PROFILE_WAIT_S = 60.0  # the longest a mutate call waits for its parent's profile (ncu took up to 10 s)


class Planning:
    """Which child the search starts next, and with what prompt.

    Holds the run's shared objects (Shared), the call pool, the turns (the next island and format: turns.py) and
    the intake (children.py), which a tune variant goes to straight. Writes flight.calls (a started call and its
    bookkeeping), memory (what was asked and tried: memory.py) and progress.repeats_avoided; asks the profiler
    for the profiles of the kernels a prompt shows."""

    def __init__(self, shared: Shared, pool: CallPool, turns: Turns, children: Children) -> None:
        self.pool, self.turns, self.children = pool, turns, children
        self.state, self.archive, self.settings, self.rng = shared.state, shared.archive, shared.settings, shared.rng
        self.ensemble, self.budget, self.gate = shared.ensemble, shared.budget, shared.gate
        self.population, self.stats, self.progress = shared.population, shared.stats, shared.progress
        self.flight, self.profiler, self.memory = shared.flight, shared.profiler, shared.memory

    def plan(self) -> bool:
        """Start one child; False when no operator could start one (three draws) or the budget refuses."""
        return any(self._plan_once() for _ in range(3))

    def _plan_once(self) -> bool:
        """Start one child (an LLM call, or a tune variant straight to the judge)."""
        waiting = self._waiting_job()
        if waiting is not None:
            return self._start_call(*waiting, None)
        correct = self.population.correct()
        recent = [m for m in self.population.members[-40:] if m.kernel_id not in self.memory.repair_tried]
        repairable = selection.pick_repair_target(recent, self.rng)
        tunable = any(_tunable(m, self.state.profiles) for m in correct)
        seeding = {m.island for m in [*self.flight.calls.values(), *self.flight.judging.values()]
                   if m.op == "translate"}
        seed_island = islands.needing_seed(self.population, self.settings.islands, seeding) \
            if self.memory.barren_translations < BARREN_TRANSLATIONS else None
        op = scheduling.choose_operator(self.stats, bool(correct), selection.approaches(correct), repairable is not None,
                                        tunable, self.rng, translate_ok=seed_island is not None)
        untried = self.turns.untried()
        if op != "repair" and untried:  # --format auto: each format's islands are seeded before the draws begin
            homes = [h for h in (self._needing_seed(f, seeding) for f in untried) if h is not None]
            if homes:  # whatever earlier translations in other formats did
                op, seed_island = "translate", homes[0]
        if op == "tune":
            return self._start_tune(correct)
        if not correct and self.flight.judging:
            return False  # no correct kernel yet: the next translation waits for the last one's verdict
        model = self._choose_format(op) if len(self.state.formats) > 1 else None
        if model == "":  # every model dropped out: the run is ending
            return False
        job = self._job(op, correct, repairable, seed_island)
        if job is None:
            return False
        return self._start_call(op, job, self._write_format(op, job[2], job[3]), model)

    def _start_call(self, op: str, job: tuple, fmt: str, model: str | None) -> bool:
        """Send the call `job` plans (its operator function, arguments, parent ids and island), in `fmt`, to
        `model` (None: one the ensemble draws); False where it is in flight, answered before, or refused."""
        fn, args, parents, island = job
        key = (op, tuple(sorted(parents)))  # same operator, same parents: the same prompt
        if key in self._in_flight() or (op == "translate" and any(m.op == "translate"
                                                                  for m in self.flight.calls.values())):
            return False  # a second translation waits to be told what the first one did
        model = model or self.ensemble.choose(op, self.rng)
        if model is None:  # every model dropped out: the run is ending
            return False
        ctx = self.state.context(island, op, fmt)
        chosen = self.ensemble.llm(model)
        digest = prompt_hash(operators.first_prompt(op, ctx, args, chosen.edit_format))
        if digest in self.memory.asked or digest in {m.digest for m in self.flight.calls.values()}:
            return self._repeat(op, parents, model, digest)
        s = self.settings
        estimate = self.ensemble.estimate_usd(model, s.prompt_tokens_estimate, s.output_tokens_estimate)
        reservation = self.budget.reserve(estimate)
        if reservation is None:
            return False
        # the first call is reserved here; a follow-up reserves its own slot from the pool thread
        llm = Metered(chosen, lambda: self.budget.extend(reservation, estimate), fmt)
        future = self.pool.submit(fn, llm, ctx, *args)
        self.flight.calls[future] = Call(op, parents, island, reservation, key, model, llm, digest, fmt)
        self.turns.asked.add(fmt)
        return True

    def _choose_format(self, op: str) -> str:
        """With several formats (--format auto): the model of the next call first, then the format it
        is asked in (turns.py); the format's islands take the call. Returns the model ("" when every model
        dropped out)."""
        model = self.ensemble.choose(op, self.rng)
        if model is None:
            return ""
        self.turns.draw_format(model, self.rng)  # its rows were refreshed when a call or a verdict came in
        return model

    def _write_format(self, op: str, parents: tuple[int, ...], island: int) -> str:
        """The format a call asks for: a mutation or repair keeps its parent's, any other call writes
        its island's (a crossover may combine kernels of several formats; it writes one)."""
        parent = self.population.get(parents[0]) if parents and op in ("mutate", "repair") else None
        if parent is not None and parent.format in self.state.formats:
            return parent.format
        return self.state.island_format(island)

    def _repeat(self, op: str, parents: tuple[int, ...], model: str, digest: str) -> bool:
        """A prompt answered before (or in flight) is not sent again: counted once per prompt (the
        planner may draw it again every half second), and another draw is made."""
        if not self.memory.first_repeat(digest):
            return False
        self.archive.add_event(self.state.run_id, "prompt_repeat", {"operator": op, "parents": list(parents),
                                                                    "model": model})
        self.progress.repeats_avoided += 1
        return False

    def _in_flight(self) -> set[tuple]:
        return {meta.key for meta in self.flight.calls.values()}

    def _job(self, op: str, correct: list[Variant], repairable: Variant | None, seed_island: int | None):
        """(operator function, its arguments, parent ids, island) of the next call, its parents chosen here."""
        island = self.turns.next_island()
        pool = [m for m in correct if m.lineage.island == island] or correct
        rows = self.archive.kernels(run_id=self.state.run_id)
        if op == "translate":  # the first kernels, then only to seed an empty or collapsed island
            return self._build(op, [], self._seed_home(seed_island, island), rows)
        if op == "mutate":
            top = selection.fastest_approaches(pool)  # the model's attempts are counted for these only
            tries = {m.kernel_id: attempts.count_on(m.kernel_id, rows) for m in top}
            parent = selection.pick_mutate_parent(top, tries, self.rng)
            return self._build(op, [parent], parent.lineage.island, rows)
        if op == "crossover":
            parents = selection.pick_crossover_parents(correct, self.rng, avoid=self.memory.crossed)
            return self._build(op, parents, island, rows) if len(parents) >= 2 else None
        if op == "reflect":
            chosen = selection.pick_reflect_variants(correct, self.rng, self.settings.reflect_k)
            return self._build(op, chosen, island, rows) if len(chosen) >= 2 else None
        if op == "repair":  # among recent children: the selection checks a failure's parent and repairs
            return self._build(op, [repairable], repairable.lineage.island, rows)
        return None

    def _waiting_job(self) -> tuple | None:
        """The call a replay stopped at (state.WaitingCall), once, as the first call of the resumed run: its
        operator, the call's arguments for its parents as they are now, and its format. None when there is
        none, or a parent is gone."""
        waiting, self.memory.waiting = self.memory.waiting, None
        if waiting is None:
            return None
        members = [self.population.get(p) for p in waiting.parents]
        if any(m is None for m in members):
            return None
        job = self._build(waiting.op, members, waiting.island, self.archive.kernels(run_id=self.state.run_id))
        return None if job is None else (waiting.op, job, waiting.format)

    def _build(self, op: str, members: list[Variant], island: int, rows: list[KernelRecord]):
        """(operator function, its arguments, parent ids, island) of a call on the kernels `members`; every
        kernel the prompt asks to change comes with what came of the earlier attempts on it (attempts.py)."""
        ids = tuple(m.kernel_id for m in members)
        # a crossover's or reflection's: with --format auto the drawn format's island, else its first kernel's
        home = island if len(self.state.formats) > 1 or not members else members[0].lineage.island
        if op == "translate":
            return operators.translate, (attempts.translations(rows),), (), island
        if op == "mutate":
            variant = self._variant(members[0], "A", tried=attempts.on_kernel(ids[0], rows))
            return self._after_profiles(operators.mutate, members[0]), (variant,), ids, island
        if op == "crossover":
            self.memory.crossed.add(frozenset(ids))
            variants = [self._variant(p, "ABC"[i], notes=self._notes(p, rows),
                                      tried=attempts.on_kernel(p.kernel_id, rows, limit=3))
                        for i, p in enumerate(members)]
            return self._after_profiles(operators.crossover, *members), (variants,), ids, home
        if op == "reflect":
            variants = [self._variant(m, "ABCDEFGH"[i], notes=self._notes(m, rows),
                                      tried=attempts.on_kernel(m.kernel_id, rows, limit=3) if i == 0 else ())
                        for i, m in enumerate(members)]
            return self._after_profiles(operators.reflect, *members), (variants,), ids, home
        if op == "repair":
            self.memory.repair_tried.add(ids[0])
            evaluation = self.archive.kernel(ids[0]).evaluations[-1].evaluation()
            return operators.repair, (self._variant(members[0], "A"), feedback_from(evaluation)), ids, island
        return None

    def _seed_home(self, seed_island: int | None, island: int) -> int:
        """The island a translation seeds: with several formats, one of the drawn format's islands that
        needs a seed where there is one (so the first translations alternate formats), else the first
        island needing one, else `island`."""
        if seed_island is None or len(self.state.formats) == 1:
            return seed_island if seed_island is not None else island
        seeding = {m.island for m in [*self.flight.calls.values(), *self.flight.judging.values()] if m.op == "translate"}
        mine = self._needing_seed(self.turns.format, seeding)
        return mine if mine is not None else seed_island

    def _needing_seed(self, fmt: str, seeding: set[int]) -> int | None:
        """The first island of format `fmt` that a translation should seed (islands.needing_seed)."""
        n = self.settings.islands
        others = {i for i in range(n) if self.state.island_format(i) != fmt}
        return islands.needing_seed(self.population, n, seeding | others)

    def _after_profiles(self, fn, *members: Variant):
        """The operator `fn`, or, while a kernel it shows is being profiled (each is started now if it
        never was: a new best is shown with its profile), `fn` after those profiles are in: the call
        waits in its pool thread (seconds), not the loop, and the prompt shows each kernel's profile."""
        for m in members:
            self.profiler.on_demand(m)
        pending = self.profiler.pending({m.kernel_id for m in members})
        if not pending:
            return fn

        def fresh(v: Variant) -> Variant:
            if v.kernel_id not in pending:
                return v
            try:
                profile = profile_block(pending[v.kernel_id].result(timeout=PROFILE_WAIT_S))
                return dataclasses.replace(v, shown=dataclasses.replace(v.shown, profile=profile))
            except Exception:  # noqa: BLE001 - too slow or failed: the kernel goes without its profile
                return v

        def after(llm: LLM, ctx: Context, shown, *rest):
            return fn(llm, ctx, [fresh(v) for v in shown] if isinstance(shown, list) else fresh(shown), *rest)

        return after

    def _variant(self, m: Variant, label: str, notes: str = "", tried: tuple[str, ...] = ()) -> Variant:
        return dataclasses.replace(m, shown=Shown(label, self.state.profile_text(m.kernel_id), notes, tried))

    @staticmethod
    def _notes(m: Variant, rows: list[KernelRecord]) -> str:
        """How a kernel shown beside others differs: its idea in the model's words, and its approach."""
        idea = attempts.idea_for(m.kernel_id, rows)
        return "\n".join(t for t in (f"Idea: {idea}" if idea else "",
                                     approach(niches.describe(m.source, m.format), m.format)) if t)

    def _start_tune(self, correct: list[Variant]) -> bool:
        """A variant of one of the best tunable kernels of an island, within the ranges its own
        `// tune:` marks list; the next of them when one has no untried variant left."""
        tunable = [m for m in correct if _tunable(m, self.state.profiles)]
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
        self.children.submit("tune", source, (parent.kernel_id,), parent.lineage.island, None,
                             note=", ".join(f"{k}={v}" for k, v in change.items()))
        return True


def _tunable(m: Variant, profiles: dict) -> bool:
    """A kernel tune can work on: tune-marked constants, a measured speed to beat (a Triton kernel
    judged in the interpreter has none: its variants could only be correct, never faster), and not
    far from its bound (below FAR % of the speed of light its profile says to change the approach,
    not constants: the judge's time goes to new replies instead)."""
    sol = getattr(profiles.get(m.kernel_id), "sol", None)
    far = sol is not None and sol.candidate_pct is not None and sol.candidate_pct < FAR
    return m.figures.speedup_eager is not None and tune.has_tunables(m.source) and not far
