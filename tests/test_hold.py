"""On the CPU a timing phase holds the machine (judge/hold.py): every other judge worker of this
process is paused meanwhile, and its limits do not run while it is paused."""
import subprocess
import sys
import time
from pathlib import Path

from kernelevo.judge import hold


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
