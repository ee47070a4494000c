"""The job record: what the judge asks a worker process to do (the worker's side is run/jobs.py); read by
run/ and trials/ alike, so it sits beside verdicts.py at the top of the room.

A Job is built by the judge's door (api.Judge), carries the task's and the candidate's sources with
the judge's settings, and goes to a fresh worker process: pickled to a Ray task, and as one JSON line
(`to_dict`, read back by `from_dict`) on the worker's stdin or in the job file of the bounds and Nsight
Compute targets. Its fields are plain values for that reason. The defaults are what a worker assumes
of a job that does not say (a baseline job has no candidate).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kernelevo.judge.measure.timing import TimingConfig


@dataclass(frozen=True)
class Job:
    kind: str = "candidate"  # candidate, check, baseline, warm, remeasure, compile_beside, modes or profile (worker.main)
    task_source: str = ""
    task_path: str = ""
    seed: int = 0
    trials: int = 5
    input_sets: int = 3
    timing: TimingConfig = field(default_factory=TimingConfig)
    policy: str = "mixed"
    shapes: str = "general"
    compile: bool = True  # the baseline job also times torch.compile
    sol: bool = False  # the baseline job also estimates the speed of light
    candidate_source: str | None = None
    candidate_path: str | None = None
    candidate_hash: str | None = None
    format: str | None = None  # detected once, by the judge, from the candidate's source
    bounds: bool = False  # the candidate also runs under the memory checker (bounds.py)
    modes: tuple[str, ...] = ()  # modes, warm: the compile modes to run the models in (run/modes.py)
    variants: tuple[str, ...] = ()  # modes: drop-in sources timed beside the candidate (fewer parts in place)
    ncu: bool = True  # profile: with Nsight Compute
    candidate_ms: float | None = None  # profile: the judged times, for the speed-of-light estimate
    eager_ms: float | None = None
    build_jobs: int = 4  # parallel compiler jobs of an inline build (MAX_JOBS), where not set already
    cache_dir: str = ""  # set by the executor: the judge's cache on the machine that runs the job
    peer: str = ""  # a check job: the candidate worker's own folder (its file of outputs on the CPU)
    peer_pid: int = 0  # a check job: the candidate worker's process, whose threads' CPU time it reads
    build_dir: str = ""  # set by the executor as it sends the job: where its builds go (sandbox.Parent.assign)

    @property
    def runs_candidate(self) -> bool:
        """Whether the job's worker runs candidate code: every kind but a baseline's and a warm one's
        (sandbox.OPPONENT) and a check's (the checker holds the reference and compares: trials/checker.py)."""
        return self.kind not in ("baseline", "warm", "check")

    def to_dict(self) -> dict:
        """The job as JSON-friendly values (what crosses to the worker process)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Job":
        return cls(**{**data, "timing": TimingConfig(**data.get("timing") or {}),
                      "modes": tuple(data.get("modes") or ()), "variants": tuple(data.get("variants") or ())})
