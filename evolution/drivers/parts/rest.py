"""Where a model's time that no written part holds goes (split.py): the own forwards of the modules
opened into their children, modules left out, and parts past --top; and the one line that says so when
a split is short of its --cover.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .record import Recording
from .region import Region


@dataclass
class Rest:
    """Where the model's time that no written part holds goes: the own forwards of the modules opened
    into their children (the model's included: torch calls outside any submodule), modules left out
    (with their reasons among the notes), and parts past --top."""
    opened: list[str]
    left_out_ms: float = 0.0
    past_top_ms: float = 0.0
    in_regions: dict[str, float] = field(default_factory=dict)  # ms of regions written or past --top, by module

    def own_ms(self, recording: Recording) -> dict[str, float]:
        """Each opened module's time outside its children and its regions counted elsewhere, most first."""
        sites = recording.sites

        def inclusive(path: str) -> float:  # a container never called (ModuleList) holds its children's time
            site = sites[path]
            return site.ms if site.calls else sum(inclusive(c) for c in site.children)

        own = {p: max(0.0, sites[p].ms - sum(inclusive(c) for c in sites[p].children) - self.in_regions.get(p, 0.0))
               for p in self.opened if sites[p].calls}
        return dict(sorted(own.items(), key=lambda kv: -kv[1]))

    def held(self, part) -> None:
        """A region's time, now a task's (written, or past --top): no longer its modules' own."""
        if isinstance(part, Region):
            for site, ms in zip(part.sites, part.site_ms):
                self.in_regions[site.path] = self.in_regions.get(site.path, 0.0) + ms

    def shares(self, recording: Recording) -> dict:
        own = self.own_ms(recording)
        return {"own_forwards": rounded(recording.share(sum(own.values()))),
                "own_by_module": {p or "the model": rounded(recording.share(ms)) for p, ms in list(own.items())[:5]},
                "left_out": rounded(recording.share(self.left_out_ms)),
                "past_top": rounded(recording.share(self.past_top_ms))}

    @staticmethod
    def line(shares: dict, covered: float, cover: float, top: int) -> str:
        """One line from `shares` (Rest.shares): the cover short of its target, and where the rest goes."""
        def pct(share: float | None) -> str:
            return f"{100 * (share or 0.0):.1f} %"

        named = ", ".join(f"{p} {pct(x)}" for p, x in list(shares["own_by_module"].items())[:3] if x)
        # a model that is mostly its own forward is one task already: its file is in KernelBench's form
        whole = "; most of it is the model's own forward: `kernelevo optimize` on the model file searches it " \
            "as one task" if (shares["own_by_module"].get("the model") or 0.0) >= 0.5 else ""
        return (f"covered {100 * covered:.1f} % of the {100 * cover:.0f} % asked: {pct(shares['own_forwards'])} is in "
                f"forwards' own torch calls outside any submodule ({named or 'none'}), {pct(shares['left_out'])} in "
                f"modules left out (above), {pct(shares['past_top'])} in parts past --top {top}{whole}")


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
