"""The judge's child process: one candidate (or one baseline) per process, then exit.

    python -s -P -m kernelevo.judge.run.worker DEVICE EVENT_FD

It starts, imports torch and creates its CUDA context before any job exists (so a pool can keep
it warm), says `ready`, then reads one job as a JSON line on stdin. It reports progress and the
outcome as JSON lines on EVENT_FD, never on stdout, which belongs to the candidate. Before it
touches the GPU for correctness and timing it says `gpu` and waits for `go`, so the parent can
give each GPU to one worker at a time. The parent enforces wall-clock limits and kills the
whole process group; nothing here needs to defend itself against a hang.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelevo.judge.job import Job


def _pin(variable: str) -> None:
    """Move this process to the cores the parent planned for its phase (cores.plan)."""
    cores = os.environ.get(variable)
    if cores:
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
        if variable == "KERNELEVO_BUILD_CPUS" and "torch" in sys.modules:  # forked (zygote.py): OpenMP
            sys.modules["torch"].set_num_threads(len(os.sched_getaffinity(0)))  # counted all cores at import


class Channel:
    def __init__(self, event_fd: int, device: str = "cpu"):
        self.out = os.fdopen(event_fd, "w", buffering=1)
        self.cpu = not device.startswith("cuda")

    def send(self, event: str, **fields) -> None:
        self.out.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        self.out.flush()

    def receive(self) -> dict:
        line = sys.stdin.readline()
        if not line:
            raise SystemExit(0)  # the parent went away
        return json.loads(line)

    def acquire_device(self) -> None:
        """Ask for the device and wait for `go`.

        `go` carries a token the result must repeat: a result line written by candidate code
        before this point (while importing, say) cannot know it.
        """
        self.send("gpu")
        go = self.receive()
        self._token = go.get("token") if isinstance(go, dict) else None

    @contextlib.contextmanager
    def quiet(self):
        """A timing phase: this thread runs on the core reserved for timing (cores.plan), and on the CPU
        the parent pauses every other judge worker meanwhile (measure/hold.py). Only the phase: a process
        started from this thread keeps its cores, and from the device's `go` on, Triton's ptxas at a first
        call (51 s in 330 s of a bench, benchmarks/results/timing_core_watch-H200x2-2026-11-30.json) and
        inductor's compile workers ran on the timing core, where the next worker's calls are timed."""
        _pin("KERNELEVO_TIMING_CPU")
        try:
            if not self.cpu:
                yield
                return
            self.send("quiet")
            self.receive()
            try:
                yield
            finally:
                self.send("loud")
        finally:
            _pin("KERNELEVO_BUILD_CPUS")

    def release_device(self) -> None:
        """Done with the device (what remains needs only the CPU): the parent may pass it on."""
        self.send("release")

    def send_result(self, result: dict) -> None:
        self.send("result", **result, token=getattr(self, "_token", None))


def _prepare_device(device: str) -> dict:
    import torch

    # Correctness references and baselines in full float32: TF32 alone costs ~1e-3 of accuracy.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    from kernelevo.judge.run import inline

    # torch's headers: the judging process derives the lean ones of inline builds from them (inline.prepare)
    info = {"torch": torch.__version__, "device": device, "torch_include": str(inline.torch_include())}
    _quiet_progress_bars()
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.empty(1, device=device)  # create the context now, outside any measured phase
        _warm_profiler(device)
        from kernelevo.judge.measure import l2

        l2.remember()  # the persisting-L2 set-aside before candidate code: a change is named (l2.py)
        props = torch.cuda.get_device_properties(device)
        # What the prompts say of the device, when the driver has no GPU of its own (a cluster).
        info.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
                    cuda=torch.version.cuda, sm_count=props.multi_processor_count,
                    memory_gib=props.total_memory / 2**30, l2_mib=getattr(props, "L2_cache_size", 0) / 2**20,
                    smem_kib=getattr(props, "shared_memory_per_block_optin", 49152) // 1024)
        # Meta-device shape checks (trials/shapes.py) import torch._dynamo on first use: 1.4 s of CPU, which
        # would otherwise be spent holding the GPU. (The CPU backend checks shapes without meta.)
        import torch._dynamo  # noqa: F401
    else:
        import platform

        from kernelevo.host import cpu_name
        from kernelevo.runtime.c import compiler_command

        _warm_profiler(device)
        info.update(device_name=cpu_name() or platform.processor() or "cpu", cores=os.cpu_count() or 1,
                    compiler=compiler_command())
    return info


def _quiet_progress_bars() -> None:
    """tqdm starts a monitor thread with its first bar, a disabled one too, and torch.compile makes one (Inductor
    waiting for its kernels) within a compiled model's first call: a candidate whose call starts a thread is refused
    (guards.ThreadWatch), and an honest assembly judged as kernelevo_compile runs it was (H200, 2026-12-01). The
    monitor refreshes bars that no one sees here; set before any candidate code runs, not by it."""
    try:
        import tqdm
    except ImportError:
        return
    tqdm.tqdm.monitor_interval = 0


def _warm_profiler(device: str) -> None:
    """Start the profiler once while this worker waits for a job: the policy check's first profile
    otherwise spent 2-3 s of held device time setting up CUPTI (H100), and 1.4 s setting up the
    CPU profiler on the CPU backend (where the held device is the timing lock)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]):
        torch.ones(1, device=device).add_(1)
        if cuda:
            torch.cuda.synchronize()


