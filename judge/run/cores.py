"""Which cores build and which time: each GPU's timing worker gets a core of its own that no build, no other worker
and no process of the judge's uses (executor.py plans it for its workers; worker.py moves there for a timed phase).
"""
from __future__ import annotations

import contextlib
import functools
import os


def plan(devices: list[str]) -> dict[str, dict[str, str]]:
    """Per device, the environment that pins its workers: cores to build on, a core to time on.

    Measured on an H100 host: with eight nvcc builds on all cores, a timed kernel's median
    moved 10 % and its p90 by 60 %, because the host thread launching it was starved. So each
    GPU's timing worker gets a core that no build may use. With too few cores, nothing is pinned.

    A GPU's core follows from its index among the machine's GPUs, whichever executor plans it: a bench
    judges each task with an executor of its own device, and when each reserved its own last core, the
    timing workers of both H200s were put on one core. That is the likely cause of issue 52's false
    `escaped_work` refusals (7.9 ms by the host clock for 3.9 ms by events, near a 4 ms scheduler tick, in
    benches on two GPUs only). No build uses any GPU's core.
    """
    gpus = [d for d in devices if d.startswith("cuda")]
    if not gpus:
        return {}
    cores = list(_machine_cores())
    count = max(_visible_gpus(), *(gpu_index(d) + 1 for d in gpus))
    if len(cores) < 2 * count + 2:
        return {}
    timing = {i: cores[-1 - i] for i in range(count)}
    build = ",".join(str(c) for c in cores if c not in timing.values())
    return {d: {"KERNELEVO_BUILD_CPUS": build, "KERNELEVO_TIMING_CPU": str(timing[gpu_index(d)])} for d in gpus}


def gpu_index(device: str) -> int:
    """A CUDA device's index ('cuda' is 0)."""
    return int(device.split(":")[1]) if ":" in device else 0


def _visible_gpus() -> int:
    """How many GPUs this process may be given: CUDA_VISIBLE_DEVICES's list where it is set, else the NVIDIA
    driver's (/proc/driver/nvidia/gpus); 0 where neither says."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    return 0


@functools.cache
def _machine_cores() -> tuple[int, ...]:
    """The cores this process may use, as first asked: keep_off_timing_cores narrows its own set after, and a second
    executor in the process must reserve the same cores, not the next two."""
    return tuple(sorted(os.sched_getaffinity(0)))


def keep_off_timing_cores(pinning: dict[str, dict[str, str]]) -> None:
    """Every thread of this process onto the build cores of `pinning` (plan), and so every process it starts
    later (checkers, zygotes, workers, their compilers): left to the scheduler, the judging process and its children
    ran on the cores reserved for timing while all the others built (7.7 s of the bench process in 330 s on one of
    them, benchmarks/results/timing_core_watch-H200x2-2026-11-30.json). A worker moves its timing thread there
    itself (worker.Channel.quiet)."""
    build = next((set(int(c) for c in p["KERNELEVO_BUILD_CPUS"].split(",")) for p in pinning.values()), None)
    if not build:
        return
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), build)
