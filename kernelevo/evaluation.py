"""What the judge said of a candidate, shared by every room: the evaluation and its parts (timing,
correctness, shapes, profile).

Plain frozen dataclasses of JSON-friendly values, so that they cross process boundaries as
JSON and land in the archive unchanged.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Sequence

from kernelevo.twins import GraphTiming, LoopTiming



class Verdict(enum.StrEnum):
    """The judge's verdicts. A str, so that JSON and the archive keep their text: a verdict read back from
    either compares equal to its member (row["verdict"] == Verdict.OK)."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    REJECTED = "rejected"


VERDICTS = tuple(v.value for v in Verdict)


@dataclass(frozen=True)
class TimingStats:
    """Repeated measurements of one callable, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    mean_ms: float
    n: int
    rel_ci: float  # half-width of the 95 % confidence interval of the median, over the median
    host_ms: float | None = None  # host time to issue one call; above median_ms: launch-bound

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how widely single runs scatter."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms else 0.0


@dataclass(frozen=True)
class Correctness:
    """The worst comparison over all trials (the failing one, when one failed)."""

    trials: int
    passed: int
    rel_l2: float = 0.0  # ||out - ref|| / ||ref||
    max_abs: float = 0.0
    max_rel: float = 0.0
    where: str = ""  # e.g. "trial 3 (scaled x8), output 0, index (12, 7)"
    tolerance: str = ""  # the bounds that applied, for the user to see


@dataclass(frozen=True)
class ShapeReport:
    """The input shapes a candidate was checked on: the task's own, its extra test inputs, and
    shapes the judge derived (other leading and inner sizes). A candidate that refused some of
    them with a clean exception is specialized: correct where it runs, not a drop-in elsewhere."""

    mode: str = "general"  # "exact": only the task's own shapes were checked (--shapes exact)
    supported: tuple[str, ...] = ()  # input shapes it computed correctly, e.g. "float32[13, 16384]"
    refused: tuple[str, ...] = ()  # "<shapes>: <its exception>" for each shape it refused
    notes: tuple[str, ...] = ()  # what could not be derived or judged, and why

    @property
    def specialized(self) -> bool:
        return bool(self.refused)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ShapeReport":
        return cls(mode=data.get("mode", "general"), supported=tuple(data.get("supported") or ()),
                   refused=tuple(data.get("refused") or ()), notes=tuple(data.get("notes") or ()))


@dataclass(frozen=True)
class KernelResources:
    """What the compiler gave one kernel: ptxas's report (-v), through NVRTC or nvcc."""

    name: str  # as in the source (a C++ mangled name is reduced to the function's own name)
    arch: str = ""  # e.g. "sm_90"
    registers: int = 0  # per thread
    spill_stores: int = 0  # bytes
    spill_loads: int = 0  # bytes
    stack_bytes: int = 0  # stack frame per thread (local arrays, spills)
    shared_bytes: int = 0  # static shared memory per block; dynamic shared memory is set at launch
    barriers: int = 0
    compiler: str = ""  # "nvrtc" or "nvcc"


@dataclass(frozen=True)
class KernelTime:
    """One device kernel (or, on the CPU, one operator) in a forward, from the torch profiler."""

    name: str
    launches: float  # per forward
    ms: float  # per forward, all its launches together
    share: float  # of the forward's summed kernel time
    own: bool = False  # one of the candidate's own kernels (not torch's)
    registers: int | None = None  # per thread, as CUPTI saw the launch
    shared_bytes: int | None = None  # per block, static and dynamic
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    occupancy: float | None = None  # CUPTI's estimate of achieved occupancy, %


@dataclass(frozen=True)
class NcuKernel:
    """Nsight Compute's curated metrics for one kernel of one forward."""

    name: str
    duration_us: float
    occupancy: float  # achieved, % of the warps an SM can hold
    dram: float  # DRAM throughput, % of peak
    l2: float  # L2 throughput, % of peak
    sm: float  # SM throughput, % of peak
    registers: int = 0
    stalls: tuple[tuple[str, float], ...] = ()  # (reason, share of stalled cycles; "selected" is not a stall)


