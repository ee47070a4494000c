"""Judge jobs on the GPUs (or CPUs) of a Ray cluster, behind the seam LocalExecutor defines.

Each job is a Ray task that needs one GPU (on the CPU backend, one CPU). On the node Ray picks,
the task does what LocalExecutor does on this machine: it starts a judge worker process for the
GPU Ray gave it (forked from a zygote the Ray worker process keeps between tasks), drives the job
through it under the same limits (`executor.drive`) and kills it afterwards. So candidate code runs
only in that child process, never in a Ray worker or in the driver. The task returns a result dict;
the driver alone writes the archive.

Where timings meet: a candidate's speedup comes from eager timed beside it in its own process,
and the cached baseline it is combined with is keyed by the GPU model and torch version the
result reports. A baseline that is missing is measured on the candidate's own node, so nothing
is compared with a number taken on another kind of GPU or another torch. The driver measures
each baseline once per GPU model and torch version and reuses it for every node of that kind.

Faults: a job whose Ray worker or node is lost runs once more (Ray's own retry); lost twice, it
gets a runtime_error verdict instead of hanging the run. Ctrl-C cancels the jobs in flight; Ray
kills their workers, whose judge processes follow (they watch their parent). An idle Ray worker keeps
its zygote (no CUDA context, no GPU held) for its next task; the zygote goes when Ray ends that
worker, at the latest when the run's Ray job ends.

A GPU is held for the whole job, build included: a build of the default format (NVRTC) takes a
fraction of a second, so the GPU idles little; inline builds take seconds more.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import socket
import threading
from pathlib import Path

from kernelevo.judge.run.executor import Spread, WorkerLimits, WorkerPool, device_lock, drive
from kernelevo.judge.job import Job
from kernelevo.judge.job_result import JobResult

RETRIES = 1  # a job whose worker or node is lost runs once more; lost again, it gets a verdict
INSTALL = 'ray is not installed: pip install -e ".[ray]" (on the driver and on every node of the cluster)'


def connect(address: str | None = None) -> None:
    """Join the cluster at `address` (else $RAY_ADDRESS; with neither, Ray starts one on this
    machine). Raises RuntimeError with a line saying what to do."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(INSTALL) from None
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, include_dashboard=False,
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "a new local cluster"
        raise RuntimeError(f"cannot join the Ray cluster at {where}: {str(exc).splitlines()[0]} "
                           "(start one with `ray start --head`, or check --ray-address / RAY_ADDRESS)") from None


def nodes() -> list[dict]:
    """The cluster's live nodes: host, node id, CPUs, GPUs and the GPU model Ray detected."""
    import ray

    found = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        model = next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), "")
        found.append({"host": node.get("NodeManagerHostname", ""), "node_id": node.get("NodeID", ""),
                      "address": node.get("NodeManagerAddress", ""), "cpus": int(resources.get("CPU", 0)),
                      "gpus": int(resources.get("GPU", 0)), "gpu_model": model})
    return found


def slots(backend: str) -> tuple[str, ...]:
    """The judge devices a run on the cluster spreads over: one per GPU, or the CPU backend's one
    ("cpu": its jobs are still spread over the nodes' CPUs). Names say the backend, not a place."""
    if backend == "cpu":
        return ("cpu",)
    count = sum(n["gpus"] for n in nodes())
    if not count:
        raise RuntimeError("the Ray cluster has no GPUs; use --device cpu to judge C candidates on its CPUs")
    return tuple(f"cuda:{i}" for i in range(count))


def _node_cache() -> Path:
    # Every node keeps its own cache: compiled modules, calibrations, worker logs and timing locks.
    return Path(os.environ.get("KERNELEVO_CACHE_DIR") or Path.home() / ".cache" / "kernelevo")


def _on_node(backend: str, limits: WorkerLimits, job: Job | None) -> dict:
    """Start a judge worker for the device Ray gave this task, run `job` through it (None: only
    read what it reports of its device), kill it; the result says where it ran. The worker is forked
    from this Ray worker process's zygote (zygote.py), kept for its next task: Ray reuses the process,
    and a worker started anew would import torch again (3 s of CPU)."""
    import ray

    cache = _node_cache()
    # Ray set CUDA_VISIBLE_DEVICES to the GPU it gave: the child sees it as cuda:0.
    device = f"cuda:{ray.get_gpu_ids()[0]}" if backend == "cuda" else "cpu"
    pool = WorkerPool("cuda:0" if backend == "cuda" else "cpu", cache, 0, limits, {})
    try:
        worker = pool.take(job)
        checker = pool.checker() if job is not None and job.kind == "candidate" else None
        info = pool.info or {}
        try:
            result = dict(info) if job is None else \
                drive(worker, dataclasses.replace(job, cache_dir=str(cache)), limits, lambda: device_lock(cache, device),
                      checker=checker)
        finally:
            for w in (worker, checker):
                if w is not None:
                    w.kill()
    finally:
        pool.close()
    result.setdefault("device_name", info.get("device_name", ""))
    result.setdefault("torch_version", info.get("torch", ""))
    return {**result, "node": f"{socket.gethostname()}/{device}", "node_id": ray.get_runtime_context().get_node_id()}


