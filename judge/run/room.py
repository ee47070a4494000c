"""A device's memory, shared by the jobs judged on it at once, or held by one job alone.

Jobs on one device overlap: while one runs its trials under the device lock, others build, construct and
wait, and kept checkers hold their last job's arenas. On a task near the memory cap (the KernelBench sample's
2 GiB a call) their memory together exhausted an H200's 140 GiB (2026-11-29): honest kernels were refused as
out of memory for what their neighbours held. So a job that runs out of memory beside others is judged again
alone (executor.py): only a job that runs out of memory with the device to itself is refused for it.

The host clock's test for escaped work is the other verdict a neighbour can decide. In the sample's rounds
(2026-11-30, H200) four nvrtc and Triton GEMM tune variants were refused beside their siblings, a synchronised
call taking 2x its CUDA-event time in each of two measurements; kernel 151 of them passed alone (kernelevo
evaluate), and did not escape beside repeated sibling builds either (0.001 ms against 3.9). So a job refused for
escaped work beside others is judged again alone too; a side stream escapes there as well.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class DeviceRoom:
    """A readers-writer lock over one device's memory: any number of jobs `shared`, or one `alone`. A job
    waiting to be alone lets no new shared job in, so it is not starved by a stream of them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting = 0  # jobs waiting to be alone

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting)
            self._sharing += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharing -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._alone and not self._sharing)
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


def out_of_memory(result: dict) -> bool:
    """Whether a job's result is a refusal for running out of device memory (judge/verdicts.py)."""
    return result.get("verdict") == "runtime_error" and result.get("reason") == "out_of_memory"


def decided_by_neighbours(result: dict) -> str | None:
    """Why a refusal may be its neighbours' doing (the note of its judgement again alone), or None."""
    if out_of_memory(result):
        return "ran out of device memory beside other jobs"
    if result.get("verdict") == "rejected" and result.get("reason") == "escaped_work":
        return "its host clock exceeded its CUDA events beside other jobs"
    return None
