"""Who breeds: pure selection policies over Members.

Every function takes the population as a list and an explicit `random.Random`, changes nothing,
and returns the same answer for the same seed, so a run is reproducible and each policy can be
tested on its statistics alone.
"""
from __future__ import annotations

import random
from itertools import combinations
from typing import Collection, Mapping, Sequence

from .population import Variant, rank_key
from .tune import untuned

FIXABLE = ("compile_error", "runtime_error", "incorrect")  # timeout/rejected: the idea, not a slip, is wrong
REPAIR_WINDOW = 4  # repair picks among this many most recent eligible failures


def tournament(members: Sequence[Variant], rng: random.Random, k: int = 3) -> Variant:
    """The fittest of `k` members drawn without replacement (ties: the older kernel)."""
    if not members:
        raise ValueError("tournament over no members")
    return min(rng.sample(list(members), min(max(1, k), len(members))), key=rank_key)


def pick_mutate_parent(members: Sequence[Variant], tries: Mapping[int, int], rng: random.Random,
                       top: int = 3) -> Variant:
    """A parent for mutate: one of the `top` fastest correct approaches among `members` (an island's;
    a kernel and its tune variants count once, as the fastest of them), drawn with weight
    1 / (1 + tries), `tries` being the model's earlier attempts on each (attempts.count_on).

    The best kernels are where an improvement pays; the weights move the calls to the next best
    once the best's attempts came to nothing, rather than asking about one kernel for ever. (Drawn
    among all correct kernels, a run kept going back to its slowest, 0.29x, while three kernels at
    1.8x-2.0x existed.) Raises ValueError when no member is correct."""
    ranked = fastest_approaches(members, top)
    if not ranked:
        raise ValueError("no correct member to pick a parent from")
    return rng.choices(ranked, weights=[1.0 / (1 + tries.get(m.kernel_id, 0)) for m in ranked], k=1)[0]


def fastest_approaches(members: Sequence[Variant], top: int = 3) -> list[Variant]:
    """The `top` fastest correct approaches, fastest first (a kernel and its tune variants: the fastest of them)."""
    return sorted(_distinct_sources([m for m in members if m.ok]), key=rank_key)[:max(1, top)]


def pick_crossover_parents(members: Sequence[Variant], rng: random.Random, n: int = 2,
                           avoid: Collection[frozenset] = (), draws: int = 8) -> list[Variant]:
    """Up to `n` correct members with distinct sources, from distinct niches when there are
    enough: crossover is meant to combine different strengths (a tiled kernel with a vectorised
    one), and two kernels of one niche mostly share theirs. Each parent is a tournament winner
    of its niche. A set of parents in `avoid` (crossed before, or in flight: the same prompt
    again) is drawn again, up to `draws` times, then chosen among the sets not in `avoid` (of the
    40 fastest); [] when there is none. Fewer than `n` only when fewer distinct correct kernels
    exist."""
    ok = _distinct_sources([m for m in members if m.ok])
    for _ in range(max(1, draws)):
        picked = _draw_parents(ok, rng, n)
        if frozenset(m.kernel_id for m in picked) not in avoid:
            return picked
    # the draws keep landing on known sets: choose among the sets not tried, distinct niches first
    fresh = [c for c in combinations(ok[:40], min(n, len(ok))) if frozenset(m.kernel_id for m in c) not in avoid]
    if not fresh:
        return []
    apart = [c for c in fresh if len({m.lineage.niche for m in c}) == len(c)]
    return sorted(rng.choice(apart or fresh), key=rank_key)


def _draw_parents(ok: list[Variant], rng: random.Random, n: int) -> list[Variant]:
    by_niche: dict[str, list[Variant]] = {}
    for m in ok:
        by_niche.setdefault(m.lineage.niche, []).append(m)
    niches = list(by_niche)
    rng.shuffle(niches)
    picked = [tournament(by_niche[niche], rng) for niche in niches[:n]]
    while len(picked) < n:
        taken = {m.kernel_id for m in picked}
        left = [m for m in ok if m.kernel_id not in taken]
        if not left:
            break
        picked.append(tournament(left, rng))
    return picked


