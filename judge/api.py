"""The judge as a library: `Judge(...).evaluate(task, path)` -> Evaluation.

Baselines (eager and torch.compile timings of the reference) are measured once per task source,
device model and torch version, and cached as JSON. Every candidate is timed interleaved with
eager in its own process; its speedup over torch.compile scales the cached compile/eager ratio
by that same-process eager time, so both speedups rest on one interleaved measurement. On the
CPU, whose clock drifts with load, a run's final judgement times torch.compile beside the
candidate in a fresh process instead (a rescaled figure was off by 1.7x there).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelevo.judge import verdicts
from kernelevo.judge.run.executor import WorkerLimits, LocalExecutor
from kernelevo.judge.run.drive import BUILDS, COMPARED  # noqa: F401 - what the doctor says of every verdict
from kernelevo.formats import detect_format
from kernelevo.judge.job import Job
from kernelevo.judge.job_result import JobResult
from kernelevo.judge.model_modes import CPU_MODES, MODE_CALLS, MODES, ModelModes, Ratio  # noqa: F401 - what a model's assembly reads
from kernelevo.judge.trials.probe import IMPLAUSIBLE_SPEEDUP
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.judge.results import audit_files, crosscheck_eager, judge_remeasure, to_evaluation
from kernelevo.baseline import Baseline
from kernelevo.evaluation import Evaluation, Profile, Verdict
from kernelevo.runtime import slug
from kernelevo.tasks import Task, source_hash


@dataclass(frozen=True)
class JudgeOptions:
    devices: tuple[str, ...] = ("cuda:0",)
    trials: int = 5
    seed: int = 42
    compile_baseline: bool = True
    sol: bool = False  # baselines also give the reference's speed of light (calibrating the device once)
    input_sets: int = 3
    timing: TimingConfig = field(default_factory=TimingConfig)
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    concurrency: int | None = None
    spares: int = 0
    policy: str = "mixed"  # or "strict" (or "model", for an assembled model): see judge/trials/policy.py
    implausible: dict[str, float] = field(default_factory=dict)  # per task kind; over probe.IMPLAUSIBLE_SPEEDUP
    remeasure_tolerance: float = 0.25  # how far the event speedup may exceed the re-measured one
    eager_tolerance: float = 1.5  # eager next to the candidate vs in its own process (GPU), as a factor
    shapes: str = "general"  # or "exact": check only the task's own shapes, derive no others (trials/shapes.py)
    # The bounds trial under a memory checker (run/bounds.py), for candidates whose trials pass: "final" on
    # the judgements a run announces, "all" on every candidate, "off". Under compute-sanitizer a trial
    # costs 10-30 s of held GPU, several times a whole judgement, so a search checks what it reports.
    bounds: str = "final"
    executor: str = "local"  # or "ray": jobs run on a Ray cluster's nodes (run/ray_executor.py)
    ray_address: str | None = None  # None: $RAY_ADDRESS, else a cluster started on this machine


def sandbox_probe(folder: Path) -> dict:
    """What confines a candidate's process on this machine, tried for real (run/sandbox.py: probe)."""
    from kernelevo.judge.run import sandbox

    return sandbox.probe(folder)


def bounds_checkers() -> dict[str, str | None]:
    """The memory checkers the bounds trial uses (run/bounds.py), by device kind: their paths, or None; and
    "launcher": where a confined worker's checker runs (run/launcher.py), or why a GPU one cannot."""
    from kernelevo.judge.run import bounds, landlock

    where = ("started in the candidate's sandbox by the worker's launcher (judge/run/launcher.py)" if landlock.abi()
             else f"no launcher: {bounds.SANDBOXED}")
    return {"cuda": bounds.compute_sanitizer(), "cpu": bounds.asan_runtime(), "launcher": where}


# The door's other names. Limits (a worker's limits) and TimingConfig are imported above; the Ray
# executor's cluster queries (the doctor, the CLI's devices, a run's placement) load on first use, as
# make_executor loads RayExecutor, so that naming the judge does not start what only --executor ray needs.
_RAY = {"ray_connect": "connect", "ray_nodes": "nodes", "ray_slots": "slots", "ray_worker_info": "worker_info"}


