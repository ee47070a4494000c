"""What a whole model costs in its user's loop, in each compile mode: the record the judge's `modes`
job comes back as (run/modes.py), handed out by the door (api.Judge.modes) to the assembly of a model.

The worker sends per-block samples only (milliseconds per call, host included, every (model, mode)
taking turns in one loop); medians, ratios and their intervals are taken here, in the judging
process. A ratio is the median of per-round ratios of two (model, mode) pairs, with its
distribution-free 95 % interval, so drift that both share cancels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kernelevo.judge.measure.timing import interval, reported

MODES = ("eager", "default", "max-autotune-no-cudagraphs", "reduce-overhead")  # a whole model's, on a GPU
CPU_MODES = ("eager", "default")  # CUDA graphs and autotuned GPU templates are a GPU's

# The search's own names for torch.compile's modes: "eager" is no compile, "default" is torch.compile(model).
MODE_CALLS = {"eager": "the model as it is", "default": "torch.compile(model)",
              "max-autotune-no-cudagraphs": "torch.compile(model, mode='max-autotune-no-cudagraphs')",
              "reduce-overhead": "torch.compile(model, mode='reduce-overhead')"}


@dataclass(frozen=True)
class LoopTime:
    """Milliseconds per call, host included: the median and its 95 % interval."""
    ms: float
    low: float
    high: float


@dataclass(frozen=True)
class Ratio:
    """How many times faster one (model, mode) ran than another, paired by round, with its interval."""
    point: float
    low: float
    high: float

    @property
    def beyond_noise(self) -> bool:
        """Faster with the whole interval above 1."""
        return self.low > 1.0


@dataclass(frozen=True)
class ModelModes:
    """Per "model@mode" the samples of one interleaved loop; the pairs that did not compile or capture,
    with why; the compile seconds of each; whether the clock is a CPU's (intervals widened)."""
    samples: Mapping[str, tuple[float, ...]]
    calls: int
    errors: Mapping[str, str] = field(default_factory=dict)
    compile_s: Mapping[str, float] = field(default_factory=dict)
    cached: Mapping[str, bool] = field(default_factory=dict)  # per compiled pair: whether inductor compiled nothing new
    cpu: bool = False

    @classmethod
    def from_result(cls, result: dict, device: str) -> "ModelModes":
        return cls(samples={k: tuple(v) for k, v in result["samples"].items()}, calls=result["calls"],
                   errors=dict(result.get("errors") or {}), compile_s=dict(result.get("compile_s") or {}),
                   cached=dict(result.get("cached") or {}),
                   cpu=not device.startswith("cuda"))

    def modes(self, model: str) -> list[str]:
        """The modes `model` ran in, in the order they were asked for."""
        return [key.split("@", 1)[1] for key in self.samples if key.split("@", 1)[0] == model]

    def time(self, model: str, mode: str) -> LoopTime | None:
        xs = self.samples.get(f"{model}@{mode}")
        return LoopTime(*interval(list(xs))) if xs else None

    def best(self, model: str) -> str | None:
        """The mode in which `model` ran fastest (by median), or None where it ran in none."""
        timed = [(self.time(model, mode).ms, mode) for mode in self.modes(model)]
        return min(timed)[1] if timed else None

    def ratio(self, slower: tuple[str, str], faster: tuple[str, str]) -> Ratio | None:
        """`slower`'s time over `faster`'s, each a (model, mode): above 1 where `faster` is faster."""
        a, b = self.samples.get("@".join(slower)), self.samples.get("@".join(faster))
        if not a or not b:
            return None
        point, low, high = interval([x / y for x, y in zip(a, b) if y > 0])
        return Ratio(point, *reported(point, [low, high], None, self.cpu))