def run_job(job: Job, backend: str, limits: WorkerLimits) -> dict:
    """One judge job on this node, as LocalExecutor runs it."""
    return _on_node(backend, limits, job)


def describe(backend: str, limits: WorkerLimits) -> dict:
    """What a judge worker on some node reports of its device (name, torch...), and that node's id."""
    return _on_node(backend, limits, None)


def _needs(backend: str) -> dict:
    return {"num_gpus": 1, "num_cpus": 1} if backend == "cuda" else {"num_cpus": 1}


def worker_info(backend: str, limits: WorkerLimits = WorkerLimits()) -> dict:
    """`describe` run on a node of the cluster with a free GPU (CPU)."""
    import ray

    return ray.get(ray.remote(describe).options(max_retries=RETRIES, **_needs(backend)).remote(backend, limits))


def _lost(exc: Exception) -> dict:
    return {"verdict": "runtime_error", "reason": "node_lost",
            "message": f"the cluster lost the worker judging this candidate {RETRIES + 1} times "
                       f"({type(exc).__name__}): a candidate that takes its node down gets this verdict",
            "excerpt": str(exc)[-2000:]}


class RayExecutor(Spread):
    """Judge jobs as Ray tasks; `submit` returns a future of the job's result dict."""

    def __init__(self, devices: list[str], cache_dir: Path, limits: WorkerLimits = WorkerLimits(), address: str | None = None):
        connect(address)
        import ray

        self.devices, self.cache_dir, self.limits = list(devices), Path(cache_dir), limits
        self.backend = "cpu" if self.devices[0].startswith("cpu") else "cuda"
        self._job = ray.remote(run_job)
        self._needs = {"max_retries": RETRIES, "retry_exceptions": False, **_needs(self.backend)}
        self._lock = threading.Lock()
        self._refs: dict = {}  # object ref -> its future, while in flight
        self._info: dict | None = None
        super().__init__(self.devices)

    def device_info(self, device: str) -> dict:
        """What a judge worker on the cluster reports (name, torch), with its node's id: a baseline
        measured from this is measured on that node."""
        if self._info is None:
            self._info = worker_info(self.backend, self.limits)
        return self._info

    def submit(self, job: Job, device: str | None = None, node: str | None = None) -> concurrent.futures.Future:
        """Run `job` on any node with a free GPU (CPU), or on `node` (a node id) where a follow-up
        job (baseline, re-measurement, profile) must run beside the candidate it belongs to; the future holds
        its JobResult."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        device = device or self.choose_device()
        place = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)} if node else {}
        task = self._job.options(**self._needs, **place)
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            ref = task.remote(job, self.backend, self.limits)
            self._refs[ref] = future
        self._count(device, 1)
        threading.Thread(target=self._await, args=(ref, future, device), daemon=True,
                         name="kernelevo-ray-job").start()
        return future

    def _await(self, ref, future: concurrent.futures.Future, device: str) -> None:
        import ray
        from ray import exceptions as rx

        try:
            result = ray.get(ref)
        except (rx.TaskCancelledError, rx.RaySystemError) as exc:
            result = exc
        except (rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError, rx.OwnerDiedError) as exc:
            result = _lost(exc)
        except rx.OutOfMemoryError as exc:  # Ray's memory monitor killed it, past its retries: the node ran low
            result = {"verdict": "runtime_error", "reason": "out_of_memory",
                      "message": "the node ran low on host memory while judging this candidate and Ray killed the job "
                                 f"{RETRIES + 1} times", "excerpt": str(exc)[-2000:]}
        except rx.RayTaskError as exc:  # the job's own code failed on the node (not the candidate's)
            result = {"verdict": "runtime_error", "reason": "judge_error",
                      "message": f"the judge failed on its node: {str(exc).strip().splitlines()[-1]}",
                      "excerpt": str(exc)[-2000:]}
        except Exception as exc:  # noqa: BLE001 - any other: said through the future, never a future left waiting
            result = exc
        with self._lock:
            self._refs.pop(ref, None)
        self._count(device, -1)
        if isinstance(result, rx.TaskCancelledError):
            future.cancel()
        elif isinstance(result, Exception):
            future.set_exception(result)
        elif not future.cancelled():
            future.set_result(JobResult.of(result))

    def close(self, cancel: bool = False) -> None:
        """Wait for the jobs in flight, or with `cancel` (Ctrl-C, an error) stop them: Ray kills
        their workers, and the judge processes under them exit within a second."""
        import ray

        with self._lock:
            refs = list(self._refs)
        if cancel:
            for ref in refs:
                ray.cancel(ref, force=True)
        else:
            ray.wait(refs, num_returns=len(refs)) if refs else None
