"""Where judging runs: worker processes, wall-clock limits, and one timing slot per device.

`LocalExecutor` is the default: per device a pool of warm worker processes (each judges one
job, then exits, so every candidate gets a fresh process and CUDA context), any number of jobs
building at once on the CPU cores, and an exclusive lock per device for the correctness and
timing phase. The lock is a file lock, so separate kernelevo processes on one machine also take
turns. Another executor (several machines: ray_executor.RayExecutor) provides the same
`submit`, `choose_device`, `device_info`, `close`, `devices` and `outstanding`, and runs each job
through `drive` on the machine it lands on.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import select
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from kernelevo.judge import verdicts
from kernelevo.judge.measure import hold
from kernelevo.judge.run import cores, sandbox, zygote
from kernelevo.judge.run.room import DeviceRoom, decided_by_neighbours, out_of_memory
from kernelevo.judge.run.drive import WorkerDied, audit, drive  # noqa: F401 - the executor's names, as before
from kernelevo.judge.job import Job
from kernelevo.judge.job_result import JobResult


@dataclass(frozen=True)
class WorkerLimits:
    """Wall-clock limits in seconds; a worker past one is killed with its whole process group."""

    startup: float = 300.0
    build: float = 900.0  # import + ModelNew(): inline builds take tens of seconds
    run: float = 120.0  # correctness + timing, once the worker holds the device




class Worker:
    """One child process and its two pipes: jobs and 'go' in on stdin, events out on a fd; it runs
    in a sandbox (sandbox.py) whose supervisor lives here."""

    def __init__(self, device: str, cache_dir: Path, pinning: dict[str, str], forks: zygote.Zygote | None = None,
                 opponent: bool = False):
        _prepare_once()
        read_fd, write_fd = os.pipe()
        log_dir = Path(cache_dir) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log = tempfile.NamedTemporaryFile(dir=log_dir, prefix="worker-", suffix=".log", delete=False)
        self.device = device
        self.sandbox = sandbox.prepare(Path(cache_dir), Path(self.log.name), _child_env(device, pinning), opponent)
        try:
            self.proc = zygote.launch(_child_device(device), write_fd, self.sandbox, self.log, forks)
        except BaseException:
            self.sandbox.remove()
            raise
        finally:
            os.close(write_fd)
        self.sandbox.spawned()
        hold.register(self.proc.pid)  # its own session: the process group is its pid
        self._fd, self._buffer = read_fd, b""
        self.info: dict | None = None

    def send(self, message: dict | str) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def clock(self) -> float:
        """Seconds on a clock that stands still while this worker is paused (measure/hold.py): limits run on it."""
        return hold.clock(self.proc.pid)

    def next_event(self, deadline: float) -> dict:
        """The next event; raises TimeoutError past the deadline (on `clock`), WorkerDied at EOF."""
        while (event := self.buffered()) is None:
            left = deadline - self.clock()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                self.read_some()
        return event

    def buffered(self) -> dict | None:
        """An event already read in whole, if any."""
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def read_some(self) -> None:
        """What the worker wrote since; WorkerDied at its end."""
        chunk = os.read(self._fd, 65536)
        if not chunk:
            raise WorkerDied(self)
        self._buffer += chunk

    def wait_ready(self, limit: float) -> dict:
        if self.info is None:
            event = self.next_event(self.clock() + limit)
            if event.get("event") != "ready":
                raise WorkerDied
            self.info = event
        return self.info

    def log_text(self) -> str:
        self.log.flush()
        try:
            return Path(self.log.name).read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill its process group and nothing more: for a thread that does not own the worker (a cancel),
        while the thread driving its job notices the end, waits for it and cleans up (kill)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)

    def kill(self) -> None:
        hold.unregister(self.proc.pid)
        self.stop()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(OSError):
            self.log.close()
            os.unlink(self.log.name)
        self.sandbox.remove()


def _child_device(device: str) -> str:
    # Each worker sees only its own GPU (CUDA_VISIBLE_DEVICES), as cuda:0.
    return "cuda:0" if device.startswith("cuda") else "cpu"


def _child_env(device: str, pinning: dict[str, str]) -> dict:
    """What a worker is given on top of the sandbox's allowlisted environment (sandbox.prepare)."""
    # CUDA_CACHE_DISABLE: NVRTC serves a source compiled before (by any process) from the driver's
    # compute cache without running ptxas, and then its log lacks ptxas's resource report (-v):
    # seen on an H100 with CUDA 13. kernelevo.runtime keeps its own cache of cubins and their logs.
    env = {"PYTHONUNBUFFERED": "1", "CUDA_CACHE_DISABLE": "1", **pinning}
    if device.startswith("cuda"):
        index = cores.gpu_index(device)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[index] if visible else str(index)
    else:
        env.update(CPU_MALLOC, **CPU_THREADS)
    return env


