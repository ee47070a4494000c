"""What a Triton candidate needs of the worker: its cache, the interpreter on the CPU, the first call
that compiles (and autotunes) its kernels before anything is checked or timed, and the configs its
autotuners chose. Runs in the child only; nothing here imports triton unless the candidate did."""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelevo.judge.job import Job

# Why a Triton candidate on the CPU gets a verdict but no speedup: the interpreter runs each program
# of the grid in NumPy, one after another, which says nothing of the kernel's speed on a GPU.
UNTIMED = ("not timed: Triton kernels on the CPU run in Triton's interpreter (TRITON_INTERPRET=1), "
           "whose speed says nothing of a GPU's; correctness, shapes and the policy were judged")


def interpreted(job: Job, device: str) -> bool:
    """A Triton candidate judged on the CPU: its kernels run in the interpreter."""
    return job.format == "triton" and not device.startswith("cuda")


def environment(build: Path, interpreting: bool = False) -> None:
    """Before the candidate is imported: Triton's cache in the job's build folder (its keys hash each
    kernel's source, so a changed kernel recompiles). On the CPU the worker turned Triton's
    interpreter on when it started (worker.main): triton's own library kernels are decorated when
    triton is imported, which happens before any job."""
    os.environ["TRITON_CACHE_DIR"] = str(build / "triton")
    if interpreting:
        _autotune_in_interpreter()


def _autotune_in_interpreter() -> None:
    """`@triton.autotune` times its configs with the GPU driver's benchmarker, which the interpreter
    has none of ("0 active drivers"): on the CPU each config is run once instead (so every config is
    checked to run) and none is faster, so an autotuner keeps its first. Nothing is timed there anyway."""
    autotune_by_one_run(keep_own=True)


def autotune_by_one_run(keep_own: bool = False) -> None:
    """Every `@triton.autotune` runs each config once and keeps its first, instead of timing each (`keep_own`:
    an autotuner given a `do_bench` of its own keeps it). The bounds trial (run/bounds_target.py) wants each
    config run, not timed: under memcheck, a conv autotuned over 6 configs on 5 shapes did not finish in the
    trial's 120 s (issue 52, H200, 2026-11-30), and its indices went unchecked."""
    try:
        from triton.runtime import autotuner
    except ImportError:  # no triton here: the candidate's own import says so, as its verdict
        return

    def run_once(kernel_call, quantiles):
        kernel_call()
        return [0.0 for _ in quantiles]

    autotuner.Autotuner.do_bench = property(lambda self: (keep_own and self._do_bench) or run_once)


def first_call(forward, args: list, device: str) -> float:
    """Seconds of the candidate's first forward: Triton compiles each kernel at its first launch and
    an autotuner times its configs there. Part of the build, never of a timed region (the caller
    holds the device: autotuning times kernels). Exceptions propagate (a compile error among them)."""
    import torch

    started = time.perf_counter()
    with torch.no_grad():
        forward(args)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return time.perf_counter() - started


def autotuned(cls) -> list[str]:
    """What each `@triton.autotune` of the candidate's module chose, one line per kernel and key:
    the configs listed are in its source; these are the ones its benchmarking picked here."""
    module = sys.modules.get(getattr(cls, "__module__", ""))
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return []
    lines = []
    for name, value in sorted(vars(module).items() if module else ()):
        if isinstance(value, Autotuner):
            for key, config in getattr(value, "cache", {}).items():
                chosen = re.sub(r", \w+: None", "", str(config))  # fields left unset
                lines.append(f"autotune {name} {key}: {chosen}")
    return lines

