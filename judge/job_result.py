"""What a judge job hands back out of judge/run: its verdict and why, where it ran, what it cost, and what
it measured. A Job goes in (job.py); a JobResult comes out.

Inside judge/run a result is JSON, as its worker sent it over the event pipe (or a Ray node returned it),
checked and amended there by the judging process (drive.py, launcher.py, sandbox.py). It becomes this
record once, where an executor hands it out; the judge's second opinions and the Evaluation (results.py),
a model's modes (model_modes.py), a profile and the baseline cache read the record.

The verdict and what describes it are fields. `figures` holds what the job's kind measured, as its worker
sent it (the baseline cache keeps it so, to_dict); it is read through one record per kind, never by its keys:
`measured` (a candidate's or a check's: timing, speedup, loop, shapes, correctness), `opponent` (a
baseline's: eager and torch.compile), `remeasured` (a fresh process's second timing), `beside` (torch.compile
timed beside a candidate), `profile`; a model's samples per mode are ModelModes (model_modes.py).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from kernelevo.evaluation import VERDICTS, Confinement, Correctness, KernelResources, TimingStats, Verdict

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
        notes, evidence = data.get("notes") or (), data.get("evidence") or {}
        notes = tuple(str(n) for n in notes if n) if isinstance(notes, (list, tuple)) else (
            f"notes that are not a list, dropped: {str(notes)[:40]!r}",)
        evidence = dict(evidence) if isinstance(evidence, Mapping) else {"unreadable": str(evidence)[:200]}
        record = cls(Verdict(verdict), notes=notes, evidence=evidence, figures=figures,
                     **common, **{k: finite(data.get(k)) for k in _SECONDS})
        return record._readable()

    def _readable(self) -> "JobResult":
        """This record, or where its figures do not read as their kinds' records (a worker's JSON whose timing is
        not TimingStats') the same without them: a passing one becomes the judge's own error, said so; a rejection
        keeps its verdict, reason and evidence, with a note. Never an exception for its caller."""
        try:
            for view in ("measured", "opponent", "remeasured", "beside"):
                getattr(self, view)  # read once here, and kept for every later read (cached_property)
        except Exception as exc:  # noqa: BLE001 - the worker's process ran candidate code: anything is possible
            said = f"the job's figures do not read ({type(exc).__name__}: {str(exc)[:120]})"
            if not self.passed:
                return dataclasses.replace(self, figures={}, notes=(*self.notes, f"{said}; dropped"))
            return dataclasses.replace(self, verdict=Verdict.RUNTIME_ERROR, reason="judge_error", message=said,
                                       figures={}, evidence={"unreadable": f"{type(exc).__name__}: {exc}"[:400]})
        return self

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.OK

    # Each kind's record, read once (in of: a result whose figures do not read is a verdict there) and kept: a
    # frozen record's figures never change.
    @functools.cached_property
    def measured(self) -> "Measured":
        return Measured.of(self.figures)

    @functools.cached_property
    def opponent(self) -> "Opponent":
        return Opponent.of(self.figures)

    @functools.cached_property
    def remeasured(self) -> "Remeasured":
        return Remeasured.of(self.figures)

    @functools.cached_property
    def beside(self) -> "Beside":
        return Beside.of(self.figures)

    @property
    def profile(self) -> Mapping[str, Any] | None:
        """A profile job's figures (Profile.from_dict reads them), None where it sent none."""
        return self.figures.get("profile") or None

    def refused(self, verdict: Verdict, reason: str, message: str, evidence: Mapping[str, Any]) -> "JobResult":
        """This result with a verdict the judging process reached on it (a second opinion's)."""
        return dataclasses.replace(self, verdict=verdict, reason=reason, message=message, evidence=dict(evidence))

    def noted(self, *notes: str, evidence: Mapping[str, Any] | None = None,
              speedup: tuple[float, Any] | None = None) -> "JobResult":
        """This result with more notes, its evidence where given, and a candidate's speedup over eager with its
        interval replaced where given (the re-measured one, reported instead)."""
        figures = dict(self.figures)
        if speedup is not None:
            figures.update(speedup_eager=speedup[0], speedup_eager_ci=speedup[1])
        return dataclasses.replace(self, notes=(*self.notes, *notes), figures=figures,
                                   evidence=dict(self.evidence if evidence is None else evidence))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the job sent, as amended: what the baseline cache keeps and Baseline reads."""
        common = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "figures"}
        return {**self.figures, **common, "verdict": str(self.verdict), "notes": list(self.notes),
                "evidence": dict(self.evidence)}


def finite(value: Any) -> float | None:
    """A figure a worker said, as a float where it is a finite number; None where it is none or something else
    (a string, a NaN, an int no float holds)."""
    try:
        return _number(value)
    except ValueError:
        return None


def _timing(data: Any) -> dict[str, TimingStats]:
    """role -> its TimingStats, from a worker's {role: fields} ("candidate", "eager", "compiled")."""
    return {str(role): _stats(fields) for role, fields in (data or {}).items() if fields}


_STATS = frozenset(f.name for f in dataclasses.fields(TimingStats))