_prepared = threading.Lock()


def _prepare_once() -> None:
    """Before this process spawns its first worker: its secrets out of /proc/PID/environ, and the
    judge's bytecode written (sandbox.precompile)."""
    if _prepared.acquire(blocking=False):
        sandbox.scrub_environment_block()
        sandbox.precompile()


# On the CPU every tensor is host memory from glibc's malloc, which maps large blocks afresh and
# returns them on free, so a call that allocates pays a page fault per 4 KiB of each new tensor,
# and below 32 MiB whether it does depends on the process's allocation history. Measured here
# (2 cores, 2048x2048 float32): eager 4 ms in some fresh processes, 16-18 ms in others (12,256
# faults a call); at 4096x4096, 80 ms against 15 ms, every process. A timing would mostly count
# page faults, more of them for the side that allocates more. With mapping off and freed memory
# kept, the heap stays warm after the first calls, as in a long-running program: 0 faults a call.
CPU_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
# OpenMP's threads sleep when they have no work instead of spinning for it. The checker's clock takes the
# CPU time of the thread that makes the calls only where no other thread ran a quarter as long
# (trials/clock.py); torch's pool spun 2-5 ms beside a block of 8 calls of 2 ms (a copy of an output ran in
# it), so that the clock was left unconfirmed and a candidate whose own clock said 0.3 ms a call passed in 3
# of 4 judgements (2 cores, 2026-11-28). With the pool asleep it ran nothing, and all 5 were refused.
CPU_THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}


