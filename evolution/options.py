"""What a search is asked to do: the run's options (task, models, devices, output) holding a branch for
each component that reads settings: the search's own (SearchSettings), the budget's (BudgetLimits) and the
judge's (its JudgeOptions, handed to the judge as they are); frozen dataclasses. They are resolved from
defaults, kernelevo.toml and a caller's overrides in settings.py; what a search gives back is in outcome.py."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.formats import native

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


def _no_config() -> Any:
    from kernelevo.config import Config

    return Config()


def _judge_defaults() -> Any:
    from kernelevo.judge.api import JudgeOptions

    return JudgeOptions()


@dataclass(frozen=True)
class OptimizeOptions:
    task_path: Path
    models: tuple[str, ...]  # "provider:MODEL" or [models.ALIAS] names; several: an ensemble; (): a resumed run's
    devices: tuple[str, ...]  # judge devices: ("cpu",) or ("cuda:0", "cuda:1", ...)
    archive_path: Path
    out_dir: Path
    cache_dir: Path
    fmt: str | None = None  # candidate format asked for; None: kernelevo.formats.native; "auto": see formats_of
    budget: budgets.BudgetLimits = field(default_factory=budgets.BudgetLimits)  # the budget's branch
    settings: SearchSettings = field(default_factory=SearchSettings)
    # The judge's branch (policy, trials, shapes, timing, compile_baseline, executor, ...): the judge gets it
    # as it is, with the run's devices and seed (judge_options). compile_baseline: torch.compile measured beside eager.
    # judge.seed is the run's one seed: the judge's weights and inputs, and the search's random choices (`seed`).
    judge: Any = field(default_factory=_judge_defaults)
    seed_from: tuple[Path, ...] = ()
    resume: str | None = None
    config: Any = field(default_factory=_no_config)  # kernelevo.toml as read once, by the caller (a Config)
    baseline: str = "compile"  # what fitness is a speedup over: "compile" (where measured) or "eager"
    model_for: tuple[tuple[str, str], ...] | None = None  # (operator, model) pins; None: a resumed run's own
    force: bool = False  # search even where torch.compile is near the speed of light (a bench's tasks always are)
    # with resume: no search and no call, only the run's final judgement made again by this judge (one fixed since
    # the run ended); the run keeps its status and stop reason, and the new judgements join the old
    judge_again: bool = False

    @property
    def seed(self) -> int:
        """The run's seed, held once, in the judge's branch."""
        return self.judge.seed

    @property
    def ranked_by(self) -> str:
        """The baseline kernels are ranked by: `baseline`, or eager where torch.compile is not measured."""
        return self.baseline if self.judge.compile_baseline else "eager"


def formats_of(fmt: str | None, device: str) -> tuple[str, ...]:
    """The candidate formats a run's calls ask for: the one given (nvrtc on a GPU, c on the CPU by
    default), or with "auto" a CUDA format and Triton side by side (C and Triton on the CPU, where
    Triton runs in its interpreter), each on its own islands."""
    if fmt == "auto":
        return (native(device), "triton")
    return (fmt or native(device),)


def judge_options(search: OptimizeOptions, devices: tuple[str, ...]):
    """The judge's branch of a search's options, on `devices` (a bench's scoring, a model's assembly), with the
    speed of light measured with the baselines."""
    return dataclasses.replace(search.judge, devices=devices, sol=True)
