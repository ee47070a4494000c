"""What a judge job hands back out of judge/run: its verdict and why, where it ran, what it cost, and what
it measured. A Job goes in (job.py); a JobResult comes out.

Inside judge/run a result is JSON, as its worker sent it over the event pipe (or a Ray node returned it),
checked and amended there by the judging process (drive.py, launcher.py, sandbox.py). It becomes this
record once, where an executor hands it out; the judge's second opinions and the Evaluation (results.py),
a model's modes (model_modes.py), a profile and the baseline cache read the record.

The verdict and what describes it are fields. `figures` holds what the job's kind measured, as its
worker sent it: a candidate's timing, speedups, loop, shapes and correctness; a baseline's timing,
kernels and speed of light; a re-measurement's; a profile; a model's samples per mode. Each reader turns
those into its own records (TimingStats, LoopTiming, ShapeReport, Baseline, ModelModes, Profile).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from kernelevo.evaluation import VERDICTS, Verdict

_TEXT = ("reason", "message", "excerpt", "device_name", "torch_version", "node", "node_id")
_SECONDS = ("build_s", "device_s", "wall_s")


@dataclass(frozen=True)
class JobResult:
    verdict: Verdict
    reason: str = ""  # a stable id ("timing_mismatch"); empty where the verdict is ok
    message: str = ""  # one line for the user
    excerpt: str = ""  # a compiler's errors, a traceback's or a log's tail
    notes: tuple[str, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)  # what a rejection rests on, and what was checked
    device_name: str = ""
    torch_version: str = ""
    node: str = ""  # a Ray node's address, and its id (where a follow-up job must run beside this one)
    node_id: str = ""
    build_s: float | None = None
    device_s: float | None = None  # held device time, by the judging process's clock (drive.audit)
    wall_s: float | None = None
    figures: Mapping[str, Any] = field(default_factory=dict)  # what the job's kind measured (see the module)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> "JobResult":
        """The record of a job's JSON. A verdict that is none of the judge's is the judge's own error, said so
        (a worker only makes its verdict worse: drive.audit refused a passing result it did not believe)."""
        verdict = data.get("verdict")
        figures = {k: v for k, v in data.items()
                   if k not in ("verdict", "notes", "evidence", *_TEXT, *_SECONDS)}
        common = {k: str(data.get(k) or "") for k in _TEXT}
        if verdict not in VERDICTS:
            common.update(reason="judge_error", message=f"the job's result has no verdict of the judge's "
                                                        f"({str(verdict)[:40]!r}): {common['message']}".rstrip(": "))
            verdict = Verdict.RUNTIME_ERROR
        return cls(Verdict(verdict), notes=tuple(str(n) for n in data.get("notes") or () if n),
                   evidence=dict(data.get("evidence") or {}), figures=figures,
                   **common, **{k: _seconds(data.get(k)) for k in _SECONDS})

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.OK

    def figure(self, name: str, default: Any = None) -> Any:
        """One of the figures the job measured, or `default` where it sent none."""
        value = self.figures.get(name)
        return default if value is None else value

    def refused(self, verdict: Verdict, reason: str, message: str, evidence: Mapping[str, Any]) -> "JobResult":
        """This result with a verdict the judging process reached on it (a second opinion's)."""
        return dataclasses.replace(self, verdict=verdict, reason=reason, message=message, evidence=dict(evidence))

    def noted(self, *notes: str, evidence: Mapping[str, Any] | None = None, **figures: Any) -> "JobResult":
        """This result with more notes, its evidence where given, and figures replaced (a re-measured speedup)."""
        return dataclasses.replace(self, notes=(*self.notes, *notes), figures={**self.figures, **figures},
                                   evidence=dict(self.evidence if evidence is None else evidence))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the job sent, as amended: what the baseline cache keeps and Baseline reads."""
        common = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "figures"}
        return {**self.figures, **common, "verdict": str(self.verdict), "notes": list(self.notes),
                "evidence": dict(self.evidence)}


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