class WorkerPool:
    """Warm workers for one device: started ahead so interpreter and CUDA start-up overlap."""

    def __init__(self, device: str, cache_dir: Path, spares: int, limits: WorkerLimits, pinning: dict[str, str]):
        self.device, self.cache_dir, self.spares, self.limits = device, cache_dir, spares, limits
        self.pinning = pinning
        self.zygote = zygote.acquire(device, cache_dir, _child_env(device, pinning), limits.startup)
        self._idle: deque[Worker] = deque()
        self._checkers: list[Worker] = []  # checkers kept between jobs
        self._lock = threading.Lock()
        self.info: dict | None = None
        self._fill()

    def _new(self, opponent: bool = False) -> Worker:
        return Worker(self.device, self.cache_dir, self.pinning, self.zygote, opponent)

    def _fill(self) -> None:
        with self._lock:
            while len(self._idle) < self.spares:
                self._idle.append(self._new())

    def describe(self) -> dict:
        """What a worker reported of this device; starts one (kept for the next job) if needed."""
        if self.info is None:
            worker = self.take()
            with self._lock:
                self._idle.appendleft(worker)
        return self.info

    def take(self, job: Job | None = None) -> Worker:
        """A worker for `job`: a spare, or for a job that runs no candidate code (a baseline's) one of
        its own, whose sandbox writes the opponent's caches (sandbox.OPPONENT) and no candidate's."""
        opponent = job is not None and not job.runs_candidate
        with self._lock:
            worker = self._idle.popleft() if self._idle and not opponent else None
        if worker is None:
            worker = self._new(opponent)
        self._fill()
        try:
            self.info = worker.wait_ready(self.limits.startup)
        except (TimeoutError, WorkerDied) as exc:
            log = worker.log_text()
            worker.kill()
            raise RuntimeError(f"judge worker for {self.device} failed to start: {verdicts.tail(log, 5)}") from exc
        return worker

    def checker(self) -> Worker:
        """A process for a candidate job's checker (trials/checker.py, run/check.py): one kept from an
        earlier job, else a new one. It runs no candidate code, so its sandbox is a baseline's and it may
        serve one job after another: its CUDA context is made once, not beside each candidate being timed.
        A new one's start overlaps the candidate's build: the job's events say when it is ready (drive.py)."""
        with self._lock:
            while self._checkers:
                kept = self._checkers.pop()
                if _alive(kept.proc):  # its zygote may have died since, and it with it
                    return kept
                kept.kill()
        return self._new(opponent=True)

    def drop_checkers(self) -> None:
        """End the kept checkers (a job about to run alone needs the memory they hold)."""
        with self._lock:
            while self._checkers:
                self._checkers.pop().kill()

    def keep(self, checker: Worker) -> None:
        """A checker that ended its job cleanly (drive.py: settle), for the next one; else it is killed."""
        if not getattr(checker, "reusable", False) or not _alive(checker.proc):
            checker.kill()
            return
        checker.reusable = False
        with self._lock:
            self._checkers.append(checker)

    def close(self) -> None:
        with self._lock:
            while self._idle:
                self._idle.popleft().kill()
            while self._checkers:
                self._checkers.pop().kill()
        zygote.release(self.zygote)


def _alive(proc) -> bool:
    try:
        proc.wait(timeout=0)
    except subprocess.TimeoutExpired:
        return True
    return False


def least_busy(outstanding: dict[str, int], last_chosen: dict[str, int]) -> str:
    """The device with the fewest jobs outstanding; on a tie, the one chosen longest ago, so that
    candidates submitted in one burst (before any job is counted) still alternate."""
    return min(outstanding, key=lambda d: (outstanding[d], last_chosen.get(d, 0)))


@contextlib.contextmanager
def device_lock(cache_dir: Path, device: str):
    """Exclusive use of a device for timing, across threads and processes."""
    path = cache_dir / "locks" / f"{device.replace(':', '')}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Spread:
    """Which device a new candidate goes to: the least busy by jobs outstanding (least_busy). The
    caller keeps it for the candidate's follow-up jobs (baseline, profile), which must run where it
    was timed."""

    def __init__(self, devices: list[str]):
        self._counts_lock = threading.Lock()
        self.outstanding = {d: 0 for d in devices}  # jobs submitted, queued or running, not finished
        self._last_chosen = {d: 0 for d in devices}
        self._choices = 0

    def choose_device(self) -> str:
        with self._counts_lock:
            device = least_busy(self.outstanding, self._last_chosen)
            self._choices += 1
            self._last_chosen[device] = self._choices
        return device

    def _count(self, device: str, change: int) -> None:
        with self._counts_lock:
            self.outstanding[device] += change


