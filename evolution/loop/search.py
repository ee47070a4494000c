"""class Search: one run's search state and the loop that drives it.

The loop asks its planning (planning.py) to start children while there is room and hands what comes
back to its intake (children.py), with a refresh of the display's Progress after each turn; it stops on
the budget, the plateau rule or a model server that is gone. The two parts are objects that share the
run's objects through one record (shared.py); Search builds them and holds them. Submitting a stored kernel
to the judge (resubmit) and Ctrl-C (abandon) are what optimize (run.py) calls.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import random
from typing import Callable

from kernelevo.agent.pool import CallPool
from kernelevo.archive.rows import by_format, by_model

from .. import budget as budgets
from .. import ensemble as ensembles
from .. import scheduling
from ..bound import unreliable
from ..novelty import NoveltyGate
from ..options import SearchSettings
from ..outcome import Progress
from ..population import Variant, Population
from .memory import Memory
from ..state import RunState
from .children import Children
from .flight import InFlight
from .planning import Planning
from .profiler import Profiler
from .shared import Shared
from .stopping import Stopping
from .turns import Turns


# Plans (of three operator draws each) tried before a run with nothing in flight ends as having nothing left to do:
# a replay plans only then, and a draw that found no job must not end it with replies and budget left.
LAST_DRAWS = 8


class Search:
    """One run of the search on one task; `run()` returns the reason it stopped."""

    def __init__(self, state: RunState, ensemble: ensembles.Ensemble, judge, settings: SearchSettings,
                 budget: budgets.Budget, gate: NoveltyGate, rng: random.Random,
                 on_progress: Callable[[Progress], None] | None = None, on_status: Callable[[str], None] | None = None):
        self.state, self.archive, self.ensemble, self.settings = state, state.archive, ensemble, settings
        self.on_progress = on_progress or (lambda p: None)
        self.population: Population = state.population
        self.stats: dict[str, scheduling.OperatorStats] = state.operator_stats()
        self.progress = Progress(judged=state.judged(), run_id=state.run_id)  # from rows once; counted here afterwards
        self.pool = CallPool(settings.llm_concurrency)
        self.flight = InFlight(judge.options.devices)  # the calls and judge jobs under way, the work per device
        self.profiler = Profiler(state, judge, settings, self.flight.load, self.progress)  # kernels' profiles
        self.turns = Turns(state.formats, settings.islands, state.island_format)  # the next call's island and format
        self.shared = Shared(state, ensemble, settings, budget, gate, rng, self.population, self.stats, self.progress,
                             self.flight, self.profiler, Memory.of_run(state), on_status or (lambda text: None))
        self.progress.generation = self.shared.generation()
        self.stopping = Stopping(budget, self.progress.generation)  # the budget, plateau, bound and models gone
        self.children = Children(self.shared, judge, self.stopping)  # what comes back, and what goes to the judge
        self.planning = Planning(self.shared, self.pool, self.turns, self.children)  # which child next
        self._refresh()

    def _refresh(self, reread: bool = True) -> None:
        """Update the display's Progress; `reread`: also the spend and yield, which come from the
        archive's rows and change only when a call or a judgement finished (not every 0.5 s tick)."""
        best = self.population.best()
        p = self.progress
        p.best_eager = best.figures.speedup_eager if best else None
        p.best_compile = best.figures.speedup_compile if best else None
        p.best_eager_ci = best.figures.speedup_eager_ci if best else None
        p.best_compile_ci = best.figures.speedup_compile_ci if best else None
        p.llm_in_flight, p.judging = len(self.flight.calls), len(self.flight.judging)
        p.remeasuring = sum(meta.remeasure for meta in self.flight.judging.values())
        if not reread:
            return self.on_progress(p)
        spend = self.archive.spend(self.state.run_id)
        p.spend_usd, p.unknown_cost_calls, p.calls = spend.cost_usd, spend.unknown_cost_calls, spend.calls
        p.replayed = spend.replayed
        p.cache_hit = spend.cache_read_tokens / spend.prompt_tokens if spend.prompt_tokens else None
        calls = self.archive.call_yield(self.state.run_id)
        p.calls_by_operator = {op: row.calls for op, row in calls.items() if row.calls}
        p.replies, p.replies_judged = sum(r.replies for r in calls.values()), sum(r.judged for r in calls.values())
        models = self.archive.model_yield(self.state.run_id)
        self.ensemble.update(models)  # what the next calls' models are chosen by
        p.models, p.dropped = by_model(models, self.ensemble.labels), dict(self.ensemble.dropped)
        if len(self.state.formats) > 1:  # what the format bandit draws by, read when a call or verdict came in
            self.turns.rows = self.archive.format_yield(self.state.run_id)
            p.formats = by_format(self.turns.rows, self.archive.format_best(self.state.run_id), self.state.formats)
        self.on_progress(p)

    def _stop_reason(self) -> budgets.StopReason | None:
        return self.stopping.reason(self.progress.generation, self.population.best(), self._bound_checked())

    def _bound_checked(self):
        """The opponent, its bound marked unreliable (once, said once) when the fastest correct kernel beat it
        beyond the calibration's spread: the prompts from then on say so, and it stops nothing."""
        opponent = self.state.base_context.opponent
        timed = [m for m in self.population.members if m.ok and m.figures.ms]
        if opponent is None or not opponent.bound_ms or opponent.bound_why or not timed:
            return opponent
        best = min(timed, key=lambda m: m.figures.ms)
        why = unreliable(opponent.bound_ms, {f"kernel {best.kernel_id}": best.figures.ms})
        if why:
            opponent = dataclasses.replace(opponent, bound_why=why)
            self.state.base_context = dataclasses.replace(self.state.base_context, opponent=opponent)
            self.shared.on_status(f"speed of light not used: {why}")
            self.archive.add_event(self.state.run_id, "bound_unreliable", {"why": why, "kernel": best.kernel_id})
        return opponent

    def run(self) -> budgets.StopReason:
        """Search until a limit is reached; returns the reason. Ctrl-C propagates (the caller stops)."""
        reason = None
        self.progress.status = "searching"
        while True:
            reason = reason or self._stop_reason()
            if reason is None:
                while len(self.flight.calls) < self.settings.llm_concurrency and len(self.flight.judging) < \
                        2 * len(self.flight.load) + 2 and not self._settling() and self.planning.plan():
                    pass
            if not self.flight.calls and not self.flight.judging and not self.profiler.futures:
                if reason is None and any(self.planning.plan() for _ in range(LAST_DRAWS)):
                    continue  # a drawn operator had no job (every pair crossed, one timed kernel): others may
                break
            waiting = list(self.flight.calls) + list(self.flight.judging) + list(self.profiler.futures)
            done, _ = concurrent.futures.wait(waiting, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                if future in self.flight.calls:
                    self.children.proposal_done(future)
                elif future in self.profiler.futures:
                    self.profiler.done(future)
                else:
                    self.children.judged(future)
            if reason:
                self.progress.status = f"finishing: {reason.text}"
            self._refresh(reread=bool(done))
        self.pool.shutdown(0.0)
        self._bound_checked()  # a kernel judged after the stop was decided is checked too
        return reason or budgets.StopReason(budgets.StopKind.NOTHING_LEFT, budgets.StopKind.NOTHING_LEFT.value)

    def _settling(self) -> bool:
        """A model that answers at once (a replay) waits for what is in flight: a call's kernels, their verdicts
        and profiles, which a model's minute would have let arrive before the next prompt."""
        return self.ensemble.instant and bool(self.flight.calls or self.flight.judging or self.profiler.futures)

    def resubmit(self, child: Variant) -> None:
        """Judge a stored child (new, or stored but not judged before the run was killed)."""
        self.children.resubmit(child)

    def abandon(self, grace_s: float = 0.0) -> int:
        """Ctrl-C: stop planning, cancel queued calls; returns calls still in flight after `grace_s`."""
        return self.pool.shutdown(grace_s)