@dataclass(frozen=True)
class SpeedOfLight:
    """The fastest the reference's work could run on this device: its FLOPs at the measured compute
    peak, or its minimum bytes at the measured bandwidth, whichever takes longer."""

    flops: float  # counted by torch.utils.flop_counter (matmuls, convolutions, attention)
    bytes: int  # inputs, outputs and parameters, each moved once
    dtype: str  # the reference's floating dtype, which picks the compute peak
    peak_flops: float  # per second, measured
    peak_bytes: float  # per second, measured
    bound: str  # "memory" or "compute"
    bound_ms: float  # the lower bound on one forward of the reference's work
    compute_ms: float = 0.0  # FLOPs / peak
    memory_ms: float = 0.0  # bytes / bandwidth: a floor for any algorithm, not only the reference's
    reference_pct: float | None = None  # bound / measured time, in %
    candidate_pct: float | None = None  # against the memory floor when fewer_flops
    fewer_flops: bool = False  # the candidate beat the compute bound: it does less arithmetic than the reference
    calibration: str = ""  # how and when the peaks were measured


@dataclass(frozen=True)
class Profile:
    """Where a passing candidate's time goes, beside the reference's, and how far from the bound."""

    device_name: str
    backend: str = "cuda"  # or "cpu": then the "kernels" are aten operators and the candidate's C functions
    candidate: tuple[KernelTime, ...] = ()  # largest first
    reference: tuple[KernelTime, ...] = ()
    candidate_ms: float = 0.0  # summed kernel time per forward
    reference_ms: float = 0.0
    resources: tuple[KernelResources, ...] = ()
    ncu: tuple[NcuKernel, ...] = ()
    sol: SpeedOfLight | None = None
    notes: tuple[str, ...] = ()  # what was skipped, and why
    cost_s: float = 0.0  # device time the profile took

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        data = dict(data)
        for key in ("candidate", "reference"):
            data[key] = tuple(KernelTime(**{**k, "grid": tuple(k.get("grid") or ()),
                                            "block": tuple(k.get("block") or ())}) for k in data.get(key) or ())
        data["resources"] = tuple(KernelResources(**r) for r in data.get("resources") or ())
        data["ncu"] = tuple(NcuKernel(**{**n, "stalls": tuple(tuple(s) for s in n.get("stalls") or ())})
                            for n in data.get("ncu") or ())
        data["sol"] = SpeedOfLight(**data["sol"]) if data.get("sol") else None
        data["notes"] = tuple(data.get("notes") or ())
        return cls(**data)


@dataclass(frozen=True)
class Confinement:
    """What held the candidate's process (judge/run/sandbox.py), part by part, each naming its
    mechanism; a part nothing held reads "unconfined: why"."""

    environment: str = ""  # what the worker was given of the judging process's environment
    files: str = ""  # what it may read and write
    network: str = ""
    processes: str = ""  # other processes: ptrace, their memory, signals
    comparison: str = ""  # where the candidate's outputs were compared with the reference's
    builds: str = ""  # where its builds went, and how a kept build was checked

    @property
    def unconfined(self) -> tuple[str, ...]:
        """The parts that nothing held."""
        return tuple(name for name in ("files", "network", "processes") if getattr(self, name).startswith("unconfined"))

    def summary(self) -> str:
        """One line: "sandboxed" and its mechanisms, or which parts ran unconfined."""
        if self.unconfined:
            return "unconfined " + ", ".join(self.unconfined) + ": " + "; ".join(
                getattr(self, name).removeprefix("unconfined: ") for name in self.unconfined)
        mechanisms = sorted({m for part in (self.files, self.network, self.processes) for m in _mechanisms(part)})
        return "sandboxed (" + ", ".join(mechanisms) + ")"


def _mechanisms(text: str) -> list[str]:
    return [m for m in ("Landlock", "seccomp") if m in text]


@dataclass(frozen=True)
class Failure:
    """Why a candidate failed, as the judge said it: the verdict, a stable reason id, one line and an
    excerpt (a compiler's errors, a traceback's tail); for wrong outputs, where and by how much. The
    judge classifies a failure into one (judge/verdicts.py) and a repair prompt shows one (agent)."""

    verdict: str
    reason: str
    message: str
    excerpt: str = ""
    where: str = ""  # wrong outputs: which trial, output and index
    rel_l2: float | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    tolerance: str = ""