class LocalExecutor(Spread):
    """Judge jobs on this machine's devices; `submit` returns a future of the worker's result."""

    def __init__(self, devices: list[str], cache_dir: Path, limits: WorkerLimits = WorkerLimits(),
                 concurrency: int | None = None, spares: int = 0):
        self.devices, self.cache_dir, self.limits = devices, Path(cache_dir), limits
        pinning = cores.plan(devices)
        cores.keep_off_timing_cores(pinning)
        self.pools = {d: WorkerPool(d, self.cache_dir, spares, limits, pinning.get(d, {}))
                      for d in devices}
        self.rooms = {d: DeviceRoom() for d in devices}
        workers = concurrency or max(1, min(8, (os.cpu_count() or 2) - 1)) * len(devices)
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        self._busy: set[Worker] = set()  # candidates' (and baselines') workers running a job
        self._checking: set[Worker] = set()  # their checkers
        # Tasks whose jobs ran out of device memory beside others and then fitted alone: their later jobs are judged
        # alone at once (issue 52's round 6: 13 jobs of a 2 GiB conv task each ran twice, 62 s a job against 25)
        self._crowded: set[tuple[str, str]] = set()  # (device, task source hash)
        super().__init__(devices)

    def device_info(self, device: str) -> dict:
        """What the worker reported of `device` (name, torch and CUDA versions)."""
        return self.pools[device].describe()

    def submit(self, job: Job, device: str | None = None, node: str | None = None) -> concurrent.futures.Future:
        """Run `job` on `device` (the least busy when None); the future holds its JobResult. `node` is for
        executors spanning machines (the node a follow-up job must run on); here every device is on this one."""
        device = device or self.choose_device()
        if device not in self.pools:
            raise ValueError(f"device {device} is not one of this executor's: {', '.join(self.devices)}")
        job = dataclasses.replace(job, cache_dir=str(self.cache_dir))
        future = self._threads.submit(lambda: JobResult.of(self._run(job, device)))  # its record, once
        self._count(device, 1)
        future.add_done_callback(lambda _: self._count(device, -1))  # also when cancelled
        return future

    def _run(self, job: Job, device: str) -> dict:
        crowded = (device, hashlib.sha256(job.task_source.encode()).hexdigest()[:16])
        if crowded in self._crowded:
            with self.rooms[device].alone():
                result = self._once(job, device)
            if not out_of_memory(result):
                return {**result, "notes": [*result.get("notes", []), "judged with the device to itself: this task's "
                                            "jobs ran out of device memory beside other jobs before"]}
        else:
            with self.rooms[device].shared():
                result = self._once(job, device)
        why = decided_by_neighbours(result)
        if why is None or not device.startswith("cuda"):
            return result
        with self.rooms[device].alone():  # judged again with the device to itself (room.py)
            self.pools[device].drop_checkers()  # kept ones hold their last job's arenas
            again = self._once(job, device)
        if out_of_memory(result) and not out_of_memory(again):
            self._crowded.add(crowded)
        first = f" ({result.get('message')})" if result.get("reason") != "out_of_memory" else ""  # what it measured
        return {**again, "notes": [*again.get("notes", []), f"{why}{first}; judged again with the device to itself"]}

    def _once(self, job: Job, device: str) -> dict:
        pool = self.pools[device]
        worker = pool.take(job)
        checker = pool.checker() if job.kind == "candidate" else None
        self._busy.add(worker)
        if checker is not None:
            self._checking.add(checker)
        started = time.monotonic()
        try:
            result = drive(worker, job, self.limits, lambda: device_lock(self.cache_dir, device),
                           None if device.startswith("cuda") else lambda: hold.machine(worker.proc.pid), checker)
        finally:
            self._busy.discard(worker)
            self._checking.discard(checker)
            worker.kill()
            if checker is not None:
                pool.keep(checker)  # after its job's worker is gone: the memory it shared goes only now
        result["wall_s"] = time.monotonic() - started
        result.setdefault("device_name", worker.info.get("device_name", ""))
        result.setdefault("torch_version", worker.info.get("torch", ""))
        return result

    def close(self, cancel: bool = False) -> None:
        """Wait for submitted jobs, or with `cancel` (Ctrl-C, an error) kill them at once."""
        if cancel:  # each is ended here; the thread driving its job cleans up after it (_once)
            for worker in [*self._busy, *self._checking]:
                worker.stop()
        self._threads.shutdown(wait=True, cancel_futures=True)
        for pool in self.pools.values():
            pool.close()
