"""When a search stops: its budget and the plateau rule, a best at the speed of light, a model server that is
gone, or a replay whose recording ran out. One object the search holds (Search by composition, issue 53):
the generation of the last new best, and why the models were given up on, with the rule that reads them.
"""
from __future__ import annotations

from kernelevo.agent.client import Stop, Unreachable
from kernelevo.agent.replay import ReplayEnded

from .. import budget as budgets
from ..bound import at_bound, floor_reached


class Stopping:
    """What decides the stop. `reason()` is None while the search goes on."""

    def __init__(self, budget: budgets.Budget, generation: int):
        self.budget = budget
        self.improved_at = generation  # generation of the last new best (plateau rule)
        self.unreachable = ""  # why the model server is given up on (stops the run)
        self.replay_ended = ""  # where a replay's recording ran out (stops the run)

    def improved(self, generation: int) -> None:
        """A new best (not a tie) at `generation`: the plateau counts from here."""
        self.improved_at = generation

    def models_gone(self, exc: Stop) -> None:
        """The last model left the ensemble: a replay that ran out or a server that is gone stops the search once
        the judge's work is in (the first reason is kept); anything else (a refused key) ends it at once."""
        if isinstance(exc, ReplayEnded):
            self.replay_ended = self.replay_ended or str(exc)
        elif isinstance(exc, Unreachable):
            self.unreachable = self.unreachable or str(exc)
        else:
            raise exc

    def reason(self, generation: int, best, opponent) -> budgets.StopReason | None:
        """Why the search stops now, or None. `best` is the population's best, `opponent` the baseline with its
        speed of light and floor (a bound marked unreliable stops nothing: bound.at_bound, bound.floor_reached)."""
        if self.unreachable:
            return budgets.StopReason(budgets.StopKind.UNREACHABLE, f"model unreachable: {self.unreachable}")
        if self.replay_ended:
            return budgets.StopReason(budgets.StopKind.REPLAY_ENDED, self.replay_ended)
        done = at_bound(best, opponent) or floor_reached(best, opponent)
        if done:
            return budgets.StopReason(budgets.StopKind.AT_BOUND, done)
        return self.budget.exhausted(generation, generation - self.improved_at)
