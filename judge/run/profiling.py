"""The worker's profile job: where a passing candidate's time goes, and how far from the bound.

Run only for candidates that passed (the caller decides which: profiling holds the device for
roughly 0.1-0.5 s without Nsight Compute and 10 s with it). In one process, holding the device:
- per-kernel times of candidate and reference from the torch profiler (CUPTI on a GPU; on the
  CPU, aten operators and the candidate's own C functions), each forward after a cache flush;
- the compiler's resource report of every kernel the candidate built (measure/resources.py);
- FLOPs and minimum bytes of the reference against the device's calibrated peaks (measure/sol.py),
  set against the judge's own median times of this candidate's evaluation;
- Nsight Compute's metrics in a separate profiled process (measure/ncu.py), when ncu is there.
"""
from __future__ import annotations

import time
from pathlib import Path

from kernelevo.judge.measure import ncu, resources, sol
from kernelevo.judge.measure.kernels import breakdown
from kernelevo.judge.run import jobs, sandbox
from kernelevo.judge.job import Job
from kernelevo.judge.trials import guards, policy
from kernelevo.evaluation import Profile

def run_profile(job: Job, device: str, channel) -> dict:
    started = time.perf_counter()
    task = jobs._load_task(job)
    built = jobs._build(job, task, device, guards.Integrity(), guards.ThreadWatch())
    if isinstance(built, dict):
        return built  # it built when judged: a failure now is reported as it is
    reference, candidate, _ = built
    channel.acquire_device()
    held = time.perf_counter()
    notes: list[str] = []
    try:
        name = jobs.torch_device_name(device)
        args = jobs._input_sets(task, job, device, 1)[0]
        work = sol.count_work(reference, args)
        own = policy.own_kernel_names(job.candidate_source)
        with channel.quiet():  # the calibration and the per-kernel times are timings too
            peaks, _ = sol.peaks(Path(job.cache_dir), device, name, store=False)  # a candidate's process
            peaks = sol.task_peaks(peaks, work, device, {"eager PyTorch": job.eager_ms})
            cand, cand_ms = breakdown(lambda: jobs.forward(candidate, args), device, own)
            ref, ref_ms = breakdown(lambda: jobs.forward(reference, args), device, set())
        found = resources.collect()
        kernels, note = [], "Nsight Compute profiles CUDA kernels: skipped on the CPU"
        if device.startswith("cuda"):
            kernels, note = ([], "Nsight Compute not asked for") if not job.ncu else \
                ([], sandbox.NCU_NOTE) if sandbox.applied and not sandbox.applied.unconfined else ncu.run(job, device)
    except Exception as exc:  # noqa: BLE001 - candidate code runs here too
        return {"verdict": "runtime_error", "reason": "profile_failed",
                "message": f"profiling failed: {type(exc).__name__}: {exc}"[:300]}
    finally:
        channel.release_device()
    notes += [note] if note else []
    bound = sol.bound(work, peaks, job.eager_ms, job.candidate_ms)
    profile = Profile(device_name=name, backend="cuda" if device.startswith("cuda") else "cpu", candidate=tuple(cand), reference=tuple(ref), candidate_ms=cand_ms,
                      reference_ms=ref_ms, resources=tuple(found), ncu=tuple(kernels), sol=bound,
                      notes=tuple(notes), cost_s=round(time.perf_counter() - held, 3))
    return {"verdict": "ok", "reason": "", "message": "", "profile": profile.to_dict(),
            "profile_s": time.perf_counter() - started}
