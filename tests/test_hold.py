"""On the CPU a timing phase holds the machine (judge/measure/hold.py): every other judge worker of this
process is paused meanwhile, and its limits do not run while it is paused."""
import subprocess
import sys
import time
from pathlib import Path

from kernelevo.judge.measure import hold


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def _busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


def test_a_hold_pauses_every_other_worker_and_their_clocks():
    timed, other, late = _busy(), _busy(), None
    try:
        for p in (timed, other):
            hold.register(p.pid)
        before = hold.clock(other.pid)
        with hold.machine(timed.pid) as waited:
            time.sleep(0.3)
            assert waited < 0.3
            assert _state(other.pid) == "T" and _state(timed.pid) in "RS"
            late = _busy()  # a worker started during the hold is paused as it registers
            hold.register(late.pid)
            time.sleep(0.1)
            assert _state(late.pid) == "T"
            paused_clock = hold.clock(other.pid)
            time.sleep(0.2)
            assert abs(hold.clock(other.pid) - paused_clock) < 0.05  # stands still while paused
        time.sleep(0.1)
        assert _state(other.pid) in "RS" and _state(late.pid) in "RS"
        assert hold.clock(other.pid) - before < 0.3  # the 0.6 s paused did not count
        assert hold.clock(timed.pid) > before  # the holder's own limits run on
    finally:
        for p in (q for q in (timed, other, late) if q is not None):
            hold.unregister(p.pid)
            p.kill()
            p.wait()


ORCHESTRATOR = """
import subprocess, sys, time
from kernelevo.judge.measure import hold
busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(2)]
for p in busy:
    hold.register(p.pid)
print(" ".join(str(p.pid) for p in busy), flush=True)
with hold.machine(busy[0].pid):
    print("held", flush=True)
    time.sleep(60)
"""


def test_workers_paused_by_a_killed_process_are_resumed():
    """kill -9 in the middle of a hold: the paused worker is resumed (and, as an orphan, would then
    exit on its own), not left stopped for good."""
    parent = subprocess.Popen([sys.executable, "-c", ORCHESTRATOR], stdout=subprocess.PIPE, text=True)
    timed, paused = (int(x) for x in parent.stdout.readline().split())
    try:
        assert parent.stdout.readline().strip() == "held"
        time.sleep(0.2)
        assert _state(paused) == "T"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _state(paused) == "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(paused) in "RS"
    finally:
        for pid in (timed, paused):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_cpu_workers_keep_a_warm_heap():
    """CPU judge workers run with glibc's large-block mapping off (executor.CPU_MALLOC): otherwise a
    timed call pays a page fault per 4 KiB of every tensor it allocates, in some processes and not
    others, and the figure measures the allocator."""
    from kernelevo.judge.run.executor import CPU_MALLOC, _child_env

    assert _child_env("cpu", {}).items() >= CPU_MALLOC.items()
    assert not set(CPU_MALLOC) & set(_child_env("cuda:0", {})) - set(__import__("os").environ)