def tune_parents(tunable: Sequence[Variant], rng: random.Random, per_island: int = 2) -> list[Variant]:
    """Kernels to tune, in the order to try them: the `per_island` fastest correct kernels of
    each island, shuffled. Tuning a slow kernel spends judge time where no improvement can come
    from (a run tuned its slowest kernel twice, a 0.71x crossover)."""
    by_island: dict[int, list[Variant]] = {}
    for m in sorted((m for m in tunable if m.ok), key=rank_key):
        by_island.setdefault(m.lineage.island, []).append(m)
    top = list({m.kernel_id: m for ms in by_island.values() for m in ms[:max(1, per_island)]}.values())
    rng.shuffle(top)
    return top


def pick_reflect_variants(members: Sequence[Variant], rng: random.Random, k: int = 4) -> list[Variant]:
    """`k` measured correct variants spanning the speedups seen: the best, then one drawn from
    each of k-1 equal rank strata of the rest, fastest first. Contrast is what the reflect
    prompt learns from; k near-identical top kernels teach nothing about why one is fast."""
    ranked = sorted(_distinct_sources([m for m in members if m.ok and m.figures.speedup_eager is not None]), key=rank_key)
    if len(ranked) <= k:
        return ranked
    best, rest = ranked[0], ranked[1:]
    picks = [best]
    strata = k - 1
    for s in range(strata):
        lo, hi = s * len(rest) // strata, (s + 1) * len(rest) // strata
        picks.append(rest[rng.randrange(lo, hi)])
    return sorted(picks, key=rank_key)


def pick_repair_target(members: Sequence[Variant], rng: random.Random) -> Variant | None:
    """A recent failure worth one repair: verdict in FIXABLE, born of a correct parent or of
    translate (so the idea was sound and the failure is likely a slip), not a tune variant (its
    failure is the constant tune chose, no slip of the model's), and not yet repaired.
    A failed repair is never a target itself (its parent failed), which caps what the search
    spends on one broken idea at one repair. Drawn uniformly among the REPAIR_WINDOW most recent
    (newest generation, then newest kernel).

    Pass all members (or a recent slice of all), not the failures alone: the parents' verdicts
    and the existing repairs are read from the same list."""
    by_id = {m.kernel_id: m for m in members}
    repaired = {p for m in members if m.lineage.operator == "repair" for p in m.lineage.parents}
    eligible = [
        m for m in members
        if m.figures.verdict in FIXABLE and m.kernel_id not in repaired and m.lineage.operator != "tune"
        and (m.lineage.operator == "translate" or any(by_id[p].ok for p in m.lineage.parents if p in by_id))
    ]
    if not eligible:
        return None
    eligible.sort(key=lambda m: (m.lineage.generation, m.kernel_id), reverse=True)
    return rng.choice(eligible[:REPAIR_WINDOW])


def approaches(members: Sequence[Variant]) -> int:
    """How many distinct approaches the correct members hold, a kernel and its tune variants
    counting once: crossover and reflect need two (what they contrast is the approaches)."""
    return len(_distinct_sources([m for m in members if m.ok and m.figures.speedup_eager is not None]))


def _distinct_sources(members: list[Variant]) -> list[Variant]:
    """The fastest member per approach: sources compared with trailing whitespace stripped and
    tune-marked constants set alike, so that a kernel and its tune variants count once (a model
    asked to cross or contrast kernels that differ in one constant has nothing to work with)."""
    seen: dict[str, Variant] = {}
    for m in sorted(members, key=rank_key):  # keep the fastest of identical copies
        key = "\n".join(line.rstrip() for line in untuned(m.source).strip().splitlines())
        seen.setdefault(key, m)
    return list(seen.values())
