"""Which island the next call is for, and with several formats (--format auto) which format: islands take calls
in turn; a call's format is drawn by what each format's calls earned for its model and for all (the bandit,
scheduling.format_weights), once every format has been asked for; the format's islands then take the call."""
from __future__ import annotations

import random
from collections.abc import Callable

from .. import scheduling


class Turns:
    def __init__(self, formats: tuple[str, ...], islands: int, island_format: Callable[[int], str]):
        self.formats, self.islands, self.island_format = formats, islands, island_format
        self.rows: list = []  # Archive.format_yield as of the search's last refresh (several formats only)
        self.asked: set[str] = set()  # formats this session's calls asked for (the rows may lag behind)
        self.format: str | None = None  # the format drawn for the call being planned
        self._island = -1

    def untried(self) -> list[str]:
        """With several formats, those no call has asked for yet (none made, none in flight)."""
        if len(self.formats) < 2:
            return []
        asked = {r.format for r in self.rows if r.calls} | self.asked
        return [f for f in self.formats if f not in asked]

    def draw_format(self, model: str, rng: random.Random) -> None:
        """The format the next call (of `model`) is asked in: one no call asked for yet first (the islands then
        alternate formats from the first call), else the bandit's draw."""
        untried = self.untried()
        self.format = untried[0] if untried else scheduling.choose_format(
            scheduling.format_stats(self.rows, model), scheduling.format_stats(self.rows), self.formats, rng)

    def next_island(self) -> int:
        """Islands in turn; with several formats, the next island of the format drawn for this call."""
        if len(self.formats) > 1 and self.format in self.formats:
            own = [i for i in range(self.islands) if self.island_format(i) == self.format]
            self._island = own[(own.index(self._island) + 1) % len(own)] if self._island in own else own[0]
            return self._island
        self._island = (self._island + 1) % self.islands
        return self._island
