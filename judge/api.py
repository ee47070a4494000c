"""The judge as a library: `Judge(...).evaluate(task, path)` -> Evaluation.

Baselines (eager and torch.compile timings of the reference) are measured once per task source,
device model and torch version, and cached as JSON. Every candidate is timed interleaved with
eager in its own process; its speedup over torch.compile scales the cached compile/eager ratio
by that same-process eager time, so both speedups rest on one interleaved measurement.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelevo.judge.executor import Limits, LocalExecutor
from kernelevo.judge.formats import detect_format
from kernelevo.judge.timing import TimingConfig
from kernelevo.records import Correctness, Evaluation, TimingStats
from kernelevo.tasks import Task, source_hash


@dataclass(frozen=True)
class JudgeOptions:
    devices: tuple[str, ...] = ("cuda:0",)
    trials: int = 5
    seed: int = 42
    compile_baseline: bool = True
    input_sets: int = 3
    timing: TimingConfig = field(default_factory=TimingConfig)
    limits: Limits = field(default_factory=Limits)
    concurrency: int | None = None
    spares: int = 0


class Judge:
    """Owns an executor and the baseline cache; thread-safe `submit`, blocking `evaluate`."""

    def __init__(self, cache_dir: Path, options: JudgeOptions = JudgeOptions(), executor=None):
        self.cache_dir, self.options = Path(cache_dir), options
        self.executor = executor or LocalExecutor(list(options.devices), self.cache_dir, options.limits,
                                                  options.concurrency, options.spares)
        self._baselines: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.executor.close(cancel=exc_type is not None)

    def _job(self, task: Task, kind: str, **extra) -> dict:
        return {"kind": kind, "task_source": task.source, "task_path": task.path, "seed": self.options.seed,
                "trials": self.options.trials, "input_sets": self.options.input_sets,
                "timing": dataclasses.asdict(self.options.timing), **extra}

    def baseline(self, task: Task, device: str) -> dict | None:
        """Cached (or freshly measured) eager + torch.compile timings; None when not wanted."""
        if not self.options.compile_baseline:
            return None
        info = self.executor.device_info(device)
        key = _baseline_key(task.source_hash, info.get("device_name", device), info.get("torch", ""))
        path = self.cache_dir / "baselines" / f"{key}.json"
        with self._lock:
            future = self._baselines.get(key)
            if future is None:
                if path.exists():
                    future = concurrent.futures.Future()
                    future.set_result(json.loads(path.read_text()))
                else:
                    future = self.executor.submit(self._job(task, "baseline"), device)
                    future.add_done_callback(lambda f: _store(path, f))
                self._baselines[key] = future
        result = future.result()
        return result if result.get("verdict") == "ok" else None

    def submit(self, task: Task, candidate_path: str | Path, device: str | None = None
               ) -> concurrent.futures.Future:
        """Judge one candidate file; the future holds its Evaluation."""
        device = device or self.options.devices[0]
        path = Path(candidate_path).resolve()
        source = path.read_text()
        digest = source_hash(source)
        try:
            fmt = detect_format(source)
        except SyntaxError:
            fmt = "unknown"
        job = self._job(task, "candidate", candidate_source=source, candidate_path=str(path),
                        candidate_hash=digest, format=fmt)
        started = time.monotonic()
        worker_future = self.executor.submit(job, device)
        done: concurrent.futures.Future = concurrent.futures.Future()

        def finish(f: concurrent.futures.Future) -> None:
            try:
                result = f.result()
                baseline = self.baseline(task, device) if result.get("verdict") == "ok" else None
                done.set_result(to_evaluation(task, digest, fmt, device, result, baseline,
                                              time.monotonic() - started))
            except BaseException as exc:  # noqa: BLE001 - surface through the future
                done.set_exception(exc)

        # finish() may wait for a baseline job; waiting inside the executor's own callback thread
        # could starve the pool that must run that job, so it gets a thread of its own.
        worker_future.add_done_callback(lambda f: threading.Thread(target=finish, args=(f,)).start())
        return done

    def evaluate(self, task: Task, candidate_path: str | Path, device: str | None = None) -> Evaluation:
        return self.submit(task, candidate_path, device).result()


def _store(path: Path, future: concurrent.futures.Future) -> None:
    if future.exception() is None and future.result().get("verdict") == "ok":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(future.result(), indent=1))


def _baseline_key(task_hash: str, device_name: str, torch_version: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{device_name}-{torch_version}").strip("-")
    return f"{task_hash[:16]}-{slug}"


def _stats(data: dict | None, scale: float = 1.0) -> TimingStats | None:
    if not data:
        return None
    scaled = ("median_ms", "p10_ms", "p90_ms", "min_ms", "mean_ms")  # device times; host time stays as measured
    return TimingStats(**{k: (v * scale if k in scaled else v) for k, v in data.items()})


def to_evaluation(task: Task, digest: str, fmt: str, device: str, result: dict,
                  baseline: dict | None, wall_s: float) -> Evaluation:
    """Combine a worker's result (and the cached baseline) into the Evaluation record."""
    timing = result.get("timing") or {}
    cand, eager = _stats(timing.get("candidate")), _stats(timing.get("eager"))
    notes = [n for n in result.get("notes", []) if n]
    compiled = speedup_compile = None
    if cand and eager and baseline and "compiled" in baseline.get("timing", {}):
        base = baseline["timing"]
        factor = eager.median_ms / base["eager"]["median_ms"]
        compiled = _stats(base["compiled"], factor)
        speedup_compile = compiled.median_ms / cand.median_ms
        notes.append(f"torch.compile measured {baseline.get('measured_at', 'now')}, "
                     f"rescaled by this run's eager time (x{factor:.3f})")
    elif baseline and baseline.get("compile_error"):
        notes.append(f"torch.compile failed on the reference: {baseline['compile_error']}")
    correctness = result.get("correctness")
    return Evaluation(
        verdict=result["verdict"], reason=result.get("reason", ""), message=result.get("message", ""),
        excerpt=result.get("excerpt", ""), task=task.name, task_hash=task.source_hash,
        candidate_hash=digest, format=fmt, device=device, device_name=result.get("device_name", ""),
        torch_version=result.get("torch_version", ""), build_s=result.get("build_s"),
        device_s=result.get("device_s"), wall_s=wall_s,
        correctness=Correctness(**correctness) if correctness else None, candidate=cand, eager=eager,
        compiled=compiled, speedup_eager=result.get("speedup_eager"),
        speedup_eager_ci=result.get("speedup_eager_ci"), speedup_compile=speedup_compile, notes=tuple(notes))
