"""The archive's rows as records: what Store's reads return (archive/store/), one frozen dataclass per row family.

Kept apart from rows.py (column values, JSON columns, vectors: the helpers) so that a reader finds every record the
archive hands out in one place. A change is a new record (`dataclasses.replace`), never a patched one.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from kernelevo.evaluation import Evaluation

from .rows import PARENT_STONE, intervals, loads


@dataclass(frozen=True)
class BenchRecord:
    """A bench as stored: its suite, mode (search or candidates), the settings it started with (`config`, which a
    resumed bench goes on with), where it ran and how it stands; `benches()` also counts its tasks and those done."""

    id: str
    suite: str
    mode: str
    config: dict
    device_name: str
    torch_version: str
    status: str
    created_at: float
    finished_at: float | None
    tasks: int | None = None
    done: int | None = None

    @classmethod
    def of(cls, row: dict) -> "BenchRecord":
        """From a `benches` row (its config still JSON text)."""
        return cls(**{**row, "config": loads(row["config"]) or {}})


@dataclass(frozen=True)
class Spend:
    """A run's LLM calls summed: how many, failed, replayed (answered from a recording, at no cost), the sum of the
    known costs and how many had none, and the token sums."""

    calls: int = 0
    failed_calls: int = 0
    replayed: int = 0
    cost_usd: float = 0.0
    unknown_cost_calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every token a prompt sent: new, read from the provider's cache, written to it."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True)
class Counts:
    """A run's counters, always derived from its rows: search evaluations (and by verdict), every evaluation by
    purpose, kernels (by operator, the highest generation), and the kernels without a source by problem."""

    kernels: int = 0
    max_generation: int | None = None  # None before a kernel
    verdicts: dict = field(default_factory=dict)  # verdict -> search evaluations
    operators: dict = field(default_factory=dict)  # operator -> kernels
    problems: dict = field(default_factory=dict)  # problem -> kernels with no source (a failed call, an edit)
    evaluations_by_purpose: dict = field(default_factory=dict)  # purpose -> evaluations

    @property
    def evaluations(self) -> int:
        """The search's judgements (not its final figures or re-measurements)."""
        return self.evaluations_by_purpose.get("search", 0)


@dataclass(frozen=True)
class ReflectionRecord:
    """A reflection as stored: the analysis a reflect call wrote of measured variants (`variant_ids`, fastest
    first as the prompt showed them), and the kernel that came of it, once there is one."""

    id: int
    run_id: str
    kernel_id: int | None
    llm_call_id: int | None
    analysis: str
    variant_ids: list
    created_at: float


@dataclass(frozen=True)
class OperatorYield:
    """What one operator's calls in a run came to: `calls` (follow-ups and the functional rewrite count for the
    operator they serve), `replies` (calls whose reply came back), `judged` (those whose kernel went to the judge:
    not a copy, not unparsable), `copies` (replies that were a kernel the run had) and `repeats` (prompts not sent:
    answered before)."""

    calls: int = 0
    replies: int = 0
    judged: int = 0
    copies: int = 0
    repeats: int = 0


@dataclass(frozen=True)
class ModelYield:
    """What one model's calls of one operator in a run came to: `calls`, `cost_usd` (known), `unknown_cost_calls`,
    and of the kernel rows they wrote: `attempts`, `replies` (the call did not fail), `judged` (sent to the judge),
    `correct` (judged ok), `improvements` (its own new island best or niche). A model is its label."""

    operator: str
    model: str
    calls: int = 0
    cost_usd: float = 0.0
    unknown_cost_calls: int = 0
    attempts: int = 0
    replies: int = 0
    judged: int = 0
    correct: int = 0
    improvements: int = 0


@dataclass(frozen=True)
class FormatYield:
    """What one model's calls asking for one format came to: `calls` (follow-ups included), `cost_usd` (known),
    and of the kernel rows they wrote: `attempts`, `judged`, `correct`, `improvements` (as in ModelYield)."""

    format: str
    model: str
    calls: int = 0
    cost_usd: float = 0.0
    attempts: int = 0
    judged: int = 0
    correct: int = 0
    improvements: int = 0


