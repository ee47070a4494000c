"""The population: every candidate of a run as a frozen `Variant` (kernelevo.evaluation: the one record
of a judged kernel, which the prompts show too), grouped by island and niche.

A member is the search's view of one kernel: what it is (source, format), what the judge said
(`figures`: verdict, speedups), where it came from (`lineage`: operator, parents, island, generation,
niche) and how a prompt shows it (`shown`). It is rebuilt from archive rows on resume, so it holds
only plain values.

Islands and migration: a migrant is the same kernel listed on a second island. `Population.add`
with a kernel id already present on another island records that copy; population-wide views
(`members`, `correct`, `best`, `elites`, `get`) count each kernel once, in its home record (the
first one added), while `by_island` lists every kernel present on that island, migrants included.

Fitness: the speedup over the run's baseline (`baseline`): torch.compile by default, the one line a user
can write instead of kernelevo; eager PyTorch where asked for or where torch.compile gives no figure
(disabled, or failed on the reference), so that every kernel of a run is ranked by one measure.

Ties: two speedups whose 95 % intervals overlap are equal as far as the judge can tell. The best
(of the run, an island or a niche) is an incumbent that a newcomer replaces only by beating it
beyond the noise (`beats`), so "the one to beat" does not flip between equally fast kernels.
"""
from __future__ import annotations

from typing import Iterable

from kernelevo.evaluation import Variant, faster_beyond_noise


BASELINES = {"compile": "torch.compile", "eager": "eager"}  # a run's baseline, and how it is named


def rank_key(member: Variant) -> tuple[float, int]:
    """Sort key, best first: higher fitness, then the older kernel (lower id) on ties.

    Preferring the older kernel on ties keeps rankings stable as equal-speed variants arrive."""
    return (-member.fitness, member.kernel_id)


def beats(new: Variant, incumbent: Variant | None) -> bool:
    """Whether a correct `new` kernel is faster than `incumbent` beyond the noise: its speedup's
    interval lies wholly above the incumbent's (a higher median where either is unknown)."""
    if not new.ok:
        return False
    if incumbent is None:
        return True
    return faster_beyond_noise(new.fitness, new.fitness_ci, incumbent.fitness, incumbent.fitness_ci)


def best_of(members: Iterable[Variant]) -> Variant | None:
    """The incumbent left after `members` in the order they arrived: the first correct one, then
    each that beats the incumbent of its moment. A kernel inside the incumbent's noise is a tie and
    leaves it in place; without intervals this is the fastest, the older one on equal speed."""
    best = None
    for m in members:
        if m.ok and beats(m, best):
            best = m
    return best


class Population:
    """A plain container of Members (not frozen: the loop adds to it every generation)."""

    def __init__(self, members: Iterable[Variant] = ()):
        self._home: dict[int, Variant] = {}  # kernel_id -> home record, insertion ordered
        self._islands: dict[int, dict[int, Variant]] = {}  # island -> kernel_id -> record there
        for m in members:
            self.add(m)

    def add(self, member: Variant) -> None:
        """Add a kernel, update one (same id and island: replaced), or add a migrant copy
        (same id, another island)."""
        home = self._home.get(member.kernel_id)
        if home is None or home.lineage.island == member.lineage.island:
            self._home[member.kernel_id] = member
        self._islands.setdefault(member.lineage.island, {})[member.kernel_id] = member

    def migrate_in(self, kernel_id: int, island: int) -> Variant:
        """List kernel `kernel_id` on `island` as well (a migration move); returns the copy."""
        from dataclasses import replace

        home = self._home[kernel_id]
        copy = replace(home, lineage=replace(home.lineage, island=island))
        self.add(copy)
        return copy

    def __len__(self) -> int:
        return len(self._home)

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self._home

    @property
    def members(self) -> list[Variant]:
        """Every kernel once (its home record), in the order added."""
        return list(self._home.values())

    @property
    def islands(self) -> list[int]:
        return sorted(self._islands)

    def by_island(self, island: int) -> list[Variant]:
        """Kernels present on `island`, migrants included."""
        return list(self._islands.get(island, {}).values())

    def get(self, kernel_id: int) -> Variant | None:
        return self._home.get(kernel_id)

    def correct(self) -> list[Variant]:
        return [m for m in self._home.values() if m.ok]

    def failed(self) -> list[Variant]:
        return [m for m in self._home.values() if not m.ok]

    def best(self, island: int | None = None) -> Variant | None:
        """The incumbent fastest correct kernel (of one island if given; see best_of), or None."""
        return best_of(self.by_island(island) if island is not None else self._home.values())

    def elites(self) -> dict[str, Variant]:
        """The fastest correct kernel of each niche (MAP-Elites' archive of cells)."""
        return elites_of(self._home.values())


def elites_of(members: Iterable[Variant]) -> dict[str, Variant]:
    """Best correct member per niche (the incumbent, as best_of), niches in order of first appearance."""
    out: dict[str, Variant] = {}
    for m in members:
        if m.ok and beats(m, out.get(m.lineage.niche)):
            out[m.lineage.niche] = m
    return out
