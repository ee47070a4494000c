"""On the CPU a timing phase holds the machine: no other judge job of this process runs meanwhile.

The CPU backend times candidates on the cores that also build, import and check other candidates.
A parallel region (OpenMP, torch's intra-op pool) is as slow as its slowest thread, so one core
taken by a compiler or by another worker's `import torch` stretched a call several-fold: the same
kernel measured 3.0x to 9.1x eager within one run (benchmarks/cpu_timing_noise.py). So while a
worker times on the CPU, every other judge worker of this process is paused with SIGSTOP to its
process group (compilers it started included) and resumed with SIGCONT afterwards; workers started
meanwhile are paused as they register. Paused time does not count against a job's limits
(`clock`). One hold at a time, so a timing worker is never itself paused. What other processes
do to the machine is not this process's to stop: the timing notes it instead (timing.LoadWatch).

A paused worker cannot notice that this process died (kill -9 mid-hold): it would stay stopped for
good. So a small shell process, started once in a session of its own, is told which workers are
paused; when this process is gone (its pipe closes), it resumes them, and they exit as orphans do.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

# The last line read names the paused process groups; at end of input they are resumed.
_RESUMER = 'paused=""; while read -r line; do paused="$line"; done; for g in $paused; do kill -CONT -"$g"; done'

_lock = threading.Lock()  # guards the fields below
_live: set[int] = set()  # process groups of this process's live judge workers
_holder: int | None = None  # the process group holding the machine, if any
_since = 0.0
_paused: dict[int, float] = {}  # per process group: seconds paused in holds that have ended
_one_at_a_time = threading.Lock()
_resumer: subprocess.Popen | None = None


def register(group: int) -> None:
    """A judge worker's process group, live from now on (paused at once if the machine is held)."""
    with _lock:
        _live.add(group)
        if _holder is not None:
            _signal(group, signal.SIGSTOP)
            _tell_resumer(_live - {_holder})


def unregister(group: int) -> None:
    with _lock:
        _live.discard(group)
        _paused.pop(group, None)


def clock(group: int) -> float:
    """A monotonic clock that stands still while the worker `group` is paused: its limits run on it."""
    with _lock:
        paused = _paused.get(group, 0.0)
        if _holder is not None and _holder != group and group in _live:
            paused += time.monotonic() - _since
        return time.monotonic() - paused


@contextlib.contextmanager
def machine(group: int) -> Iterator[float]:
    """Pause every other live worker while the body runs; yields the seconds spent waiting for
    another hold to end."""
    global _holder, _since
    asked = time.monotonic()
    with _one_at_a_time:
        waited = time.monotonic() - asked
        with _lock:
            _holder, _since = group, time.monotonic()
            _tell_resumer(_live - {group})  # before the first pause: a death in between is covered
            for other in _live - {group}:
                _signal(other, signal.SIGSTOP)
        try:
            yield waited
        finally:
            with _lock:
                held = time.monotonic() - _since
                for other in _live - {group}:
                    _signal(other, signal.SIGCONT)
                    _paused[other] = _paused.get(other, 0.0) + held
                _holder = None
                _tell_resumer(set())


def _tell_resumer(groups: set[int]) -> None:
    """Name the paused groups to the resumer (started on first use), under _lock."""
    global _resumer
    if _resumer is None or _resumer.poll() is not None:
        _resumer = subprocess.Popen(["sh", "-c", _RESUMER], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _resumer.stdin.write((" ".join(map(str, sorted(groups))) + "\n").encode())
        _resumer.stdin.flush()
    except OSError:  # it died: the next hold starts another
        _resumer = None


def _signal(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
