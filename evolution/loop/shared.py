"""What a search's planning (planning.py) and its intake (children.py) both hold: one record of the run's
objects, each shared by reference (the same population, progress, flight and memory), so that each part says in
its constructor what it reads and neither reaches into the other or into Search."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from .. import budget as budgets
from .. import ensemble as ensembles
from .. import scheduling
from ..novelty import NoveltyGate
from ..options import SearchSettings
from ..outcome import Progress
from ..population import Population
from ..state import RunState
from .flight import InFlight
from .memory import Memory
from .profiler import Profiler


@dataclass(frozen=True)
class Shared:
    state: RunState  # the run's rows and files (its archive is state.archive)
    ensemble: ensembles.Ensemble  # the models, and which one a call goes to
    settings: SearchSettings
    budget: budgets.Budget  # calls and dollars reserved, settled and left
    gate: NoveltyGate  # the kernels known: a copy is not judged
    rng: random.Random  # the one source of every draw of the search
    population: Population  # the judged kernels, by island and niche
    stats: dict[str, scheduling.OperatorStats]  # what each operator cost and brought, which draws the next
    progress: Progress  # what the display shows, counted here
    flight: InFlight  # the calls and judge jobs under way, the work per device
    profiler: Profiler  # the kernels' profiles
    memory: Memory  # what was asked and tried: nothing is asked twice
    on_status: Callable[[str], None]  # one line for the user

    @property
    def archive(self):
        return self.state.archive

    def generation(self) -> int:
        """The generation a child judged now belongs to: the children judged, in whole generations."""
        return self.progress.judged // max(1, self.settings.children_per_generation)