@dataclass(frozen=True)
class Figures:
    """What the judge said of a kernel in a search: its verdict, and where it passed its speedups with their 95 %
    intervals and times. A re-measurement replaces them whole (evolution/state.py: remeasured)."""

    verdict: str = "ok"
    reason: str = ""
    message: str = ""
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    speedup_eager_ci: tuple[float, float] | None = None  # None: unknown
    speedup_compile_ci: tuple[float, float] | None = None
    ms: float | None = None
    eager_ms: float | None = None  # eager PyTorch timed alongside it, in the same measurement as `ms`
    loop_ms: float | None = None  # per call back to back, host work included (Evaluation.loop)
    host_share: float | None = None  # of that, what is not its device time (GPU only)

    @classmethod
    def of(cls, e: "Evaluation") -> "Figures":
        """The figures of a judgement: its verdict, speedups with their intervals, and median times."""
        return cls(e.verdict, e.reason, e.message, e.speedup_eager, e.speedup_compile, e.speedup_eager_ci,
                   e.speedup_compile_ci, ms=e.candidate.median_ms if e.candidate else None,
                   eager_ms=e.eager.median_ms if e.eager else None, loop_ms=e.loop.candidate_ms if e.loop else None,
                   host_share=e.loop.host_share if e.loop else None)


@dataclass(frozen=True)
class Lineage:
    """Where a kernel came from in a search: the operator that made it, its parents, its island and generation,
    and the niche its source falls in (evolution/niches.py)."""

    operator: str = ""
    parents: tuple[int, ...] = ()
    island: int = 0
    generation: int = 0
    niche: str = ""


@dataclass(frozen=True)
class Shown:
    """How a prompt shows a kernel: the label it names it by, its condensed profile, notes (what it does well, or how
    it came about) and what came of earlier attempts to change it (attempt lines, newest first)."""

    label: str = "A"
    profile: str = ""
    notes: str = ""
    attempts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Variant:
    """A judged kernel of a search: what it is (source, format, its archive id), what the judge said of it
    (`figures`), where it came from (`lineage`) and how a prompt shows it (`shown`). The search's population holds
    these (evolution/population.py) and the prompts show them (agent/prompting.py). Rebuilt from archive rows on
    resume, so it holds only plain values.

    Fitness: the speedup over the run's `baseline`: torch.compile by default, eager PyTorch where asked
    for or where torch.compile gave no figure (`against`), so every kernel of a run is ranked by one measure."""

    source: str
    format: str
    kernel_id: int | None = None  # its id in the archive: attempt lines and copies name kernels by id
    figures: Figures = field(default_factory=Figures)
    lineage: Lineage = field(default_factory=Lineage)
    shown: Shown = field(default_factory=Shown)
    baseline: str = "eager"  # what the run's fitness is a speedup over: "compile" or "eager"

    @property
    def ok(self) -> bool:
        return self.figures.verdict == Verdict.OK

    @property
    def against(self) -> str:
        """The baseline its fitness measures against: torch.compile where asked for and measured."""
        return "compile" if self.baseline == "compile" and self.figures.speedup_compile is not None else "eager"

    @property
    def fitness(self) -> float:
        """Speedup over the run's baseline (`against`); 0.0 for a failed or unmeasured kernel (never best)."""
        if not self.ok:
            return 0.0
        f = self.figures
        return float((f.speedup_compile if self.against == "compile" else f.speedup_eager) or 0.0)

    @property
    def fitness_ci(self) -> tuple[float, float] | None:
        """The 95 % interval of `fitness`."""
        return self.figures.speedup_compile_ci if self.against == "compile" else self.figures.speedup_eager_ci