def _job_environment(job: Job, device: str) -> None:
    """The job's build folder for every build and cache of its code, set before the candidate's code runs:
    kernelevo.runtime's modules, load_inline's extensions, Triton's and torch.compile's caches, torch's
    kernel cache. A candidate's is its own (sandbox.Parent.assign): no other source's process writes it."""
    from kernelevo.judge.run import sandbox, triton_jobs
    from kernelevo.runtime import BUILD_VARIABLE

    cache = Path(job.cache_dir)
    build = Path(job.build_dir) if job.build_dir else (sandbox._scratch() or cache) / sandbox.BUILD
    triton_jobs.environment(build, triton_jobs.interpreted(job, device))
    os.environ.update({"KERNELEVO_CACHE_DIR": str(cache), BUILD_VARIABLE: str(build),
                       "TORCH_EXTENSIONS_DIR": str(build / "inline"),
                       "TORCHINDUCTOR_CACHE_DIR": str(build / "inductor"),
                       "PYTORCH_KERNEL_CACHE_PATH": str(build / "torch-kernels")})
    if job.kind in ("baseline", "warm", "compile_beside", "modes"):  # the compiled reference: from caches no candidate wrote
        sandbox.opponent_environment(job)
    os.environ.setdefault("MAX_JOBS", str(job.build_jobs))
    if job.format == "inline":
        from kernelevo.judge.run import inline

        inline.install()


def _die_with_parent() -> None:
    """If the judging process dies (kill -9 included), this worker follows within a second.

    A watcher thread rather than PR_SET_PDEATHSIG: that signal fires when the thread that
    spawned the worker exits, and the executor spawns from short-lived threads.
    """
    import select
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            # select's timeout is the kernel's to keep: time.sleep reads clock_gettime, which a candidate's native
            # code can patch (its sleeps then returned at once, and this thread spun: 200 ms of CPU in 200)
            select.select([], [], [], 1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="kernelevo-parent-watch").start()


def main() -> None:
    from kernelevo.judge.run import launcher, sandbox

    # First of all, while this process has one thread: Landlock holds only threads created after it.
    confinement = sandbox.confine(launch=launcher.start)
    _die_with_parent()
    _pin("KERNELEVO_BUILD_CPUS")  # compilers this worker starts inherit these cores
    device, event_fd = sys.argv[1], int(sys.argv[2])
    if not device.startswith("cuda"):  # Triton kernels on the CPU run in its interpreter, which must be on before
        os.environ["TRITON_INTERPRET"] = "1"  # triton is imported (the profiler's warm-up imports it, if installed)
    channel = Channel(event_fd, device)
    info = _prepare_device(device)
    channel.send("ready", **info, confinement=dataclasses.asdict(confinement))
    from kernelevo.judge.job import Job

    job = sandbox.localize(Job.from_dict(channel.receive()))
    _job_environment(job, device)
    from kernelevo.judge.run import baseline, check, jobs, modes, profiling

    started = time.perf_counter()
    run = {"baseline": baseline.run, "check": check.serve, "remeasure": jobs.run_remeasure,
           "compile_beside": jobs.run_compile_beside, "modes": modes.run_modes,
           "warm": modes.run_warm, "profile": profiling.run_profile}.get(job.kind, jobs.run_candidate)
    result = run(job, device, channel)
    result["worker_s"] = time.perf_counter() - started
    channel.send_result(result)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a candidate's broken state (a sticky CUDA error, stray
    # threads) must not turn a reported verdict into a crash.
    os._exit(0)


if __name__ == "__main__":
    main()