@dataclass(frozen=True)
class EvaluationRecord:
    """One evaluation of a kernel as stored: why it was made (`purpose`: search, rejudge, final, ...), its verdict
    and figures (speed-ups with their intervals, [low, high] or None; times in ms), where it ran and how long it took,
    the judge's whole record (`data`, as Evaluation.to_dict wrote it) and the profile taken with it."""

    id: int
    kernel_id: int
    run_id: str | None
    purpose: str
    verdict: str
    reason: str
    message: str
    speedup_eager: float | None
    speedup_compile: float | None
    speedup_eager_ci: list | None
    speedup_compile_ci: list | None
    candidate_ms: float | None
    eager_ms: float | None
    compiled_ms: float | None
    device: str
    device_name: str
    torch_version: str
    build_s: float | None
    device_s: float | None
    wall_s: float | None
    data: dict
    profile: dict | None
    created_at: float
    specialized: bool

    @classmethod
    def of(cls, row: dict) -> "EvaluationRecord":
        """From an `evaluations` row: its JSON columns decoded, its intervals' bounds made pairs (the row's own
        `speedup_eager_ci`, a relative half-width kept for older readers, gives way to the pair)."""
        row = intervals(dict(row))
        return cls(**{**{f: row.get(f) for f in cls.__dataclass_fields__}, "data": loads(row.get("data")) or {},
                      "profile": loads(row.get("profile")), "specialized": bool(row.get("specialized"))})

    def evaluation(self) -> Evaluation:
        """The judge's record this was stored from."""
        return Evaluation.from_dict(self.data)


@dataclass(frozen=True)
class KernelRecord:
    """A kernel as stored, its JSON columns decoded, with its parents in order and the figures of one evaluation of
    it (None where never judged): its latest search one (kernels, kernel, lineage), the run's fastest (best_kernel),
    its best (stepping_stones, whose `purpose` says which). `depth` (lineage: 1 is a parent), `evaluations` (kernel:
    every one, oldest first), `task_hash` and `task_name` (stepping_stones) are there where the read gives them."""

    id: int
    task_id: int
    run_id: str | None
    source: str
    source_hash: str
    format: str
    operator: str
    llm_call_id: int | None
    generation: int
    island: int
    origin: str
    stepping_stone: bool
    stone_reason: str
    niche: str
    descriptors: dict | None
    thinking: str
    problem: str
    claims: dict | None
    created_at: float
    account: str = ""
    parents: tuple[int, ...] = ()
    evaluation_id: int | None = None
    verdict: str | None = None
    reason: str | None = None
    message: str | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    speedup_eager_ci: list | None = None  # [low, high], None where not measured
    speedup_compile_ci: list | None = None
    candidate_ms: float | None = None
    eager_ms: float | None = None
    specialized: int | None = None
    loop_ms: float | None = None  # per call back to back, host work included (the evaluation's loop)
    loop_device_ms: float | None = None
    purpose: str | None = None
    depth: int | None = None
    evaluations: tuple[EvaluationRecord, ...] = ()
    task_hash: str | None = None
    task_name: str | None = None

    @classmethod
    def of(cls, row: dict, parents: list[int] | tuple[int, ...] = ()) -> "KernelRecord":
        """From a `kernels` row joined with an evaluation's fields (intervals as `_lo`/`_hi` columns, JSON still
        text), and its parents."""
        row = intervals(dict(row))
        return cls(**{**row, "descriptors": loads(row.get("descriptors")), "claims": loads(row.get("claims")),
                      "stepping_stone": bool(row.get("stepping_stone")), "parents": tuple(parents)})

    @property
    def own_improvement(self) -> bool:
        """A stepping stone for what it did itself (a new best of its island, a new niche), not only as the parent of
        one that did."""
        return self.stepping_stone and not (self.stone_reason or "").startswith(PARENT_STONE)

    def with_evaluation(self, e: EvaluationRecord) -> "KernelRecord":
        """This kernel with the figures of `e` in place of the ones it was read with (a re-measurement's)."""
        loop = e.data.get("loop") or {}
        return replace(self, evaluation_id=e.id, verdict=e.verdict, reason=e.reason, message=e.message,
                       speedup_eager=e.speedup_eager, speedup_compile=e.speedup_compile,
                       speedup_eager_ci=e.speedup_eager_ci, speedup_compile_ci=e.speedup_compile_ci,
                       candidate_ms=e.candidate_ms, eager_ms=e.eager_ms, specialized=e.specialized,
                       loop_ms=loop.get("candidate_ms"), loop_device_ms=loop.get("device_ms"))

    def to_dict(self) -> dict:
        """As JSON shows it: every field, each evaluation a dict."""
        return asdict(self)


