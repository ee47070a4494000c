"""Where a forward's time goes, kernel by kernel, under the torch profiler: CUPTI's device kernels
on a GPU (each forward after an L2 flush); on the CPU, aten operators and a candidate's own C
functions. For a candidate's profile (run/profiling.py) and the baseline's opponent kernels."""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from typing import Callable

from kernelevo.evaluation import KernelTime
from kernelevo.judge.measure import crosscheck, timing
from kernelevo.judge.trials import policy

REPEATS = 3  # profiled forwards per side; times are per forward


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