def _stats(fields: Mapping[str, Any]) -> TimingStats:
    """TimingStats of a worker's fields: every one it has, none other, each a finite number (host_ms may be None);
    ValueError otherwise, so that a verdict never rests on a string or a NaN where a time should be."""
    if set(fields) - _STATS:
        raise ValueError(f"timing fields that TimingStats has not: {sorted(set(fields) - _STATS)[:4]}")
    for name, value in fields.items():
        if _number(value) is None and name != "host_ms":
            raise ValueError(f"timing field {name} is missing")
    if not fields.get("median_ms", 0) > 0:  # every speedup divides by it
        raise ValueError(f"a median time that is not positive: {fields.get('median_ms')!r}")
    return TimingStats(**fields)


def _number(value: Any) -> float | None:
    """A figure as a float, None where there is none; ValueError where it is something else (a string, a NaN)."""
    if value is None:
        return None
    try:  # an int of 400 digits overflows a float
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise ValueError(f"a figure that is not a finite number: {str(value)[:40]!r}")
    return float(value)


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """A report as the worker wrote it, None where there is none; ValueError where it is not a mapping."""
    if not value:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"a report that is not a mapping: {str(value)[:40]!r}")
    return value


def as_pair(value: Any) -> tuple[float, float] | None:
    """An interval's (low, high) as floats, None where there is none; ValueError where they are no numbers."""
    if not value:
        return None
    low, high = _number(value[0]), _number(value[1])
    if low is None or high is None:
        raise ValueError(f"an interval without its bounds: {str(value)[:40]!r}")
    return low, high


def _report(value: Any, record: type) -> Mapping[str, Any] | None:
    """A report that becomes `record` (Correctness, Confinement, KernelResources): a mapping of its fields only."""
    found = _mapping(value)
    names = {f.name for f in dataclasses.fields(record)}
    if found and set(found) - names:
        raise ValueError(f"a {record.__name__} report with fields it has not: {sorted(set(found) - names)[:4]}")
    return found


@dataclass(frozen=True)
class Measured:
    """What a candidate's job measured: each role's device time, the speedup over eager with its interval, the
    host-inclusive loop ({"ms": {role: ms}, "eager/candidate": [point, low, high], "calls": n}), and the reports
    of its correctness, shapes, confinement and kernels' resources, as the worker wrote them."""

    timing: Mapping[str, TimingStats]
    speedup_eager: float | None = None
    speedup_eager_ci: tuple[float, float] | None = None
    loop: Mapping[str, Any] | None = None
    correctness: Mapping[str, Any] | None = None
    shapes: Mapping[str, Any] | None = None
    confinement: Mapping[str, Any] | None = None
    policy: str = ""
    resources: tuple[Mapping[str, Any], ...] = ()
    untimed: bool = False  # Triton's interpreter: checked, not timed

    @classmethod
    def of(cls, f: Mapping[str, Any]) -> "Measured":
        return cls(_timing(f.get("timing")), _number(f.get("speedup_eager")), as_pair(f.get("speedup_eager_ci")),
                   _mapping(f.get("loop")), _report(f.get("correctness"), Correctness), _mapping(f.get("shapes")),
                   _report(f.get("confinement"), Confinement), str(f.get("policy") or ""),
                   tuple(_report(r, KernelResources) or {} for r in f.get("resources") or ()), bool(f.get("untimed")))


@dataclass(frozen=True)
class Opponent:
    """What a baseline job measured of the reference: eager's and torch.compile's device times, their ratio with
    its interval where measured together, back to back in a loop, when, and why torch.compile gave none."""

    timing: Mapping[str, TimingStats]
    compiled_over_eager: tuple[float, ...] | None = None  # (point, low, high)
    loop: Mapping[str, Any] | None = None  # {"compiled/eager": [point, low, high], ...}
    measured_at: str = "now"
    compile_error: str = ""
    kind: str = "other"  # the task's kind (probe.py), what an implausible speedup is judged by
    warnings: tuple[str, ...] = ()

    @classmethod
    def of(cls, f: Mapping[str, Any]) -> "Opponent":
        ratio = f.get("compiled_over_eager")
        return cls(_timing(f.get("timing")), tuple(float(r) for r in ratio) if ratio else None, _mapping(f.get("loop")),
                   str(f.get("measured_at") or "now"), str(f.get("compile_error") or ""), str(f.get("kind") or "other"),
                   tuple(str(w["message"]) for w in f.get("warnings") or ()))


@dataclass(frozen=True)
class Remeasured:
    """A fresh process's second timing of an implausible speedup, by another timer."""

    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    timer: str = ""
    times_ms: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, f: Mapping[str, Any]) -> "Remeasured":
        return cls(_number(f.get("speedup")), as_pair(f.get("speedup_ci")), str(f.get("timer") or ""),
                   _mapping(f.get("times_ms")))


@dataclass(frozen=True)
class Beside:
    """torch.compile timed beside a candidate in a fresh process (a final's): the speedups, the device times, the
    loop back to back ({"compiled/candidate": [point, low, high], ...}), each replayed in a CUDA graph, and the
    machine's load while it ran."""

    speedup_compile: float | None = None
    speedup_compile_ci: tuple[float, float] | None = None
    speedup_eager: float | None = None
    timing: Mapping[str, TimingStats] = field(default_factory=dict)
    loop: Mapping[str, Any] = field(default_factory=dict)
    graph: Mapping[str, Any] | None = None
    load: Any = None

    @classmethod
    def of(cls, f: Mapping[str, Any]) -> "Beside":
        return cls(_number(f.get("speedup_compile")), as_pair(f.get("speedup_compile_ci")),
                   _number(f.get("speedup_eager")), _timing(f.get("timing")), _mapping(f.get("loop")) or {},
                   _mapping(f.get("graph")), f.get("load"))