@dataclass(frozen=True)
class Evaluation:
    """The judge's verdict on one candidate for one task on one device."""

    verdict: str  # one of VERDICTS
    reason: str  # stable id, e.g. "illegal_memory_access", "value_mismatch"
    message: str  # one readable line
    excerpt: str = ""  # compiler error lines, traceback tail, worst mismatches
    task: str = ""
    task_hash: str = ""
    candidate_hash: str = ""
    format: str = ""
    device: str = ""
    device_name: str = ""
    torch_version: str = ""
    node: str = ""  # on a cluster, where it ran: "HOST/cuda:N" (empty on this machine)
    node_id: str = ""  # the cluster's id of that node: follow-up jobs (profile) run there
    build_s: float | None = None
    device_s: float | None = None  # time this candidate held its device (correctness + timing)
    wall_s: float | None = None
    correctness: Correctness | None = None
    candidate: TimingStats | None = None
    eager: TimingStats | None = None
    compiled: TimingStats | None = None  # torch.compile, rescaled to this run's eager time
    speedup_eager: float | None = None  # median of paired per-round ratios eager/candidate
    speedup_eager_ci: tuple[float, float] | None = None  # its 95 % interval [low, high]
    speedup_compile: float | None = None
    speedup_compile_ci: tuple[float, float] | None = None  # its 95 % interval [low, high]
    notes: tuple[str, ...] = field(default_factory=tuple)
    policy: str = ""  # "mixed" or "strict": what counted as the candidate's own work
    evidence: dict[str, Any] = field(default_factory=dict)  # what the checks measured (event vs wall time...)
    warnings: tuple[str, ...] = field(default_factory=tuple)  # about the task: speedups on it may mean nothing
    resources: tuple[KernelResources, ...] = field(default_factory=tuple)  # of every kernel it built
    profile: Profile | None = None  # when asked for, and only of a passing candidate
    shapes: ShapeReport | None = None  # of a passing candidate: which input shapes it handles
    confinement: Confinement | None = None  # what held its process (None: judged before the sandbox existed)
    loop: LoopTiming | None = None  # of a timed pass: the same calls back to back, host work included
    graph: GraphTiming | None = None  # of a final GPU pass: each replayed in a CUDA graph, as a model's is

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.OK

    @property
    def specialized(self) -> bool:
        """Passed, but refused some valid input shapes: not a drop-in for them."""
        return self.shapes is not None and self.shapes.specialized

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key in ("speedup_eager_ci", "speedup_compile_ci"):  # [low, high] in JSON
            out[key] = list(out[key]) if out[key] is not None else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Evaluation":
        data = dict(data)
        data["speedup_eager_ci"] = _interval(data.get("speedup_eager"), data.get("speedup_eager_ci"))
        data["speedup_compile_ci"] = _interval(data.get("speedup_compile"), data.get("speedup_compile_ci"))
        if data.get("correctness"):
            data["correctness"] = Correctness(**data["correctness"])
        for key in ("candidate", "eager", "compiled"):
            if data.get(key):
                data[key] = TimingStats(**data[key])
        data["notes"] = tuple(data.get("notes") or ())
        data["warnings"] = tuple(data.get("warnings") or ())
        data["resources"] = tuple(KernelResources(**r) for r in data.get("resources") or ())
        data["profile"] = Profile.from_dict(data["profile"]) if data.get("profile") else None
        data["shapes"] = ShapeReport.from_dict(data["shapes"]) if data.get("shapes") else None
        data["confinement"] = Confinement(**data["confinement"]) if data.get("confinement") else None
        data["loop"] = LoopTiming.from_dict(data["loop"]) if data.get("loop") else None
        data["graph"] = GraphTiming.from_dict(data["graph"]) if data.get("graph") else None
        return cls(**data)


def faster_beyond_noise(speedup: float | None, ci: Sequence[float] | None, incumbent: float | None,
                        incumbent_ci: Sequence[float] | None) -> bool:
    """Whether `speedup` beats `incumbent` by more than their noise: its 95 % interval lies wholly
    above the incumbent's. Where either interval is unknown, a higher median is enough (the rule
    before intervals); overlapping intervals are a tie, never a win."""
    if speedup is None:
        return False
    if incumbent is None:
        return True
    if ci is None or incumbent_ci is None:
        return speedup > incumbent
    return ci[0] > incumbent_ci[1]


def _interval(point: float | None, stored: Any) -> tuple[float, float] | None:
    """[low, high] as stored; evaluations recorded before intervals kept a relative half-width."""
    if stored is None or point is None:
        return None
    if isinstance(stored, (int, float)):
        return (point * (1 - stored), point * (1 + stored))
    return (float(stored[0]), float(stored[1]))
