"""The timed figures' twins, beside the judge's device time: a loop of calls back to back with the host's
work in it (LoopTiming), and each function replayed in a CUDA graph with no launch gaps (GraphTiming).
Plain frozen dataclasses of JSON-friendly values, as the Evaluation that holds them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def host_share(device_ms: float | None, loop_ms: float | None) -> float | None:
    """Of a call back to back (`loop_ms`), the share that is not device time; 0 where the device time is
    the larger (the host keeps ahead); None where either is unknown."""
    return max(0.0, 1 - device_ms / loop_ms) if device_ms and loop_ms else None


@dataclass(frozen=True)
class LoopTiming:
    """The host-inclusive twin of the timed figures: calls back to back, as a user's loop makes them
    (judge/measure/loop.py). Device time ranks single operators; this is what a loop pays with the
    host's work (Python, allocation, launches) in it."""

    calls: int  # back to back per timed block
    candidate_ms: float  # per call
    eager_ms: float
    speedup_eager: float
    speedup_eager_ci: tuple[float, float]
    compiled_ms: float | None = None  # torch.compile's, where measured (rescaled like the device figure)
    speedup_compile: float | None = None
    speedup_compile_ci: tuple[float, float] | None = None
    device_ms: float | None = None  # the candidate's device time per call, for the host's share

    @property
    def host_share(self) -> float | None:
        """Of a call back to back, the share that is not the candidate's device time (0 where the
        device time is the larger: the host keeps ahead)."""
        return host_share(self.device_ms, self.candidate_ms)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LoopTiming":
        return cls(**_paired(data))


@dataclass(frozen=True)
class GraphTiming:
    """Device time as a model's CUDA graph replays it (judge/measure/graphs.py): the candidate, eager and
    torch.compile each captured once and replayed, in one fresh process. Events around a call count the
    gaps between a function's own launches; inside a graph they are gone, so this is the figure that
    says what a part can give a model run under reduce-overhead. `why` where it was not measured."""

    candidate_ms: float | None = None
    eager_ms: float | None = None
    compiled_ms: float | None = None
    speedup_compile: float | None = None
    speedup_compile_ci: tuple[float, float] | None = None
    speedup_eager: float | None = None
    speedup_eager_ci: tuple[float, float] | None = None
    why: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GraphTiming":
        return cls(**_paired(data))


def _paired(data: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON with its intervals ([low, high] lists) as tuples."""
    return {**data, **{key: tuple(data[key]) if data.get(key) else None
                       for key in ("speedup_eager_ci", "speedup_compile_ci")}}
