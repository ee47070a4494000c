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

import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

from kernelevo.judge.measure import crosscheck, ncu, resources, sol, timing
from kernelevo.judge.run import jobs, sandbox
from kernelevo.judge.trials import guards, policy
from kernelevo.evaluation import KernelTime, Profile

REPEATS = 3  # profiled forwards per side; times are per forward


def run_profile(job: dict, device: str, channel) -> dict:
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
        name = _device_name(device)
        args = jobs._input_sets(task, job, device, 1)[0]
        work = sol.count_work(reference, args)
        own = policy.own_kernel_names(job["candidate_source"])
        with channel.quiet():  # the calibration and the per-kernel times are timings too
            peaks, _ = sol.peaks(Path(job["cache_dir"]), device, name)
            cand, cand_ms = breakdown(lambda: jobs.forward(candidate, args), device, own)
            ref, ref_ms = breakdown(lambda: jobs.forward(reference, args), device, set())
        found = resources.collect()
        kernels, note = [], "Nsight Compute profiles CUDA kernels: skipped on the CPU"
        if device.startswith("cuda"):
            kernels, note = ([], "Nsight Compute not asked for") if not job.get("ncu", True) else \
                ([], sandbox.NCU_NOTE) if sandbox.applied and not sandbox.applied.unconfined else ncu.run(job, device)
    except Exception as exc:  # noqa: BLE001 - candidate code runs here too
        return {"verdict": "runtime_error", "reason": "profile_failed",
                "message": f"profiling failed: {type(exc).__name__}: {exc}"[:300]}
    finally:
        channel.release_device()
    notes += [note] if note else []
    bound = sol.bound(work, peaks, job.get("eager_ms"), job.get("candidate_ms"))
    profile = Profile(device_name=name, backend="cuda" if device.startswith("cuda") else "cpu", candidate=tuple(cand), reference=tuple(ref), candidate_ms=cand_ms,
                      reference_ms=ref_ms, resources=tuple(found), ncu=tuple(kernels), sol=bound,
                      notes=tuple(notes), cost_s=round(time.perf_counter() - held, 3))
    return {"verdict": "ok", "reason": "", "message": "", "profile": profile.to_dict(),
            "profile_s": time.perf_counter() - started}


def _device_name(device: str) -> str:
    import torch

    import platform

    from kernelevo.host import cpu_name

    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") \
        else cpu_name() or platform.processor() or "cpu"


def breakdown(fn: Callable[[], object], device: str, own: set[str]) -> tuple[list[KernelTime], float]:
    """(kernels largest first, summed kernel ms per forward) over REPEATS forwards."""
    fn()  # warm: lazy loads and caches stay out of the profile
    if device.startswith("cuda"):
        totals, counts, launch, called = _cuda_kernels(fn, device)
    else:
        totals, counts, launch, called = _cpu_ops(fn)
    pattern = policy.name_pattern(own)
    total = sum(totals.values()) or 1e-9
    kernels = []
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1]):
        args = launch.get(name, {})
        kernels.append(KernelTime(
            name=_short(name), launches=counts[name] / REPEATS, ms=us / 1e3 / REPEATS, share=us / total,
            own=bool(pattern and pattern.search(name)) or name in called,
            registers=args.get("registers per thread"), shared_bytes=args.get("shared memory"),
            grid=tuple(args.get("grid") or ()), block=tuple(args.get("block") or ()),
            occupancy=args.get("est. achieved occupancy %")))
    return kernels, total / 1e3 / REPEATS


def _short(name: str) -> str:
    return name if len(name) <= 100 else name[:97] + "..."


def _cuda_kernels(fn, device: str) -> tuple[dict, dict, dict, set]:
    """Device kernels, copies and fills of REPEATS forwards, each after an L2 flush, by name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    clock = timing.Clock(device, flush=True)
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    launch: dict[str, dict] = {}
    for _ in range(REPEATS):
        clock.flush()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        for event in crosscheck.device_events(prof):
            totals[event["name"]] += event["dur"]
            counts[event["name"]] += 1
            launch.setdefault(event["name"], event.get("args") or {})
    return totals, counts, launch, set()


def _cpu_ops(fn) -> tuple[dict, dict, dict, set]:
    """aten operators (self time) and the candidate's own C functions (kernelevo.runtime.c, compiled
    extensions), by name, over REPEATS calls."""
    from torch.profiler import ProfilerActivity, profile

    from kernelevo.runtime.c import CFunction

    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    c_call, extensions, entered = CFunction.__call__.__code__, policy._extension_modules(), {}

    def watch(frame, event, arg):
        if frame.f_code is c_call and event in ("call", "return"):
            _time(totals, counts, entered, frame.f_locals["self"].name, event == "call")
        elif event in ("c_call", "c_return") and getattr(arg, "__module__", None) in extensions:
            _time(totals, counts, entered, f"{arg.__module__}.{getattr(arg, '__name__', '?')}", event == "c_call")

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        previous = sys.getprofile()
        sys.setprofile(watch)
        try:
            for _ in range(REPEATS):
                fn()
        finally:
            sys.setprofile(previous)
    own = set(totals)
    for item in prof.key_averages():
        if item.key.startswith("aten::") and item.self_cpu_time_total > 0:
            totals[item.key] += item.self_cpu_time_total
            counts[item.key] += item.count
    return totals, counts, {}, own


def _time(totals: dict, counts: dict, entered: dict, key: str, starting: bool) -> None:
    if starting:
        entered[key] = time.perf_counter()
    elif key in entered:
        totals[key] += (time.perf_counter() - entered.pop(key)) * 1e6
        counts[key] += 1
