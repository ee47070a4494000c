"""The candidate's sandbox: what a judge worker, and any code a candidate runs in it, may reach.

Candidate code is hostile: whatever it can read, write or send, assume it will. So a worker starts with
nothing worth stealing and is confined before any candidate code exists:
- environment: an allowlist (what CUDA, the compilers, torch, Triton and the judge need); a variable
  whose name says key, token, secret, password or credential is never passed, whatever its prefix. Its
  home and temporary folders are its own scratch folder. The judging process keeps the keys, and scrubs
  them from the block the kernel shows as /proc/PID/environ (scrub_environment_block);
- files (Landlock): read and execute only the system's folders, Python's and kernelevo's, CUDA's and
  the folders of the judge's cache it uses (not the cache's root: the build key is there, builds.py);
  write only its scratch folder (where its job's build folder is lent, builds.py), its log and device
  files; a baseline's worker also the opponent's caches and the device's calibration;
- network (seccomp, and Landlock's TCP rules): no socket of any family, no TCP bind or connect;
- processes (Landlock, seccomp): no ptrace, no memory of another process, no signal out of the sandbox.
What held is recorded per part (evaluation.Confinement), and "unconfined: why" where nothing did.
A refused call that the supervisor saw (seccomp.py) makes the verdict `rejected io_access`, with the
calls as evidence.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import glob
import json
import os
import re
import secrets
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from kernelevo.evaluation import Confinement
from kernelevo.judge.run import builds, landlock, seccomp
from kernelevo.judge.job import Job

ENV_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED",
    "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "MAX_JOBS", "KERNELEVO_CACHE_DIR",
    "KERNELEVO_BUILD_DIR", "KERNELEVO_BUILD_CPUS", "KERNELEVO_TIMING_CPU", "KERNELEVO_SANDBOX_READ"})
ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NV_", "NVCC_", "NCCL_", "NVSHMEM_", "CUBLAS", "CUDNN_", "TORCH_",
                "TORCHINDUCTOR_", "PYTORCH_", "TRITON_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "MALLOC_")
SECRET_WORDS = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)
# The judge's cache seen by a worker: it reads the derived headers of inline builds (inline.py), the
# opponent's caches and the device's calibration; its job's builds are lent into its scratch folder
# (builds.py). Not the cache's root, whose keys, baselines, locks, logs, other workers' folders and
# other candidates' builds are the judging process's.
CACHE_READS = ("inline-lean", "opponent", "calibration")
TRUSTED = "scratch-trusted"  # the folders of workers that run no candidate code (baselines, checkers)
# The opponent's caches (torch.compile's code and Triton kernels, torch's own kernel cache), per task, and
# the device's measured peaks (shown in prompts): only a worker that runs no candidate code (a baseline
# job's) writes there. torch.compile loads the code it finds in its cache as it is, so a candidate that
# could write there would slow the compiled reference it is measured against (or run its own code in the
# opponent's process).
OPPONENT = "opponent"
OPPONENT_WRITES = (OPPONENT, "calibration")
BUILD = "build"  # in a worker's scratch folder: its job's build folder, lent (builds.py) or its own
SYSTEM_READS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys",
                "/dev", "/run", "/var/run", "/nix/store")
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/nvidia*",
                "/dev/nvidia-caps/*", "/dev/dri/*")
PLAN = "KERNELEVO_SANDBOX"
# Seen on an H100 (driver 580, Nsight Compute of CUDA 13): ncu launched inside a confined worker never
# reported, and was killed at its limit. Its host and the profiled process talk over sockets.
NCU_NOTE = ("Nsight Compute skipped: ncu cannot profile inside the candidate's sandbox (it talks to the "
            "profiled process over a socket); the profiler's, the compiler's and speed-of-light figures stand")
applied: Confinement | None = None  # in a worker: what confine() put in place


def passes(name: str) -> bool:
    """Whether an environment variable reaches a worker."""
    return (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not SECRET_WORDS.search(name)


@dataclass(frozen=True)
class Plan:
    """What the judging process decided for one worker: its own scratch folder, the judge's cache,
    its log file, the folders it may read besides the system's and Python's, and the fd of the socket
    its seccomp listener goes back on."""

    scratch: str
    cache: str
    log: str
    read: tuple[str, ...] = ()
    channel: int = -1
    opponent: bool = False  # a worker for jobs that run no candidate code: it writes the opponent's caches

    def write_roots(self) -> list[Path]:
        names = OPPONENT_WRITES if self.opponent else ()
        return [Path(self.scratch), *(Path(self.cache) / name for name in names), Path("/dev/shm")]

    def cache_reads(self) -> list[Path]:
        # Every worker reads the folders of processes that run no candidate code (a checker's inputs, on
        # the CPU); those read the candidates' folders too (a worker's outputs, trials/arena.py).
        names = CACHE_READS + (TRUSTED,) + (("scratch",) if self.opponent else ())
        return [Path(self.cache) / name for name in names]

    def write_files(self) -> list[Path]:
        return [Path(self.log), *(Path(p) for pattern in DEVICE_FILES for p in glob.glob(pattern))]


@dataclass
class Parent:
    """The judging process's end of one worker's sandbox: its plan, its environment, the socket its
    seccomp listener comes back on (and the worker's end of it, until spawned), the supervisor."""

    plan: Plan
    env: dict[str, str]
    channel: socket.socket
    child_end: socket.socket
    supervisor: seccomp.Supervisor | None = None
    lent: Path | None = None  # the build folder lent to its job (builds.lend), until it is given back

    def spawned(self) -> None:
        """Once the worker holds its end: serve its notified calls."""
        self.child_end.close()
        writable = seccomp.writable_under(self.plan.write_roots(), self.plan.write_files())
        self.supervisor = seccomp.Supervisor(self.channel, writable)

    def refusals(self) -> list[seccomp.Refusal]:
        return list(self.supervisor.refusals) if self.supervisor else []

    def bounds_reports(self) -> list[dict] | None:
        """What the worker's bounds trial launcher reported (run/launcher.py); None where it has none."""
        return self.supervisor.settled_reports() if self.supervisor and self.supervisor.launched else None

    def assign(self, job: Job) -> Job:
        """The job as its worker gets it, with its build folder: a candidate's own (builds.folder), lent
        into the worker's scratch folder; a job with no candidate builds in the scratch folder."""
        own = Path(self.plan.scratch) / BUILD
        if self.plan.opponent or not job.runs_candidate or job.candidate_source is None:
            own.mkdir(exist_ok=True)
            return dataclasses.replace(job, build_dir=str(own))
        place = builds.folder(Path(self.plan.cache), job.candidate_source)
        built = builds.lend(place, own)
        self.lent = place if built == place else None
        return dataclasses.replace(job, build_dir=str(built))

    def remove(self) -> None:
        self.child_end.close()
        if self.lent is not None:
            with contextlib.suppress(OSError):
                builds.give_back(self.lent, Path(self.plan.scratch) / BUILD)
            self.lent = None
        shutil.rmtree(self.plan.scratch, ignore_errors=True)


def prepare(cache: Path, log: Path, extra: Mapping[str, str], opponent: bool = False) -> Parent:
    """A new worker's sandbox, before it is spawned (pass `child_end` to it). `extra` holds the variables
    set for the worker on top of the allowlisted ones (its device, its cores, its allocator). `opponent`:
    the worker will run no candidate code, and writes the opponent's caches instead of the candidates'."""
    cache = Path(cache).resolve()
    scratch = cache / (TRUSTED if opponent else "scratch") / secrets.token_hex(6)
    made = CACHE_READS + OPPONENT_WRITES + (TRUSTED, "scratch")  # a folder read must exist as the rules are made
    for folder in (scratch / "home", scratch / "tmp", *(cache / name for name in made)):
        folder.mkdir(parents=True, exist_ok=True)
    ours, theirs = socket.socketpair()
    plan = Plan(str(scratch), str(cache), str(Path(log).resolve()), tuple(_import_roots()), theirs.fileno(), opponent)
    env = environment(cache, scratch, extra)
    env[PLAN] = json.dumps(dataclasses.asdict(plan))
    return Parent(plan, env, ours, theirs)


def environment(cache: Path, scratch: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted variables of this process, `extra`, and home, temporary and build folders in
    `scratch` (a job's are set when it comes: worker._job_environment)."""
    env = {k: v for k, v in os.environ.items() if passes(k)}
    env.update(extra)
    env.update(HOME=str(scratch / "home"), TMPDIR=str(scratch / "tmp"), XDG_CACHE_HOME=str(scratch / "home"),
               PYTHONDONTWRITEBYTECODE="1", PYTORCH_KERNEL_CACHE_PATH=str(scratch / "home" / "torch-kernels"),
               TRITON_HOME=str(scratch / "home"), KERNELEVO_CACHE_DIR=str(cache))
    if "PYTHONPATH" in env:  # an empty or relative entry is the current folder: a worker's is its own to write
        env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if os.path.isabs(p))
    return env


def _import_roots() -> list[str]:
    """Where this process imports from (and so the worker, whose tasks import what this process
    imported them with): sys.path, resolved. The current folder only where sys.path names it."""
    roots = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(path) and path != "/":
            roots.append(path)
    return roots


def confine(launch: Callable[[list[Path], list[Path], list[Path], int, int], tuple[int, ...]] | None = None
            ) -> Confinement:
    """In the worker, before any thread or candidate code exists: apply the plan the parent passed.
    `launch(read, write, write_files, Landlock ABI, channel fd)` is called first, with the rules about to hold, where
    the worker may run candidates and the kernel has Landlock: it forks the bounds trial's launcher
    (run/launcher.py), which confines itself on its own and returns its filter's listener."""
    raw = os.environ.get(PLAN)
    if not raw:
        why = "unconfined: started without a sandbox plan"
        return Confinement(environment="as inherited", files=why, network=why, processes=why)
    data = json.loads(raw)
    plan = Plan(**{**data, "read": tuple(data["read"])})
    os.chdir(plan.scratch)
    version = landlock.abi()
    rules = (read_roots(plan), plan.write_roots(), plan.write_files())
    launcher = launch(*rules, version, plan.channel) if launch is not None and version and not plan.opponent else ()
    channel = socket.socket(fileno=plan.channel)
    try:
        filtered = seccomp.install(channel, launcher)
    finally:
        channel.close()
    held = landlock.restrict(*rules, version) if version else set()
    global applied
    applied = describe(filtered, version, held, len(os.environ))
    return applied


def describe(filtered: str, version: int, held: set[str], variables: int) -> Confinement:
    """What held, part by part, in words; "unconfined: why" where nothing did."""
    seccomp_note = {"notify": "seccomp, refusals reported", "errno": "seccomp"}.get(filtered)
    lock = f"Landlock ABI {version}"
    network = [f"no network socket ({seccomp_note})"] if seccomp_note else []
    network += [f"no TCP bind or connect ({lock})"] if "tcp" in held else []
    processes = [f"no ptrace or process memory outside the sandbox ({lock})"] if held else []
    processes += [f"no ptrace, process memory or io_uring ({seccomp_note})"] if seccomp_note else []
    processes += [f"no signal out of the sandbox ({lock})"] if "scopes" in held else []
    return Confinement(
        environment=f"allowlist: {variables} variables, none named like a key, token, secret or password",
        files=f"reads system, Python and cache folders; writes only its own ({lock})" if "files" in held
        else "unconfined: this kernel offers no Landlock (Linux 5.13 or later, enabled)",
        network="; ".join(network) or "unconfined: neither seccomp nor Landlock's TCP rules (Linux 6.7) here",
        processes="; ".join(processes) or "unconfined: neither seccomp nor Landlock here")


def _scratch() -> Path | None:
    """In a worker: its scratch folder, as the plan says (None: started without one)."""
    return Path(json.loads(os.environ[PLAN])["scratch"]) if os.environ.get(PLAN) else None


def scratch_folder() -> Path:
    """In a worker: the folder it may write (its scratch folder, else where it runs)."""
    return _scratch() or Path(os.getcwd())


def opponent_environment(job: Job) -> None:
    """In the worker, before the job's code runs: torch.compile's and torch's kernel caches for the task's
    reference. A baseline job (no candidate code) uses the task's opponent folder; a compile_beside or modes
    job, whose candidate runs in the same process as the compiled reference, a copy of it in its scratch folder,
    so that the reference compiles from what only baseline jobs wrote (and nothing it does there lasts)."""
    from kernelevo.tasks import source_hash

    folder = Path(job.cache_dir) / OPPONENT / source_hash(job.task_source)[:16]
    if job.kind in ("compile_beside", "modes"):
        copy = (_scratch() or Path(os.getcwd())) / OPPONENT
        if folder.is_dir():
            shutil.copytree(folder, copy, symlinks=True)
        folder = copy
    for variable, name in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
                           ("PYTORCH_KERNEL_CACHE_PATH", "torch-kernels")):
        (folder / name).mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(folder / name)
    # No autotuning results on disk: a kernel loaded from inductor's cache keeps the absolute path it was compiled
    # at, and writes its best config beside it. From a copy, that is the task's folder, which a job running candidate
    # code may not write (a modes job was refused for it: max-autotune-no-cudagraphs, H200, 2026-12-02). The
    # configs are benchmarked in the process instead, by the calls before timing; compiled graphs stay cached.
    import torch._inductor.config

    torch._inductor.config.autotune_local_cache = False


def localize(job: Job) -> Job:
    """The job with its task's and candidate's sources written into the worker's scratch folder, under
    their own file names, and their paths pointing there: tools that read a module's file (torch.compile's
    tracer, inspect) find the source that was executed, and the user's folders need not be readable."""
    scratch = _scratch()
    if scratch is None:
        return job
    moved = {}
    for kind, source, given in (("task", job.task_source, job.task_path),
                                ("candidate", job.candidate_source, job.candidate_path)):
        if source is not None and given:
            path = scratch / kind / Path(given).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
            moved[f"{kind}_path"] = str(path)
    return dataclasses.replace(job, **moved)


def read_roots(plan: Plan) -> list[Path]:
    """What a worker may read: the system's folders, Python's, kernelevo's, the paths its tools and
    libraries come from, CUDA's, the folders of the judge's cache it uses, and what the parent imports from."""
    roots = [*SYSTEM_READS, sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), *sys.path, *plan.read, *plan.cache_reads()]
    roots += [p for name in ("PATH", "LD_LIBRARY_PATH", "KERNELEVO_SANDBOX_READ")
              for p in os.environ.get(name, "").split(os.pathsep)]
    roots += [os.environ.get(name, "") for name in ("CUDA_HOME", "CUDA_PATH")]
    roots += [p for name, module in list(sys.modules.items()) if name.split(".")[0] == "kernelevo"
              for p in getattr(module, "__path__", [])]
    import importlib.util

    spec = importlib.util.find_spec("kernelevo.runtime")  # what candidates import
    roots += list(spec.submodule_search_locations or []) if spec else []
    resolved = {os.path.realpath(r) for r in roots if r and os.path.isabs(r) and os.path.exists(r)}
    return [Path(r) for r in sorted(resolved) if r != "/"]


