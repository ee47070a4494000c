"""The tune operator's text side: constants a kernel marks as tunable, and variants of them.

Markup, on a `#define` line of a CUDA or C kernel's source:

    #define BLOCK 256  // tune: 128 256 512
    #define ITEMS 4    // tune: 1, 2, 4, 8  // float4s per thread

In Python (a Triton kernel's block sizes, passed to it as `tl.constexpr` arguments or as
`num_warps=`), a module-level assignment carries the same markup as a `#` comment:

    BLOCK_M = 64  # tune: 32 64 128
    WARPS = 4     # tune: 2 4 8  # warps per program

Choices are separated by spaces or commas; a second `//` (`#` in Python) ends the list (the rest
is a comment).
A variant rewrites only the value on that line: every other byte of the source is unchanged, so
the Python side that reads the constant back (re.search on "#define BLOCK") stays consistent.
No LLM is involved; the judge decides whether a variant is correct and faster.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from itertools import combinations
from typing import Collection

_LINE = re.compile(r"^(?P<head>[ \t]*#[ \t]*define[ \t]+)(?P<name>[A-Za-z_]\w*)(?P<gap>[ \t]+)"
                   r"(?P<value>[^\s/][^\r\n]*?)(?P<mid>[ \t]*//[ \t]*tune[ \t]*:)(?P<choices>[^\r\n]*)(?=\r?$)", re.M)
_PY_LINE = re.compile(r"^(?P<head>)(?P<name>[A-Za-z_]\w*)(?P<gap>[ \t]*=[ \t]*)"
                      r"(?P<value>[^\s#][^\r\n#]*?)(?P<mid>[ \t]*#[ \t]*tune[ \t]*:)(?P<choices>[^\r\n]*)(?=\r?$)",
                      re.M)
_LINES = (_LINE, _PY_LINE)
_ENUMERATE_LIMIT = 20000  # beyond this many single+pair changes, sample instead of listing them


@dataclass(frozen=True)
class Tunable:
    name: str
    value: str  # the current value, as written
    choices: tuple[str, ...]  # as listed in the markup, duplicates dropped
    line: int  # 1-based line number of the #define


def _choices(text: str) -> tuple[str, ...]:
    text = re.split(r"//|#", text, maxsplit=1)[0]
    return tuple(dict.fromkeys(c for c in re.split(r"[\s,]+", text) if c))


def tunables(source: str) -> list[Tunable]:
    """Every tune-marked #define or Python constant, in source order (a name may appear on several lines)."""
    out = []
    for m in sorted((m for line in _LINES for m in line.finditer(source or "")), key=lambda m: m.start()):
        choices = _choices(m.group("choices"))
        if choices:
            line = source.count("\n", 0, m.start()) + 1
            out.append(Tunable(m.group("name"), m.group("value").strip(), choices, line))
    return out


def has_tunables(source: str) -> bool:
    """True when some tunable has a choice other than its current value."""
    return any(set(t.choices) - {t.value} for t in tunables(source))


def apply(source: str, changes: dict[str, str]) -> str:
    """`source` with the tune-marked #define (or constant) of each name in `changes` set to its new value."""
    def swap(m: re.Match) -> str:
        if m.group("name") not in changes:
            return m.group(0)
        return m.group(0)[:m.start("value") - m.start()] + str(changes[m.group("name")]) + \
            m.group(0)[m.end("value") - m.start():]
    for line in _LINES:
        source = line.sub(swap, source)
    return source


def untuned(source: str) -> str:
    """`source` with every tune-marked constant set to its first listed choice: equal for a kernel
    and its tune variants, which are one approach as far as crossover and reflect are concerned."""
    firsts = {t.name: t.choices[0] for t in tunables(source)}
    return apply(source, firsts) if firsts else source


def _options(source: str) -> list[tuple[str, tuple[str, ...]]]:
    """(name, choices other than the current value) per tunable name, first occurrence wins."""
    seen: dict[str, tuple[str, ...]] = {}
    for t in tunables(source):
        if t.name not in seen:
            seen[t.name] = tuple(c for c in t.choices if c != t.value)
    return [(name, alts) for name, alts in seen.items() if alts]


def tune_variants(source: str, rng: random.Random, limit: int = 4,
                  exclude: Collection[str] = ()) -> list[tuple[str, dict]]:
    """Up to `limit` distinct variants, each changing one or two tunables to another listed choice.

    Returns (new source, {name: new value}) pairs; [] when the source has no tunable markup.
    Sources in `exclude` (kernels already judged: tune bypasses the novelty gate) are skipped.
    Singles and pairs are drawn together at random (pairs find interactions, such as tile size
    with items per thread, that one change at a time misses)."""
    options = _options(source)
    if not options or limit <= 0:
        return []
    singles = sum(len(a) for _, a in options)
    pairs = sum(len(a) * len(b) for (_, a), (_, b) in combinations(options, 2))
    if singles + pairs <= _ENUMERATE_LIMIT:
        pool = [{n: v} for n, alts in options for v in alts]
        pool += [{n1: v1, n2: v2} for (n1, a1), (n2, a2) in combinations(options, 2) for v1 in a1 for v2 in a2]
        rng.shuffle(pool)
    else:
        pool = (_draw(options, rng) for _ in range(limit * 50))
    out: list[tuple[str, dict]] = []
    seen = {source, *exclude}
    for change in pool:
        new = apply(source, change)
        if new not in seen:
            seen.add(new)
            out.append((new, change))
            if len(out) >= limit:
                break
    return out


def _draw(options: list[tuple[str, tuple[str, ...]]], rng: random.Random) -> dict[str, str]:
    k = 1 if len(options) < 2 or rng.random() < 0.5 else 2
    return {name: rng.choice(alts) for name, alts in rng.sample(options, k)}
