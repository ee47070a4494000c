"""What a search remembers of what it asked and tried, so that it never asks the same thing twice: the prompts
answered, the parent sets sent to crossover, the kernels a repair was asked for, and how many translations in a row
gave nothing correct, and the call a replay stopped at. Taken up from the run's rows on resume (RunState), then
kept here as calls come back."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..state import WaitingCall


@dataclass
class Memory:
    asked: set[str]  # hashes of the prompts answered: the same prompt is not sent again
    crossed: set[frozenset]  # parent sets already sent to crossover: the same prompt again
    repair_tried: set[int]  # one repair per failure, whatever came of it
    repeated: set[str] = field(default_factory=set)  # prompts not sent because they were answered: counted once each
    barren_translations: int = 0  # translations since the last one judged correct
    waiting: WaitingCall | None = None  # the call a replay stopped at: asked first (planning._waiting_job)

    @classmethod
    def of_run(cls, state) -> "Memory":
        """What the run's rows say was asked and tried before this session (a RunState)."""
        return cls(state.archive.answered_prompts(state.run_id), state.crossed(), state.repair_targets(),
                   waiting=state.waiting_call())

    def first_repeat(self, digest: str) -> bool:
        """Whether an answered prompt, drawn again, is drawn again for the first time (it is counted once; the
        planner may draw it every half second)."""
        if digest in self.repeated:
            return False
        self.repeated.add(digest)
        return True