@dataclass(frozen=True)
class FormatBest:
    """A format's fastest kernel judged ok in a run: its speed-up over eager and that figure's interval ([low,
    high]); both None where the kernel was judged without timing (Triton's interpreter)."""

    kernel_id: int
    speedup_eager: float | None = None
    speedup_eager_ci: list | None = None


@dataclass(frozen=True)
class CallUsage:
    """A run's calls of one operator by one model (its label) asking for one format ("" where none was asked):
    what they spent, and the seconds they took in all."""

    operator: str
    model: str
    format: str
    spend: Spend
    latency_s: float = 0.0


@dataclass(frozen=True)
class Judged:
    """One search evaluation of a run, in the order the run judged them: its verdict, speed-up over eager and that
    figure's interval, when, and the known spend of the run's calls up to then."""

    evaluation_id: int
    kernel_id: int
    verdict: str
    reason: str
    speedup_eager: float | None
    speedup_eager_ci: list | None
    created_at: float
    spent_usd: float


@dataclass(frozen=True)
class AnsweredCall:
    """One answered call of a run, as a replay serves it again: the operator that asked, the reply, the hash of
    the prompt it answered and its form (agent.client.prompt_form; '' before it was recorded), and the provider and
    model that wrote it ('replay' where it was itself replayed)."""

    operator: str
    reply: str
    prompt_hash: str
    provider: str
    model: str
    prompt_form: str = ""


@dataclass(frozen=True)
class EventRecord:
    """Something that happened in a run (or, with no run, in the archive), in the order written: its kind and
    its data, whose fields the kind decides."""

    id: int
    run_id: str | None
    at: float
    kind: str
    data: dict


@dataclass(frozen=True)
class TaskRecord:
    """A task as stored: a module to speed up, once per source hash (its first name kept)."""

    id: int
    source_hash: str
    name: str
    source: str
    created_at: float


@dataclass(frozen=True)
class RunRecord:
    """A run as stored: one search on a task, the settings it started with (`config`, which a resumed run goes on
    with), its seed, where it ran, how it stands and why it stopped, with its task's hash and name."""

    id: str
    task_id: int
    created_at: float
    config: dict
    seed: int | None
    device: str | None
    gpu_name: str | None
    torch_version: str | None
    cuda_version: str | None
    status: str
    stop_reason: str | None
    finished_at: float | None
    task_hash: str
    task_name: str

    @classmethod
    def of(cls, row: dict) -> "RunRecord":
        """From a `runs` row joined with its task's hash and name (its config still JSON text)."""
        return cls(**{**row, "config": loads(row["config"]) or {}})


@dataclass(frozen=True)
class BenchTaskRecord:
    """One task of a bench as stored (`bench_tasks`: where it stands, its run and the evaluation behind its figures),
    with that evaluation's figures (`evaluation`: its whole record), its run's status and stop reason, its LLM calls
    (`replayed`: those answered from a recording), their known cost and tokens, its run's speed of light (`bound`;
    `bound_beaten`: a kernel ran faster than it) and the fastest of its kernels as the search holds them
    (`search_speedup_*`: each kernel's latest figure), which a task still searching has. A change is a new record
    (`dataclasses.replace`), never a patched one."""

    bench_id: str
    position: int
    path: str
    name: str
    status: str
    task_id: int | None = None
    run_id: str | None = None
    kernel_id: int | None = None
    evaluation_id: int | None = None
    degenerate: str | None = None
    error: str | None = None
    wall_s: float | None = None
    verdict: str | None = None
    reason: str | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    speedup_eager_ci: list | None = None  # [low, high] (95 %), None where not measured
    speedup_compile_ci: list | None = None
    specialized: int | None = None
    device_name: str | None = None
    device: str | None = None
    evaluation: dict | None = None
    run_status: str | None = None
    stop_reason: str | None = None
    calls: int = 0
    cost_usd: float = 0.0
    unknown_cost_calls: int = 0
    replayed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    bound: dict | None = None
    bound_beaten: int = 0
    search_speedup_eager: float | None = None
    search_speedup_compile: float | None = None

    @classmethod
    def of(cls, row: dict) -> "BenchTaskRecord":
        """From a row of Store.bench_tasks' query (JSON columns still text, intervals as `_lo`/`_hi` columns)."""
        row = intervals({**row, "evaluation": loads(row["evaluation"]), "bound": loads(row["bound"])})
        return cls(**{**row, "input_tokens": int(row["input_tokens"] or 0),
                      "output_tokens": int(row["output_tokens"] or 0)})
