"""Turning what went wrong into a verdict, a stable reason id, one line and an excerpt."""
from __future__ import annotations

import dataclasses
import re
import signal
import traceback
from typing import TYPE_CHECKING, Mapping

from kernelevo.evaluation import Failure, Verdict
from kernelevo.tasks import first_line

if TYPE_CHECKING:
    from kernelevo.judge.job_result import JobResult

EXCERPT_LINES = 20

# Substrings of CUDA/driver error text -> reason id. Order matters: first match wins.
_CUDA_REASONS = (
    ("illegal memory access", "illegal_memory_access"),
    ("CUDA_ERROR_ILLEGAL_ADDRESS", "illegal_memory_access"),
    ("misaligned address", "misaligned_address"),
    ("CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned_address"),
    ("illegal instruction", "illegal_instruction"),
    ("unspecified launch failure", "launch_failure"),
    ("CUDA_ERROR_LAUNCH_FAILED", "launch_failure"),
    ("too many resources requested", "launch_out_of_resources"),
    ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "launch_out_of_resources"),
    ("invalid configuration argument", "invalid_launch_configuration"),
    ("CUDA_ERROR_INVALID_VALUE", "invalid_launch_configuration"),
    ("device-side assert", "device_assert"),
    ("out of memory", "out_of_memory"),
    # a candidate's own allocation through cuda-python: as much the device's memory as torch's message
    ("cudaErrorMemoryAllocation", "out_of_memory"),
    ("CUDA_ERROR_OUT_OF_MEMORY", "out_of_memory"),
    ("CUDA error", "cuda_error"),
)


def error_lines(log: str, limit: int = EXCERPT_LINES) -> str:
    """The compiler's error lines with their context, or the tail of the log if none match."""
    lines = log.splitlines()
    picked = []
    for i, line in enumerate(lines):
        if re.search(r"\berror\b|Error|undefined reference|fatal", line):
            picked.extend(lines[i:i + 3])
        if len(picked) >= limit:
            break
    picked = list(dict.fromkeys(picked)) if picked else lines[-limit:]
    return "\n".join(picked[:limit])


def tail(text: str, limit: int = EXCERPT_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-limit:])


def _first_line(exc: BaseException) -> str:
    return first_line(exc) or type(exc).__name__


def classify_build(exc: BaseException) -> Failure:
    """A failure while importing the candidate or constructing ModelNew."""
    from kernelevo.runtime import CompileError

    if isinstance(exc, CompileError):
        first = error_lines(exc.log, 1) or "compilation failed"
        return Failure("compile_error", exc.compiler, f"{exc.compiler}: {first.strip()}", error_lines(exc.log))
    if isinstance(exc, SyntaxError):
        return Failure("compile_error", "python_syntax", f"line {exc.lineno}: {exc.msg}", exc.text or "")
    text = str(exc)
    if "Error building extension" in text or "ninja" in text and "error" in text.lower():
        return Failure("compile_error", "inline_build", _first_line(exc), error_lines(text))
    return classify_run(exc, construct=True)


def classify_run(exc: BaseException, construct: bool = False) -> Failure:
    """A failure while running the candidate (or constructing it, if `construct`)."""
    from kernelevo.runtime import LaunchError

    text = f"{type(exc).__name__}: {exc}"
    excerpt = "".join(traceback.format_exception(exc)[-8:]).strip()
    if type(exc).__name__ == "CompilationError" and type(exc).__module__.startswith("triton"):
        return Failure("compile_error", "triton", f"triton: {_first_line(exc)}", tail(str(exc)))
    if type(exc).__name__ == "OutOfMemoryError":
        return Failure("runtime_error", "out_of_memory", _first_line(exc), excerpt)
    for needle, reason in _CUDA_REASONS:
        if needle in text:
            return Failure("runtime_error", reason, _first_line(exc), excerpt)
    if isinstance(exc, LaunchError):
        return Failure("runtime_error", "launch_error", _first_line(exc), excerpt)
    reason = "construct_failed" if construct else "exception"
    return Failure("runtime_error", reason, f"{type(exc).__name__}: {_first_line(exc)}", excerpt)


def classify_exit(returncode: int, log: str, phase: str) -> Failure:
    """The worker died without a verdict: a signal (segfault, abort) or an unexpected exit."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        reason = "segfault" if name == "SIGSEGV" else "killed" if name == "SIGKILL" else "crashed"
        message = f"the candidate's process died of {name} during {phase}"
    elif returncode == 0:  # a clean exit before any verdict: the judge was to be skipped
        return Failure("rejected", "early_exit", f"the candidate's process exited with code 0 during {phase}, "
                       "before the judge reported: candidate code must not end the process", tail(log))
    else:
        reason, message = "exited", f"the candidate's process exited with code {returncode} during {phase}"
    for needle, cuda_reason in _CUDA_REASONS[:-1]:
        if needle in log:
            reason = cuda_reason
            break
    return Failure("runtime_error", reason, message, tail(log))


def interpreter_timeout(result: JobResult, fmt: str, device: str) -> JobResult:
    """A Triton candidate that ran out of time on the CPU: what happened and what to do."""
    if fmt != "triton" or device.startswith("cuda") or result.verdict != Verdict.TIMEOUT:
        return result
    return dataclasses.replace(result, message=result.message + (
        "; Triton's interpreter runs every program of the grid in Python on the CPU, so a task of real size "
        "can take longer than that: judge Triton kernels on a GPU, or give the run more time "
        "(kernelevo evaluate --run-timeout)"))


def passed(result: Mapping) -> bool:
    """Whether a job's result inside judge/run (a worker's, the checker's JSON) is a pass: its verdict is `ok`.
    Out of judge/run a result is a JobResult, which says so itself (`.passed`)."""
    return result.get("verdict") == Verdict.OK
