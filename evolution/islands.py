"""Islands: sub-populations that evolve apart and exchange their best now and then.

Separate islands keep several lines of descent alive (one early fast kernel cannot take over
every parent slot), and a ring migration every few generations lets a good idea reach the other
islands without flooding them at once.
"""
from __future__ import annotations

import random
from typing import Collection, Iterable

from .population import Variant, Population


def assign_island(index: int, n_islands: int) -> int:
    """Island of the `index`-th seed (translate sample, stepping stone): round robin."""
    return index % n_islands if n_islands > 1 else 0


def _islands(population: Population | Iterable[Variant], n_islands: int) -> dict[int, list[Variant]]:
    if isinstance(population, Population):
        return {i: population.by_island(i) for i in range(n_islands)}
    out: dict[int, list[Variant]] = {i: [] for i in range(n_islands)}
    for m in population:
        out.setdefault(m.lineage.island, []).append(m)
    return out


def migrate(population: Population | Iterable[Variant], n_islands: int, rng: random.Random, generation: int,
            every: int = 3) -> list[tuple[int, int]]:
    """Moves (kernel_id, to_island): at generations every, 2*every, ... each island sends its
    fastest correct kernel that the next island (ring: i -> i+1 mod n) does not hold yet.

    Pure: the loop applies the moves, e.g. `population.migrate_in(kernel_id, to_island)`, which
    lists the kernel on the new island too (a copy: its home island keeps it). Ties in speed are
    broken by `rng`, so equally fast kernels take turns travelling."""
    if n_islands < 2 or every < 1 or generation <= 0 or generation % every:
        return []
    islands = _islands(population, n_islands)
    moves = []
    for i in range(n_islands):
        target = (i + 1) % n_islands
        present = {m.kernel_id for m in islands.get(target, [])}
        ok = [m for m in islands.get(i, []) if m.ok and m.kernel_id not in present]
        if not ok:
            continue
        top = max(m.fitness for m in ok)
        moves.append((rng.choice(sorted((m for m in ok if m.fitness == top), key=lambda m: m.kernel_id)).kernel_id,
                      target))
    return moves


COLLAPSE_AFTER = 6  # judged children in a row that all failed: the island's lines of descent are stuck


def needing_seed(population: Population | Iterable[Variant], n_islands: int,
                 pending: Collection[int] = ()) -> int | None:
    """The first island that a fresh translation should seed: one with no correct kernel, or one
    whose last COLLAPSE_AFTER judged children of the model (tune variants left out) all failed. None when every island is working, which
    is when translating again would only repeat the first kernels (a run spent 3 of 12 calls on
    translations no better than its first two). Islands in `pending` are being seeded already (a
    translation in flight or being judged)."""
    for i, members in sorted(_islands(population, n_islands).items()):
        if i >= max(1, n_islands) or i in pending:
            continue
        # a tune variant's failure is its constant's
        judged = [m for m in members if m.figures.verdict and m.lineage.operator != "tune"]
        if not any(m.ok for m in members):
            return i
        recent = sorted(judged, key=lambda m: m.kernel_id)[-COLLAPSE_AFTER:]
        if len(recent) == COLLAPSE_AFTER and not any(m.ok for m in recent):
            return i
    return None
