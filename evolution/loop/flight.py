"""What the search keeps of each piece of work in flight, by its future: an LLM call (`Call`), a judge
job (`Judging`) and a profile (`Profiling`). Each is set when the work starts and read when it is done. `InFlight`
holds the search's calls and jobs by future."""
from __future__ import annotations

import concurrent.futures
from collections import Counter
from dataclasses import dataclass

from kernelevo.agent.client import Metered

from ..budget import Reservation
from ..population import Variant


@dataclass(frozen=True)
class Call:
    """An operator's LLM call: what it was asked, of which model, and the budget it holds."""

    op: str
    parents: tuple[int, ...]
    island: int
    reservation: Reservation
    key: tuple  # (operator, sorted parent ids): the same prompt while it is in flight
    model: str
    llm: Metered
    digest: str  # the first prompt's hash: a prompt answered before is not sent again
    format: str


@dataclass(frozen=True)
class Judging:
    """A kernel on the judge and the device it runs on: a stored child (not judged yet), or with
    `remeasure`, a would-be new best with the search's first figure, judged again before it is admitted."""

    kernel: Variant
    device: str
    op: str
    remeasure: bool = False

    @property
    def kernel_id(self) -> int:
        return self.kernel.kernel_id

    @property
    def island(self) -> int:
        return self.kernel.lineage.island


@dataclass(frozen=True)
class Profiling:
    """A profile of a judged kernel, to be stored with the evaluation it profiles."""

    kernel_id: int
    evaluation_id: int
    device: str


class InFlight:
    """The search's work under way: its LLM calls and judge jobs by their futures, and each device's count of work
    (judging and profiling: a child goes to the least loaded)."""

    def __init__(self, devices: tuple[str, ...]):
        self.calls: dict[concurrent.futures.Future, Call] = {}
        self.judging: dict[concurrent.futures.Future, Judging] = {}
        self.load: Counter = Counter({d: 0 for d in devices})
