"""What a whole model with kernels in place is worth in its user's loop, and which parts earn their place.

The headline of an assembly is the assembled model in its best compile mode against the original in
*its* best mode, both called back to back with the host's work included (judge/run/modes.py), because
that is the choice a user makes: our file, or one line of torch.compile. A kernel faster alone can
make the model slower in place (its call's host cost, a fusion the compiler loses around it), so each
part is confirmed by an A/B in the chosen mode: the model with every part in place against the same
without that part (parts in order of headroom, the split's order). A part whose removal does not make
the model slower beyond noise is reverted. When nothing is left, or the assembly does not beat the
original's best mode beyond noise, nothing is placed, and the line says which mode to run instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kernelevo.judge.api import MODE_CALLS, ModelModes, Ratio


def effects(candidates: list, chosen: str, timed: Callable[[tuple[str, ...]], ModelModes],
            variant: Callable[[list], str], whole: ModelModes) -> None:
    """Each candidate's effect in place, in mode `chosen` (set on it, and `.reverted` where it has none):
    `timed(variants)` times the assembly beside each variant source in that mode; `variant(parts)` is
    the drop-in with `parts`; `whole` is the timing of the assembly against the original."""
    kept = [c for c in candidates if not c.reverted]
    if len(kept) == 1:  # without its one part, the model is the original: already timed beside it
        _judge_effect(kept[0], whole, "original", chosen)
        return
    loop = timed(tuple(variant([o for o in kept if o is not c]) for c in kept))
    for i, c in enumerate(kept):
        _judge_effect(c, loop, f"variant{i}", chosen)


def _judge_effect(c, loop: ModelModes, without: str, mode: str) -> None:
    ratio = loop.ratio((without, mode), ("assembled", mode))
    c.effect = ratio
    c.with_ms, c.without_ms = loop.time("assembled", mode), loop.time(without, mode)
    if ratio is None:  # which of the two failed there, and how: the reason a part is not placed is evidence
        failed = [f"{said} failed there ({loop.errors[f'{name}@{mode}']})"
                  for name, said in (("assembled", "the model with it"), (without, "the model without it"))
                  if f"{name}@{mode}" in loop.errors]
        c.reverted = f"not timed in place in {mode}" + (": " + "; ".join(failed) if failed else "")
    elif not ratio.beyond_noise:
        # the medians and the paired ratio can disagree in direction where the pairs are noise
        c.reverted = (f"no gain in place: the model in {mode} is {_ms(c.without_ms)} without it and "
                      f"{_ms(c.with_ms)} with it (median of paired rounds {ratio.point:.3f}x, interval "
                      f"{ratio.low:.3f}-{ratio.high:.3f})")


def headline(loop: ModelModes) -> tuple[str | None, str | None, Ratio | None]:
    """(the assembly's best mode, the original's best mode, the first's speedup over the second)."""
    mine, theirs = loop.best("assembled"), loop.best("original")
    if mine is None or theirs is None:
        return mine, theirs, None
    return mine, theirs, loop.ratio(("original", theirs), ("assembled", mine))


def table(loop: ModelModes, asked: tuple[str, ...]) -> dict[str, Any]:
    """`modes` of the result: per mode, the original's and the assembly's ms per call, host included,
    as [median, low, high], and what failed there."""
    out = {}
    for mode in asked:
        original, assembled = loop.time("original", mode), loop.time("assembled", mode)
        errors = {m: loop.errors[f"{m}@{mode}"] for m in ("original", "assembled") if f"{m}@{mode}" in loop.errors}
        out[mode] = {"original_ms": triple(original), "assembled_ms": triple(assembled), "errors": errors}
    return out


def nothing_placed(loop: ModelModes | None, why: str) -> str:
    """The one line a user gets when no kernel is handed back: which mode to run instead."""
    best = loop.best("original") if loop else None
    if best is None:
        return f"nothing placed: {why}"
    if best == "eager":
        return f"nothing placed: the model as it is was fastest here, and {why}"
    gain = loop.ratio(("original", "eager"), ("original", best))
    faster = f" is {gain.point:.2f}x eager here" if gain else ""
    return f"nothing placed: {MODE_CALLS[best]}{faster}, and {why}"


def triple(x) -> list[float] | None:
    """A LoopTime (ms, low, high) or a Ratio (point, low, high) as JSON: [median, low, high]."""
    if x is None:
        return None
    return [round(v, 5) for v in (x.ms if hasattr(x, "ms") else x.point, x.low, x.high)]


def _ms(t) -> str:
    return "-" if t is None else f"{t.ms:.3f} ms"


@dataclass(frozen=True)
class Assembly:
    """Where an assembly ended: the model's source and file name, the judge's evaluation of the file,
    the parts in place, the model's timing in its user's loop (None where it was not timed), the modes
    asked for, and how many parts were tried in place."""
    source: str
    name: str
    evaluation: Any
    kept: tuple
    loop: ModelModes | None
    asked: tuple[str, ...]
    tried: int
    as_run: Any = None  # the judge's evaluation of the file run as kernelevo_compile runs it, in a compiled mode

    @property
    def original_best(self) -> str | None:
        return self.loop.best("original") if self.loop else None

    @property
    def speedup(self) -> Ratio | None:
        """The headline: the assembly in its best mode against the original in its best, where parts are in place."""
        return headline(self.loop)[2] if self.loop and self.kept else None

    @property
    def mode(self) -> str:
        """What kernelevo_compile runs: the assembly's best mode, or with nothing placed the original's."""
        best = self.loop.best("assembled") if self.loop and self.kept else self.original_best
        return best or "eager"

    def line(self) -> str:
        """'' where parts are in place (or the judge rejected the file); else the line that says what to run
        instead."""
        if self.kept or not self.evaluation.ok:
            return ""
        why = "no part beat it in place" if self.tried else "no part had a verified kernel faster than its part alone"
        return nothing_placed(self.loop, why)

    def figures(self) -> dict[str, Any]:
        """The result's keys of the user's loop (see assemble --json)."""
        return {"modes": table(self.loop, self.asked) if self.loop else {}, "chosen_mode": self.mode,
                "original_best_mode": self.original_best, "speedup": triple(self.speedup),
                "nothing_placed": self.line(), "compile_s": dict(self.loop.compile_s) if self.loop else {},
                "compiled_from_cache": dict(self.loop.cached) if self.loop else {},
                "verified_as_run": self._as_run()}

    def _as_run(self) -> dict[str, Any] | None:
        """The judgement of the chosen mode as the user runs it: None in eager (the file's own judgement) or
        where nothing is placed."""
        e = self.as_run
        if e is None or not self.kept:
            return None
        return {"mode": self.mode, "verdict": e.verdict, "trials": e.correctness.trials if e.correctness else None,
                "shapes": list(e.shapes.supported) if e.shapes else [],
                "refused": list(e.shapes.refused) if e.shapes else []}

    def delivered(self) -> str:
        """The drop-in as the user gets it: the file judged, with the measured figures in its header and
        kernelevo_compile set to the chosen mode."""
        from .drop_in import drop_in_text

        lines = []
        if self.loop:
            cells = [f"{mode} {_ms(self.loop.time('original', mode))} -> {_ms(self.loop.time('assembled', mode))}"
                     for mode in self.asked]
            tried = "with kernels" if self.kept else "with the parts tried in place (none kept)"
            lines.append(f"In the user's loop (host included), the original -> {tried}: " + "; ".join(cells))
        if self.speedup:
            s = self.speedup
            lines.append(f"{s.point:.2f}x ({s.low:.2f}-{s.high:.2f}) the original in its best mode "
                         f"({self.original_best}), run as kernelevo_compile(model) ({self.mode}).")
        said = self.line() or "Verified and timed as this file is, bar these header lines and KERNELEVO_MODE."
        if self._as_run():
            said += f" Verified as kernelevo_compile(model) runs it ({self.mode}) as well."
        lines.append(said)
        return drop_in_text(self.source, self.name, [c.placed for c in self.kept], self.mode, tuple(lines))