def scrub_environment_block(keep: Callable[[str], bool] = passes) -> None:
    """Overwrite, in this process's memory, the values the kernel shows in /proc/PID/environ of every
    variable a worker is not given: a candidate may read that file of the process that spawned it
    where Landlock does not stop it (as root it does not). This process keeps its values: os.environ
    has them, and each is set again for the C library and the processes it starts."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start and env_end (stat fields 50 and 51)
        block = ctypes.string_at(start, end - start)
    except (OSError, IndexError, ValueError):
        return
    offset = 0
    for entry in block.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        text = name.decode(errors="replace")
        if equals and value.strip(b"*") and not keep(text) and text in os.environ:
            ctypes.memset(start + offset + len(name) + 1, ord("*"), len(value))
            os.putenv(text, os.environ[text])
        offset += len(entry) + 1


def precompile() -> None:
    """Write the bytecode of the judge's own modules where Python keeps it, from this (unconfined)
    process: a worker may not write there, and would otherwise compile every module it imports from
    source, each time (an editable install has no bytecode until something writes it)."""
    import compileall
    import importlib.util

    for name in ("kernelevo", "kernelevo.judge"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            with contextlib.suppress(OSError):
                compileall.compile_dir(folder, quiet=2, workers=1)


def judged(result: dict, refusals: list[seccomp.Refusal], candidate: bool) -> dict:
    """A worker's result with what its sandbox refused: a candidate that tried to reach beyond its
    folders, the network or another process is `rejected io_access`, whatever it computed."""
    if not refusals:
        return result
    seen = [dataclasses.asdict(r) for r in refusals]
    evidence = {**(result.get("evidence") or {}), "refused": seen}
    if not candidate:
        return {**result, "evidence": evidence}
    calls = "; ".join(dict.fromkeys(f"{r.call}({r.detail})" for r in refusals))
    return {**result, "verdict": "rejected", "reason": "io_access",
            "message": f"reached beyond its sandbox, refused: {calls[:300]}",
            "evidence": {**evidence, "verdict_before": result.get("verdict"), "reason_before": result.get("reason")}}


def probe(folder: Path) -> dict:
    """Confine a short-lived process as a worker is confined, and have it try what a hostile candidate
    would: write a file outside its folders and connect to a listener on 127.0.0.1. For `doctor`:
    {"confinement", "wrote_outside", "connected", "refusals"}."""
    import subprocess

    folder = Path(folder)
    outside = folder / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    parent = prepare(folder / "cache", folder / "probe.log", {})
    try:
        proc = subprocess.Popen([sys.executable, "-s", "-P", "-m", "kernelevo.judge.run.sandbox", str(outside),
                                 str(listener.getsockname()[1])], stdout=subprocess.PIPE, text=True,
                                pass_fds=(parent.child_end.fileno(),), env=parent.env, cwd=parent.plan.scratch)
        parent.spawned()
        out, _ = proc.communicate(timeout=60)
        try:
            listener.accept()[0].close()
            connected = True
        except OSError:
            connected = False
        data = json.loads(out)
        return {"confinement": Confinement(**data["confinement"]), "connected": connected or data["connected"],
                "wrote_outside": (outside / "probe.txt").exists(), "refusals": parent.refusals()}
    finally:
        listener.close()
        parent.remove()


def _probe_child(outside: str, port: int) -> None:
    confinement = confine()
    try:
        Path(outside, "probe.txt").write_text("written from inside the sandbox")
    except OSError:
        pass
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        connected = True
    except OSError:
        connected = False
    print(json.dumps({"confinement": dataclasses.asdict(confinement), "connected": connected}))


if __name__ == "__main__":
    _probe_child(sys.argv[1], int(sys.argv[2]))
