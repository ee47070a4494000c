"""The bounds trial: every index a candidate's kernels touch lies inside the tensors they were given.

The correctness trials cannot see a read or write past the end of a tensor that lands in memory the
allocator keeps: a grid launched per hidden unit instead of per row read and wrote past the end of
its input and output on a derived shape, inside the CUDA caching allocator's slack, and every real
row came out right (H200, 2026-11-26, 4.7x `ok`). A memory checker sees it:
- on a GPU, compute-sanitizer's memcheck, with the caching allocator off
  (PYTORCH_NO_CUDA_MEMORY_CACHING=1) so each tensor is its own allocation with no slack after it;
  with the allocator on it reported nothing for that kernel;
- on the CPU (C candidates), AddressSanitizer: the candidate's C is built with its checks and its
  runtime is preloaded, so every heap block, torch's tensors included, has a poisoned zone after
  it. (Guard pages around the inputs alone would miss the outputs a candidate allocates itself, and
  reads before a tensor's start.)
The checked process (run/bounds_target.py) is started by the worker's launcher (run/launcher.py), a
process of the candidate's sandbox that lets compute-sanitizer's channel through; where the kernel has
no Landlock, by the worker itself. It runs the candidate once on the task's shape and once on each
derived shape, after the trials passed and while the worker holds the device. An invalid access
reported in the candidate's own code is `rejected out_of_bounds`, naming the kernel, the access and the
shape; a missing checker skips the trial and the verdict's notes say so.
It finds bugs; it is no defence against a hostile kernel. The checked process runs the candidate's code,
which can tell that it is checked (the checker's library in its memory map, the environment) and then
take a path that stays in bounds, or write the markers itself and exit.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kernelevo.runtime.c import SANITIZE_VARIABLE
from kernelevo.judge.job import Job

MARK = "KERNELEVO-BOUNDS-SHAPE: "  # what the checked process (run/bounds_target.py) writes before each shape
DONE = "KERNELEVO-BOUNDS-DONE"  # ... and after the last

# Measured on an H200 (2026-11-26): memcheck checked a torch process in seconds outside the sandbox, and
# did not finish in 280 s inside it: its front end and the checked process talk over a UNIX stream
# socket, which a worker may not make. The launcher (run/launcher.py) lets that one channel through;
# without one (no Landlock here) GPU candidates are bounds-checked only where workers run unconfined.
SANDBOXED = ("compute-sanitizer cannot check a process inside the candidate's sandbox without the bounds "
             "trial's launcher (this kernel has no Landlock): GPU indices not checked")
EXIT_CODE = 86  # what the checkers exit with when they found an error
LIMIT_S = 120.0
_MEMCHECK = re.compile(r"Invalid (__\w+__) (read|write) of size (\d+) bytes")
_ASAN = re.compile(r"ERROR: AddressSanitizer: ([\w-]+) on address")
_ASAN_ACCESS = re.compile(r"^(READ|WRITE) of size (\d+)", re.M)
# "#0 0x7f.. in rmsnorm /cache/c/tmpab12/candidate.c:12", or "in f (/cache/c/ab12.so+0x11c5)" without line tables
_ASAN_FRAME = re.compile(r"#0 0x[0-9a-f]+ in (\S+) \(?([^\s:+()]+)")


@dataclass(frozen=True)
class Access:
    """The first invalid access a checker reported in the candidate's code."""
    kernel: str
    kind: str  # read or write
    size: int  # bytes
    space: str  # "__global__", "__shared__", "heap-buffer-overflow"...
    shape: str  # the marker before it: which shape's call made it


@dataclass(frozen=True)
class Outcome:
    checker: str  # "compute-sanitizer memcheck", "AddressSanitizer", or "" where none ran
    access: Access | None
    note: str  # for the verdict's notes: what ran and what it found, or why it did not run
    seconds: float
    report: str = ""  # the checker's lines around the access
    where: str = ""  # the process that started the checker (launcher.run says)


def compute_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    path = os.path.join(home, "bin", "compute-sanitizer")
    return path if os.access(path, os.X_OK) else None