def __getattr__(name: str):
    if name not in _RAY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from kernelevo.judge.run import ray_executor

    return getattr(ray_executor, _RAY[name])


def write_once(path: Path, data: bytes) -> bytes:
    """Write `path` whole or not at all, never replacing it; what it holds afterwards. Two judges
    sharing a cache may measure one baseline at once: had the second replaced the first's file, the
    first would take the change for a candidate's tampering (audit_files) and reject an honest kernel."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # as runtime.write_atomic, which replaces
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    try:
        os.link(partial, path)  # fails if the file exists: the first judge's measurement stays
        return data
    except FileExistsError:
        return path.read_bytes()
    finally:
        os.unlink(partial)


def make_executor(options: JudgeOptions, cache_dir: Path):
    """The executor `options` name: this machine's worker pools, or a Ray cluster."""
    if options.executor == "ray":
        from kernelevo.judge.run.ray_executor import RayExecutor

        return RayExecutor(list(options.devices), cache_dir, options.limits, options.ray_address)
    if options.executor != "local":
        raise ValueError(f"executor {options.executor!r}: use local or ray")
    return LocalExecutor(list(options.devices), cache_dir, options.limits, options.concurrency, options.spares)


class Judge:
    """Owns an executor and the baseline cache; thread-safe `submit`, blocking `evaluate`."""

    def __init__(self, cache_dir: Path, options: JudgeOptions = JudgeOptions(), executor=None):
        self.cache_dir, self.options = Path(cache_dir), options
        self.executor = executor or make_executor(options, self.cache_dir)
        self._baselines: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._known: dict[str, str] = {}  # baseline file -> sha256, as read or written
        self._warmed: set[tuple] = set()  # (task hash, device, mode) whose original compile is cached (_warm)

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.executor.close(cancel=exc_type is not None)

    def _job(self, task: Task, kind: str, **extra) -> Job:
        return Job(kind=kind, task_source=task.source, task_path=task.path, seed=self.options.seed,
                   trials=self.options.trials, input_sets=self.options.input_sets, timing=self.options.timing,
                   policy=self.options.policy, shapes=self.options.shapes, compile=self.options.compile_baseline,
                   sol=self.options.sol, **extra)

    def baseline(self, task: Task, device: str) -> Baseline | None:
        """Cached (or freshly measured) eager (+ torch.compile) timings, the task's kind and its
        warnings; None if the reference itself failed."""
        result = self._baseline(task, device)
        return Baseline.of(result.to_dict()) if result is not None else None

    def _baseline(self, task: Task, device: str, ran_on: dict | None = None) -> JobResult | None:
        """The baseline job's record, as the judge's own checks read it. `ran_on`: the GPU model, torch version and
        node a candidate's result reports; the baseline is the one of that GPU model and torch, measured on that
        node if missing (on a cluster, nodes may differ)."""
        result = self.prefetch_baseline(task, device, ran_on).result()
        return result if result.passed else None

    def prefetch_baseline(self, task: Task, device: str, ran_on: dict | None = None) -> concurrent.futures.Future:
        """The baseline job's future (a JobResult), its job started if it is not cached: a suite asks for all of
        them at once, so that their torch.compile builds (minutes of CPU) overlap instead of queueing."""
        info = ran_on if ran_on and ran_on.get("device_name") else self.executor.device_info(device)
        key = _baseline_key(task.source_hash, info.get("device_name", device), info.get("torch", ""),
                            self.options.compile_baseline, self.options.sol)
        path = self.cache_dir / "baselines" / f"{key}.json"
        with self._lock:
            future = self._baselines.get(key)
            if future is None:
                if path.exists():
                    future = concurrent.futures.Future()
                    data = path.read_bytes()
                    self._known[path.name] = hashlib.sha256(data).hexdigest()
                    future.set_result(JobResult.of(json.loads(data)))
                else:
                    future = self.executor.submit(self._job(task, "baseline"), device, node=info.get("node_id"))
                    future.add_done_callback(lambda f: self._store(path, f))
                self._baselines[key] = future
        return future

    def submit(self, task: Task, candidate_path: str | Path, device: str | None = None, profile: bool = False,
               ncu: bool = True, final: bool = False, source: str | None = None,
               fmt: str | None = None) -> concurrent.futures.Future:
        """Judge one candidate file; the future holds its Evaluation (with its Profile when `profile`
        and it passed). `final`: the figure a run announces; on the CPU, whose clock is noisy,
        torch.compile is then timed beside the candidate instead of rescaled from the cache.
        `source` and `fmt`: the file's text and format where the caller wrote it and knows them
        (read and detected here otherwise)."""
        device = device or self.executor.choose_device()  # kept for this candidate's baseline and profile
        path = Path(candidate_path).resolve()
        source = path.read_text() if source is None else source
        digest = source_hash(source)
        if fmt is None:
            try:
                fmt = detect_format(source)
            except SyntaxError:
                fmt = "unknown"
        job = self._job(task, "candidate", candidate_source=source, candidate_path=str(path),
                        candidate_hash=digest, format=fmt,
                        bounds=self.options.bounds == "all" or (final and self.options.bounds == "final"))
        started = time.monotonic()
        worker_future = self.executor.submit(job, device)
        done: concurrent.futures.Future = concurrent.futures.Future()

        def finish(f: concurrent.futures.Future) -> None:
            try:
                result = verdicts.interpreter_timeout(audit_files(self.cache_dir, f.result(), self._known), fmt, device)
                node = result.node_id or None  # follow-up jobs run where the candidate was timed
                ran_on = {"device_name": result.device_name, "torch": result.torch_version, "node_id": node}
                timed = result.passed and not result.measured.untimed  # the interpreter: no speedup
                baseline = self._baseline(task, device, ran_on) if timed else None
                result = self._second_opinion(task, job, device, result, baseline)
                beside = None
                if final and timed and baseline and "compiled" in baseline.opponent.timing:
                    beside = self.executor.submit(dataclasses.replace(job, kind="compile_beside"), device,
                                                  node=node).result()
                evaluation = to_evaluation(task, digest, fmt, device, result, baseline, time.monotonic() - started,
                                           beside)
                if profile and evaluation.ok:
                    evaluation = dataclasses.replace(evaluation, profile=self._profile(task, job, evaluation, ncu))
                done.set_result(evaluation)
            except Exception as exc:  # noqa: BLE001 - the judge's own failure on this job: a verdict that says so
                done.set_result(Evaluation(Verdict.RUNTIME_ERROR, "judge_error",
                                           f"the judge failed on this job: {type(exc).__name__}: {str(exc)[:200]}",
                                           task=task.name, task_hash=task.source_hash, candidate_hash=digest,
                                           format=fmt, device=device))
            except BaseException as exc:  # noqa: BLE001 - Ctrl-C and the like: surface through the future
                done.set_exception(exc)

        # finish() may wait for a baseline job; waiting inside the executor's own callback thread
        # could starve the pool that must run that job, so it gets a thread of its own.
        worker_future.add_done_callback(lambda f: threading.Thread(target=finish, args=(f,)).start())
        return done

    def evaluate(self, task: Task, candidate_path: str | Path, device: str | None = None, profile: bool = False,
                 ncu: bool = True, final: bool = False) -> Evaluation:
        return self.submit(task, candidate_path, device, profile, ncu, final).result()

    def modes(self, task: Task, candidate_path: str | Path, device: str, modes: tuple[str, ...],
              variants: tuple[str, ...] = ()) -> ModelModes:
        """A whole model in its user's loop: the reference and the candidate (and each drop-in of
        `variants`) in each of `modes`, host included, interleaved in one fresh process on `device`
        (run/modes.py). For a candidate that passed; ValueError (one line) where nothing ran."""
        path = Path(candidate_path).resolve()
        source = path.read_text()
        self._warm(task, device, tuple(m for m in modes if m != "eager"))
        job = self._job(task, "modes", candidate_source=source, candidate_path=str(path),
                        candidate_hash=source_hash(source), format=detect_format(source), modes=tuple(modes),
                        variants=tuple(variants))
        result = self.executor.submit(job, device).result()
        if not result.passed:
            raise ValueError(f"the model's modes were not timed: {result.reason}: {result.message}")
        return ModelModes.from_result(result.figures, device)

    def _warm(self, task: Task, device: str, modes: tuple[str, ...]) -> None:
        """The task's opponent cache filled with the original's compiles in `modes` (run/modes.run_warm), once per
        task, device and mode in this judge: each modes job then compiles the original from a copy of it. A
        failure here is left to the modes job, which compiles from an empty cache as it would without this."""
        with self._lock:
            todo = tuple(m for m in modes if (task.source_hash, device, m) not in self._warmed)
            self._warmed.update((task.source_hash, device, m) for m in todo)
        if todo:
            self.executor.submit(self._job(task, "warm", modes=todo), device).result()

    def profile(self, task: Task, candidate_path: str | Path, evaluation: Evaluation, ncu: bool = True
                ) -> concurrent.futures.Future:
        """Profile a candidate that passed, on the device it was judged on; the future holds a
        Profile (one whose notes say why, when profiling failed)."""
        path = Path(candidate_path).resolve()
        source = path.read_text()
        job = self._job(task, "candidate", candidate_source=source, candidate_path=str(path),
                        candidate_hash=evaluation.candidate_hash, format=evaluation.format)
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(self._profile(task, job, evaluation, ncu))
            except BaseException as exc:  # noqa: BLE001 - surface through the future
                done.set_exception(exc)

        threading.Thread(target=run, daemon=True).start()
        return done

    def _profile(self, task: Task, job: Job, evaluation: Evaluation, ncu: bool) -> Profile:
        profile = dataclasses.replace(job, kind="profile", ncu=ncu,
                                      candidate_ms=evaluation.candidate.median_ms if evaluation.candidate else None,
                                      eager_ms=evaluation.eager.median_ms if evaluation.eager else None)
        result = self.executor.submit(profile, evaluation.device,
                                      node=evaluation.node_id or None).result()
        if not result.passed or not result.profile:
            return Profile(device_name=evaluation.device_name,
                           notes=(result.message or f"profiling failed: {result.reason}",))
        return Profile.from_dict(result.profile)


    def _store(self, path: Path, future: concurrent.futures.Future) -> None:
        if future.exception() is None and future.result().passed:
            kept = write_once(path, json.dumps(future.result().to_dict(), indent=1).encode())
            self._known[path.name] = hashlib.sha256(kept).hexdigest()

    def _second_opinion(self, task: Task, job: Job, device: str, result: JobResult,
                        baseline: JobResult | None) -> JobResult:
        """Cross-checks of a passing result that need another process: eager's time beside the
        candidate against eager's time alone, and a re-measurement of implausible speedups."""
        if not result.passed:
            return result
        checked = crosscheck_eager(result, baseline, device, self.options.eager_tolerance)
        kind = baseline.opponent.kind if baseline else "other"
        limit = {**IMPLAUSIBLE_SPEEDUP, **self.options.implausible}.get(kind, IMPLAUSIBLE_SPEEDUP["other"])
        if not checked.passed or (checked.measured.speedup_eager or 0) <= limit:
            return checked
        second = self.executor.submit(dataclasses.replace(job, kind="remeasure"), device,
                                      node=result.node_id or None).result()
        # On the CPU the two clocks also differ in method (per call after an LLC flush, against
        # back-to-back calls with warm caches): measured 11.7x against 8.6x for an honest kernel.
        tolerance = self.options.remeasure_tolerance if device.startswith("cuda") else \
            max(1.0, self.options.remeasure_tolerance)
        return judge_remeasure(checked, second, kind, limit, tolerance, device)

def _baseline_key(task_hash: str, device_name: str, torch_version: str, compiled: bool, sol: bool = False) -> str:
    # "b2": baselines measured since calls back to back are timed beside (their "loop")
    return f"{task_hash[:16]}-{slug(device_name, torch_version)}-b2{'' if compiled else '-eager'}{'-sol' if sol else ''}"
