"""What a search is asked to do: the run's options (task, models, devices, limits, judge settings)
and the search's own settings, frozen dataclasses, and the judge's options they make; what a search
gives back is in outcome.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import budget as budgets


@dataclass(frozen=True)
class SearchSettings:
    children_per_generation: int = 8
    islands: int = 2
    llm_concurrency: int = 4
    reflect_k: int = 4
    prompt_tokens_estimate: int = 12000  # what a call is reserved at before it is made
    output_tokens_estimate: int = 6000
    profile_per_generation: int = 2  # new island bests profiled per generation (0: none); see loop/children.py
    ncu: bool = True  # a new best of the run gets Nsight Compute's metrics too, when ncu is installed


@dataclass(frozen=True)
class OptimizeOptions:
    task_path: Path
    models: tuple[str, ...]  # "provider:MODEL" or [models.ALIAS] names; several: an ensemble; (): a resumed run's
    devices: tuple[str, ...]  # judge devices: ("cpu",) or ("cuda:0", "cuda:1", ...)
    archive_path: Path
    out_dir: Path
    cache_dir: Path
    fmt: str | None = None  # candidate format asked for; nvrtc on a GPU, c on the CPU; "auto": see formats_of
    limits: budgets.BudgetLimits = field(default_factory=budgets.BudgetLimits)
    settings: SearchSettings = field(default_factory=SearchSettings)
    seed: int = 0
    policy: str = "mixed"
    trials: int = 5
    seed_from: tuple[Path, ...] = ()
    resume: str | None = None
    config_path: Path | None = None
    timing: Any = None  # a judge TimingConfig; None: the judge's default
    compile_baseline: bool = True  # torch.compile measured beside eager
    baseline: str = "compile"  # what fitness is a speedup over: "compile" (where measured) or "eager"
    shapes: str = "general"  # or "exact": the judge derives no other input shapes (judge/trials/shapes.py)
    executor: str = "local"  # or "ray": judge jobs run on a Ray cluster (judge/run/ray_executor.py)
    ray_address: str | None = None  # None: $RAY_ADDRESS, else a cluster started on this machine
    model_for: tuple[tuple[str, str], ...] | None = None  # (operator, model) pins; None: a resumed run's own
    force: bool = True  # search even where torch.compile is near the speed of light (`optimize` asks for it)


def formats_of(fmt: str | None, device: str) -> tuple[str, ...]:
    """The candidate formats a run's calls ask for: the one given (nvrtc on a GPU, c on the CPU by
    default), or with "auto" a CUDA format and Triton side by side (C and Triton on the CPU, where
    Triton runs in its interpreter), each on its own islands."""
    native = "c" if device == "cpu" else "nvrtc"
    if fmt == "auto":
        return (native, "triton")
    return (fmt or native,)


def judge_options(search: OptimizeOptions, devices: tuple[str, ...]):
    """The judge's options of a search's settings on `devices` (a bench's scoring, a model's assembly)."""
    from kernelevo.judge.api import JudgeOptions

    s = search
    return JudgeOptions(devices=devices, policy=s.policy, trials=s.trials, seed=s.seed,
                        compile_baseline=s.compile_baseline, shapes=s.shapes, executor=s.executor, sol=True,
                        ray_address=s.ray_address, **({"timing": s.timing} if s.timing else {}))