def asan_runtime() -> str | None:
    """AddressSanitizer's shared runtime of the C compiler candidates are built with, or None."""
    found = _compiler_file("libasan.so")
    return found[0] if found else None


def _compiler_file(name: str) -> list[str]:
    """[the path of library `name` the C compiler links with], or [] where it has none."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return []
    try:
        out = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    path = out.stdout.strip()
    return [os.path.realpath(path)] if out.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else []


def applies(job: Job, device: str, launched: bool = False) -> str:
    """Why the trial does not apply to this candidate ("" where it does). `launched`: the checker would
    be started by the bounds trial's launcher (run/launcher.py), not by a confined worker itself."""
    fmt = job.format or ""
    if device.startswith("cuda"):
        from kernelevo.judge.run import sandbox

        if not launched and sandbox.applied and not sandbox.applied.unconfined:
            return SANDBOXED
        return "no kernel of its own" if fmt == "torch" else ""
    return "" if fmt == "c" else f"only C candidates are bounds-checked on the CPU, this one is {fmt or 'unknown'}"


def command(job_file: Path, device: str) -> tuple[list[str], dict, str] | str:
    """(argv, environment, checker) of the checked process, or why there is none."""
    # -s -P: it starts in a folder the candidate may write, and its HOME is one: neither is on its import path
    target = [sys.executable, "-s", "-P", "-m", "kernelevo.judge.run.bounds_target", str(job_file), device]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if device.startswith("cuda"):
        tool = compute_sanitizer()
        if tool is None:
            return "compute-sanitizer not found (it comes with the CUDA toolkit: put its bin folder on PATH)"
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        # API errors are not the kernels' (cuda-python probes driver entry points that fail by design)
        return ([tool, "--tool", "memcheck", "--report-api-errors", "no", "--error-exitcode", str(EXIT_CODE),
                 "--print-limit", "20",
                 "--launch-timeout", "60", *target], env, "compute-sanitizer memcheck")
    runtime = asan_runtime()
    if runtime is None:
        return "the C compiler has no AddressSanitizer runtime (libasan): install it with the compiler"
    # libstdc++ preloaded behind it: torch throws C++ exceptions (a shape its checks refuse), and ASan's
    # interceptor of __cxa_throw aborts where it found no real one when the process started
    env.update(LD_PRELOAD=" ".join([runtime, *_compiler_file("libstdc++.so.6")]), **{SANITIZE_VARIABLE: "address"},
               ASAN_OPTIONS=f"detect_leaks=0:halt_on_error=1:exitcode={EXIT_CODE}:alloc_dealloc_mismatch=0")
    return target, env, "AddressSanitizer"


def run(job: Job, device: str, limit_s: float = LIMIT_S, launched: bool = False) -> Outcome:
    """The candidate of `job` run on each of its shapes under the device's memory checker, started here
    (`launched`: this is the bounds trial's launcher)."""
    started = time.perf_counter()
    why = applies(job, device, launched)
    if why:
        return Outcome("", None, f"bounds trial skipped: {why}", 0.0)
    with tempfile.TemporaryDirectory(prefix="kernelevo-bounds-") as tmp:
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps(job.to_dict()))
        made = command(job_file, device)
        if isinstance(made, str):
            return Outcome("", None, f"bounds trial skipped: {made}", 0.0)
        argv, env, checker = made
        # One stream, so that a report follows the marker of the shape that made it. In the worker's own
        # process group, so that the executor's kill of the worker (a limit, Ctrl-C) ends it too.
        proc = subprocess.Popen(argv, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            text, _ = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)  # the checked process under compute-sanitizer holds the pipe too
            proc.communicate()
            return Outcome(checker, None, f"bounds trial ({checker}) not finished within {limit_s:.0f} s: "
                           "indices not checked", time.perf_counter() - started)
    seconds = time.perf_counter() - started
    access = parse_memcheck(text) if device.startswith("cuda") else parse_asan(text, job.cache_dir)
    if access is not None:
        return Outcome(checker, access, "", seconds, excerpt(text, access))
    if proc.returncode == EXIT_CODE:  # the checker found an error, but none this judge reads as an access
        return Outcome(checker, None, f"bounds trial ({checker}) reported an error that is not an access in the "
                       f"candidate's code ({first_error(text)}): indices not checked", seconds)
    if DONE not in text:
        last = (text.strip().splitlines() or ["no output"])[-1]
        return Outcome(checker, None, f"bounds trial ({checker}) did not finish (exit {proc.returncode}: "
                       f"{last[:160]}): indices not checked", seconds)
    shapes = text.count(MARK)
    return Outcome(checker, None, f"bounds trial: {checker} saw every index in bounds on {shapes} shapes "
                   f"({seconds:.1f} s)", seconds)


