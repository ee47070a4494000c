"""The worker's baseline job: the reference timed in eager and under torch.compile (device time and
back to back), what kind of task it is, and on request how far each is from the speed of light; on a
GPU, each side's kernels under the profiler (what the prompts show of the opponent)."""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from kernelevo.judge.measure import timing
from kernelevo.judge.measure.kernels import breakdown
from kernelevo.judge.job import Job
from kernelevo.judge.run.jobs import _compiled, _input_sets, _load_task, _loop, _timing_config, forward, \
    torch_device_name
from kernelevo.judge.trials import inputs


def run(job: Job, device: str, channel) -> dict:
    """Eager and torch.compile timings of the reference, interleaved, and what kind of task it is."""
    import torch
    from kernelevo.judge.trials import probe

    task = _load_task(job)
    inputs.seed_all(job.seed)
    model = task.Model(*task.get_init_inputs()).to(device)
    sets = _input_sets(task, job, device, job.input_sets)
    fns: dict = {"eager": lambda a: forward(model, a)}
    result: dict[str, Any] = {"verdict": "ok", "reason": "", "message": ""}
    started = time.perf_counter()
    if job.compile:  # before the device is held: a bench's baselines compile side by side
        try:
            compiled = _compiled(model, sets, device)
            fns["compiled"] = lambda a: forward(compiled, a)
        except Exception as exc:  # noqa: BLE001 - torch.compile failing is a fact to record
            result["compile_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    result["compile_s"] = time.perf_counter() - started
    channel.acquire_device()
    with torch.no_grad():
        result["kind"], result["ops"] = probe.task_kind(model, sets[0], device)
        result["warnings"] = [dataclasses.asdict(w) for w in probe.degenerate(task, model, device, job.seed)]
    result["measured_at"] = time.strftime("%Y-%m-%d %H:%M")
    over = (("compiled", "eager"),) if "compiled" in fns else ()
    with channel.quiet():
        measured = timing.measure(fns, sets, device, _timing_config(job), ratios=over)
        result["loop"] = _loop(fns, sets, device, job.timing.max_seconds, *over)  # the same ratio with host work, back to back
        if device.startswith("cuda"):  # what the prompts show of the opponent: its kernels, by time
            result["kernels"] = _kernels(fns, sets[0], device)
        if job.sol:  # how far each baseline is from the bound: what is left for a kernel to win
            result["sol"] = _speed_of_light(model, sets[0], device, job, measured)
    result["timing"] = {name: dataclasses.asdict(s) for name, s in measured.stats.items()}
    if "compiled" in fns:  # compiled/eager per round, with its interval: what a candidate's figure is scaled by
        median, (lo, hi) = measured.speedup("compiled", "eager")
        result["compiled_over_eager"] = [median, lo, hi]
    return result


BASELINE_KERNELS = 8  # largest first, per side: what a prompt can use of the opponent's profile


def _kernels(fns: dict, args: list, device: str) -> dict:
    """Each baseline's device kernels under the torch profiler ([KernelTime as a dict], largest first)."""
    out = {}
    for name, fn in fns.items():
        kernels, _ = breakdown(lambda: fn(args), device, set())
        out[name] = [dataclasses.asdict(k) for k in kernels[:BASELINE_KERNELS]]
    return out


def _speed_of_light(model, args: list, device: str, job: Job, measured: timing.Measurement) -> dict:
    """The reference's bound (measure/sol.py) against eager's and torch.compile's median times."""
    from pathlib import Path

    from kernelevo.judge.measure import sol

    name = torch_device_name(device)
    calibrated, _ = sol.peaks(Path(job.cache_dir), device, name)
    work = sol.count_work(model, args)
    compiled = measured.stats.get("compiled")
    peaks = sol.task_peaks(calibrated, work, device, {"eager PyTorch": measured.stats["eager"].median_ms,
                                                      "torch.compile": compiled.median_ms if compiled else None})
    bound = sol.bound(work, peaks, measured.stats["eager"].median_ms, None)
    return {"bound_ms": bound.bound_ms, "bound": bound.bound, "memory_ms": bound.memory_ms, "eager_pct": bound.reference_pct,
            "compiled_pct": 100.0 * bound.bound_ms / compiled.median_ms if compiled and compiled.median_ms else None,
            "peaks_used": peaks["used"]}
