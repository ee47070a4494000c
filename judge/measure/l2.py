"""Persisting L2, which a candidate can leave set so that its own timed calls find their data in cache.

A context's persisting-L2 set-aside (the limit `CU_LIMIT_PERSISTING_L2_CACHE_SIZE`) and an access-policy
window (on a stream, or on one launch) mark the lines a kernel touches as persisting: the timing's flush (a
read of a buffer twice the L2's size) then leaves them where they are, and the next timed call finds its
data in L2. A window left on the timed stream applies to eager's calls as well. Issue 50 measured an honest
inline kernel at 1.10x eager with a window set and 1.40x without (an H100): a lever on the speedup, not a
kernel's merit.

The timing therefore runs with no set-aside. When a Clock is made (before any timed call) the judge waits
for the device, sets the limit to zero, empties the timed stream's window and returns every persisting line
to normal; with no set-aside, a window set at launch has nothing to persist into. Before each timed call
(timing.Clock.time_batch) it looks again, and where the limit or the window is set (only candidate code
sets them) it does the same before the call. A kernel may still use a window within its own call. The
context does not start at zero (9.4 MiB on an H100 with CUDA 13): `remember`, called at the worker's start,
reads what it was before any candidate code ran, so that a change made in the trials is named too.
Not measured: whether lines stay persisting when a candidate itself sets the limit back to what it was.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelevo.judge.trials.gate import driver_ok

_START: list[int] = []  # the context's set-aside before candidate code ran (remember)


@dataclass(frozen=True)
class Reset:
    """What the judge found set (before the timing, or before a timed call), and before how many timed calls."""
    found: str
    calls: int

    def note(self) -> str:
        when = f"before each of {self.calls} timed calls" if self.calls else "before its timed calls"
        return (f"the candidate left {self.found}; the judge took it away and returned every persisting L2 line "
                f"to normal {when}, so that no call found its data kept in L2")


def _driver():
    from cuda.bindings import driver

    return driver


def _window_attribute(driver):
    """The access-policy window's attribute id (its enum member was renamed between cuda-python versions)."""
    kind = driver.CUstreamAttrID
    for name in ("CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW", "CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW"):
        if hasattr(kind, name):
            return getattr(kind, name)
    raise RuntimeError("cuda-python names no access-policy window attribute")


def remember() -> None:
    """The context's set-aside as it is before any candidate code runs (the worker's start)."""
    driver = _driver()
    _START[:] = [int(driver_ok(driver.cuCtxGetLimit(driver.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE), "cuCtxGetLimit"))]


class Guard:
    """Made before the timed calls: no set-aside and an empty window on the timed stream from then on; `restore`
    before each timed call takes away what candidate code set since."""

    def __init__(self, stream: int):
        driver = _driver()
        self.driver, self.stream = driver, stream
        self.limit_id = driver.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE
        self.window_id = _window_attribute(driver)
        self.window = driver.CUstreamAttrValue()  # an empty window: no bytes, normal access
        self.calls = 0
        self.found = self._seen(_START[0] if _START else None)
        self._clear()

    def _seen(self, allowed: int | None) -> str | None:
        """What is set beyond an empty window and a set-aside of `allowed` bytes (None: any)."""
        limit = int(driver_ok(self.driver.cuCtxGetLimit(self.limit_id), "cuCtxGetLimit"))
        window = driver_ok(self.driver.cuStreamGetAttribute(self.stream, self.window_id), "cuStreamGetAttribute")
        size = int(window.accessPolicyWindow.num_bytes)
        left = [f"a persisting-L2 set-aside of {limit} bytes"] if allowed is not None and limit != allowed else []
        if size:
            left.append(f"an access-policy window of {size} bytes on the timed stream")
        return " and ".join(left) or None

    def _clear(self) -> None:
        import torch

        torch.cuda.synchronize()  # the calls queued so far ran with it; the next one must not
        d = self.driver
        driver_ok(d.cuCtxSetLimit(self.limit_id, 0), "cuCtxSetLimit")
        driver_ok(d.cuStreamSetAttribute(self.stream, self.window_id, self.window), "cuStreamSetAttribute")
        driver_ok(d.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")

    def restore(self) -> None:
        found = self._seen(0)
        if found is None:
            return
        self._clear()
        self.found = self.found or found
        self.calls += 1

    def reset(self) -> Reset | None:
        return Reset(self.found, self.calls) if self.found else None