def first_error(text: str) -> str:
    """The first line of a checker's report ("========= Program hit ...", "==12==ERROR: AddressSanitizer: ...")
    that is not its banner or summary."""
    for line in text.splitlines():
        body = line.strip("= ")
        if line.startswith("==") and body and not body.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY")):
            return body[:160]
    return "no report"


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process descended from it (read from /proc's parent ids)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [pid], []
    while todo:
        found.append(todo.pop())
        todo += parents.get(found[-1], [])
    for p in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def _shape_before(text: str, at: int) -> str:
    start = text.rfind(MARK, 0, at)
    return text[start + len(MARK):text.find("\n", start)].strip() if start >= 0 else "the build"


def parse_memcheck(text: str) -> Access | None:
    """The first invalid access of a memcheck report: '========= Invalid __global__ read of size 4 bytes'
    then '=========     at kernel_name+0x90 in file.cu:12'."""
    found = _MEMCHECK.search(text)
    if not found:
        return None
    after = text[found.end():found.end() + 2000]
    at = re.search(r"^=+\s+at (?:0x[0-9a-f]+ in )?([^\s(+]+)", after, re.M)
    return Access(at.group(1) if at else "an unnamed kernel", found.group(2), int(found.group(3)),
                  found.group(1), _shape_before(text, found.start()))


def parse_asan(text: str, cache_dir: str) -> Access | None:
    """The first AddressSanitizer error whose top frame is in a candidate's compiled C (under the
    judge's cache); errors elsewhere (the interpreter, torch) are not the candidate's to answer for."""
    for found in _ASAN.finditer(text):
        block = text[found.start():found.start() + 3000]
        frame, access = _ASAN_FRAME.search(block), _ASAN_ACCESS.search(block)
        if frame and access and os.path.realpath(frame.group(2)).startswith(os.path.realpath(cache_dir)):
            return Access(frame.group(1), access.group(1).lower(), int(access.group(2)), found.group(1),
                          _shape_before(text, found.start()))
    return None


def excerpt(text: str, access: Access, lines: int = 12) -> str:
    """The checker's lines from the access on."""
    start = max(text.find(f"Invalid {access.space}"), text.find(f"AddressSanitizer: {access.space}"))
    return "\n".join(text[max(start, 0):].splitlines()[:lines])


def evidence(outcome: Outcome) -> dict:
    """The verdict's `evidence.bounds`: which checker ran where, how long, and what it saw."""
    found = {"checker": outcome.checker, "seconds": round(outcome.seconds, 2), "where": outcome.where}
    if outcome.access is not None:
        found.update({**dataclasses.asdict(outcome.access), "report": outcome.report})
    return found


def outcome_from(data: dict, where: str) -> Outcome:
    """An Outcome read back from its JSON form (run/launcher.py sends it so)."""
    access = Access(**data["access"]) if isinstance(data.get("access"), dict) else None
    return Outcome(**{**data, "access": access, "where": where})


def message(outcome: Outcome) -> str:
    a = outcome.access
    where = f"{a.space.strip('_')} memory" if a.space.startswith("__") else a.space
    return (f"bounds trial ({outcome.checker}): `{a.kernel}` made an out-of-bounds {a.kind} of {a.size} bytes "
            f"({where}) on {a.shape}; every index a kernel touches must lie inside its tensors")
