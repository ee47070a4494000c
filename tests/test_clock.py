"""The checker's clock (judge/trials/clock.py): its gate on the CPU, and its rule replayed over the figures
an H100 recorded (benchmarks/results/clock_survey-H100-2026-11-28.json)."""
import json
import os
import threading
import time

import pytest

from kernelevo.judge.trials import clock, gate

from conftest import ROOT

SURVEY = json.loads((ROOT / "benchmarks" / "results" / "clock_survey-H100-2026-11-28.json").read_text())
RECORDED = {name: c for name, c in SURVEY["clock"].items()
            if c.get("confirmed") and ("claimed_ms" in c or "speedup_eager" in c)}


def _claim(ms: float, speedup: float, fastest: float | None = None) -> dict:
    role = {"median_ms": ms} if fastest is None else {"median_ms": ms, "min_ms": fastest}
    return {"verdict": "ok", "timing": {"candidate": role}, "speedup_eager": speedup}


def _seen(c: dict) -> dict:
    return {"confirmed": True, "calls": c["calls"], "candidate_ms": c["candidate_ms"], "eager_ms": c["eager_ms"],
            "device": "cuda"}


def _figures(c: dict) -> tuple[float, float]:
    return c["claimed_ms"], c.get("speedup_claimed") or c["speedup_eager"]


@pytest.mark.skipif(not gate.available(), reason="no /dev/shm")
def test_a_block_waits_for_the_gate_and_its_flag_shows_on_the_checkers_clock():
    page = gate.Page()
    block = gate.Block(page.message(), "cpu")
    order = []

    def calls():
        block.hold()
        order.append("ran")
        block.finish()

    worker = threading.Thread(target=calls)
    worker.start()
    try:
        assert page.wait_done(0.2) is None and order == []  # held: nothing ran before the gate opened
        opened = page.open_gate()
        shown = page.wait_done(10.0)
        assert shown is not None and shown >= opened and order == ["ran"]
    finally:
        worker.join(10)
        block.close()
        page.close()
    assert not page.path.exists()


@pytest.mark.skipif(not gate.available(), reason="no /dev/shm")
def test_a_block_waiting_at_its_gate_spends_no_cpu_time_the_checker_would_count():
    """The checker reads the worker's thread's CPU time just before it opens the gate; a pause of the checker
    in between (another process ran) must not count as the calls' time (gate.NAP_S). A spinning wait ran the
    whole pause; this one sleeps through it."""
    page = gate.Page()
    block = gate.Block(page.message(), "cpu")
    spent = []

    def calls():
        started = time.thread_time()
        block.hold()
        spent.append(time.thread_time() - started)
        block.finish()

    worker = threading.Thread(target=calls)
    worker.start()
    try:
        time.sleep(0.3)  # the checker paused between its reading and the opening
        page.open_gate()
        assert page.wait_done(10.0) is not None
    finally:
        worker.join(10)
        block.close()
        page.close()
    assert spent and spent[0] < 0.1, spent  # a spinning wait counts up to the whole 0.3 s


@pytest.mark.skipif(not gate.available(), reason="no /dev/shm")
def test_a_cpu_flag_seals_the_outputs_and_one_written_before_them_does_not(tmp_path):
    """On the CPU the flag is the nonce sealed with the checksum of the outputs (gate.seal): a flag written the
    moment the gate opened (forged_report__clock_done_early_c.py) cannot match them, however late the checker
    reads them, and outputs changed after the flag was written no longer match it."""
    from kernelevo.judge.trials import arena

    outputs = arena.HostFile(tmp_path / "out", 4096, create=True)
    for early in (True, False):  # the honest block last: its flag is checked against a change below
        page = gate.Page()
        block = gate.Block(page.message(), "cpu")
        try:
            page.open_gate()
            block.hold()
            if early:
                block.finish()  # the nonce alone, before any output
            outputs.flat.fill_(7)  # the calls' outputs
            if not early:
                block.finish(gate.digest(outputs.flat))
            shown, word = page.wait_word(10.0, 0.0002)
            assert (word == gate.seal(page.done, gate.digest(outputs.flat.clone()))) is not early
        finally:
            block.close()
            page.close()
    outputs.flat[100] = 8  # changed after it was sealed
    assert gate.seal(page.done, gate.digest(outputs.flat)) != word
    assert gate.seal(5, 5) == 5  # never 0, the page's first value
    outputs.close()


def test_the_honest_figures_an_h100_recorded_stand():
    honest = {n: c for n, c in RECORDED.items() if not n.startswith("timing_mismatch")}
    assert len(honest) >= 25
    for name, c in honest.items():
        assert clock.judge(_claim(*_figures(c)), _seen(c)) is None, name


def test_the_slowed_reference_an_h100_recorded_is_a_timing_mismatch():
    c = RECORDED["timing_mismatch__slowed_reference.py"]
    said = clock.judge(_claim(*_figures(c)), _seen(c))
    assert said["reason"] == "timing_mismatch" and "eager" in said["message"]


@pytest.mark.parametrize("name", sorted(n for n in RECORDED if not n.startswith("timing_mismatch")))
def test_a_time_understated_four_times_is_refused_on_every_recorded_kernel(name):
    """What the rule can see: a worker whose clock reads a quarter of each call (its speedup four times
    what it is), on every kernel the H100 timed. Half is not always seen (elementwise_chain's 2x is not)."""
    ms, speedup = _figures(RECORDED[name])
    said = clock.judge(_claim(ms / 4, speedup * 4), _seen(RECORDED[name]))
    assert said is not None and said["reason"] == "timing_mismatch", name


def test_what_the_checker_could_not_confirm_decides_nothing():
    c = next(iter(RECORDED.values()))
    assert clock.judge(_claim(1e-6, 1e6), {**_seen(c), "confirmed": False, "why": "busy"}) is None


def test_on_the_cpu_only_the_busy_threads_time_decides():
    """A CPU block's wall time moves with the machine's load; the CPU time the kernel counted of the worker's
    one busy thread much less: a call cannot have taken much less than that."""
    seen = {"confirmed": True, "calls": 8, "candidate_ms": 5.0, "eager_ms": 2.0, "device": "cpu"}
    assert clock.judge(_claim(0.1, 20.0), seen) is None  # wall time alone: no verdict on the CPU
    assert clock.judge(_claim(0.45, 1.0), {**seen, "thread_ms": 0.9}) is None  # within the span
    # placing large outputs in the block costs the thread time the timed call did not pay: the slack grows with them
    assert clock.judge(_claim(0.2, 1.0), {**seen, "thread_ms": 0.9})["reason"] == "timing_mismatch"
    assert clock.judge(_claim(0.2, 1.0), {**seen, "thread_ms": 0.9, "slack_ms": 0.6}) is None
    said = clock.judge(_claim(0.2, 1.0), {**seen, "confirmed": False, "thread_ms": 2.0})
    assert said["reason"] == "timing_mismatch" and "calls ran 2.0000 ms" in said["message"]


def test_a_thread_slowed_by_a_busy_core_is_no_mismatch_and_a_clock_reading_a_quarter_is():
    """An honest C LSTM, timed at 4.13 ms a call, whose thread ran 6.77 ms a call in the block while another
    test process kept the other core busy (a 2-core VM, 2026-11-28): it was refused, then reverted in place."""
    seen = {"confirmed": False, "calls": 8, "candidate_ms": 9.0, "eager_ms": 2.0, "device": "cpu", "thread_ms": 6.7696}
    assert clock.judge(_claim(4.1269, 1.0), seen) is None
    assert clock.judge(_claim(6.7696 / 4, 1.0), seen)["reason"] == "timing_mismatch"
    # the patched host clock's fixture, as it read under load: 0.5 ms claimed, its thread 2.25 ms a call
    assert clock.judge(_claim(0.5, 1.0), {**seen, "thread_ms": 2.25})["reason"] == "timing_mismatch"
    # and on a CPU fast enough that its calls' thread time is 0.7 ms: a fixed 0.5 ms of slack let it through (CI)
    assert clock.judge(_claim(0.16, 1.0), {**seen, "thread_ms": 0.7, "slack_ms": 0.1625})["reason"] == "timing_mismatch"


def test_a_median_lengthened_by_preemption_does_not_hide_a_patched_clock():
    """Preemption lengthens a call's wall time, not its thread's CPU time: under a busy suite the patched clock's
    fixture claimed more than half its thread's time by its median and passed. Its fastest call still reads a
    fraction of what its thread ran. Figures of 2026-12-01 (2 cores, three spinning processes beside)."""
    seen = {"confirmed": True, "calls": 8, "candidate_ms": 9.0, "eager_ms": 2.0, "device": "cpu", "thread_ms": 1.62}
    assert clock.judge(_claim(0.9, 1.0), seen) is None  # the median alone: within the span
    said = clock.judge(_claim(0.9, 1.0, fastest=0.24), seen)
    assert said["reason"] == "timing_mismatch" and "its fastest 0.2400 ms" in said["message"]
    # honest C kernels under the same load: a median of 4.59 ms against a fastest call of 0.28, and the worst ratio
    # of thread time to fastest call seen (1.55); the LSTM above, whose fastest call is below its median
    assert clock.judge(_claim(4.5911, 1.0, fastest=0.2775), {**seen, "thread_ms": 0.3842}) is None
    assert clock.judge(_claim(0.4302, 1.0, fastest=0.396), {**seen, "thread_ms": 0.6123}) is None
    assert clock.judge(_claim(4.1269, 1.0, fastest=3.6), {**seen, "thread_ms": 6.7696}) is None
    # a fastest figure above the median (forged) is read as the median
    assert clock.judge(_claim(0.9, 1.0, fastest=5.0), seen) is None


def test_the_bound_is_the_thread_that_made_the_calls_where_it_ran_alone():
    before = {7: 0, 8: 0}
    assert gate.main_thread_ms(7, before, {7: 3_000_000, 8: 100_000}) == 3.0
    assert gate.main_thread_ms(7, before, {7: 3_000_000, 8: 900_000}) is None  # a pool at work: no bound
    assert gate.main_thread_ms(7, before, {7: 3_000_000, 8: 600_000}) == 3.0
    assert gate.main_thread_ms(7, None, {7: 1}) is None and gate.main_thread_ms(9, before, before) is None


def _block(ms: float, copy: float = 0.01, eager: float = 0.06, confirmed: bool = True, calls: int = 8) -> dict:
    """One GPU block's figures as _Block.run gives them (8 calls unless told)."""
    return {"confirmed": confirmed, "calls": calls, "block_ms": round((ms + copy) * calls, 6), "candidate_ms": ms,
            "eager_ms": eager, "copy_ms": copy, "device": "cuda"}


def test_a_microsecond_kernel_is_timed_on_a_block_long_enough():
    """On an H200 (2026-11-29) the 8-call block of an honest 5.5 us Triton kernel read 20.9 us a call: what a
    block pays once, spread over 0.2 ms of calls. The next blocks are long enough (MIN_BLOCK_MS), only they
    can agree, and the fastest decides; a kernel that is slow on the long blocks too is still disbelieved."""
    claim = _claim(0.0055, 2.0)
    short = _block(0.0209, copy=0.001, eager=0.011)
    assert clock.judge(claim, short)["reason"] == "timing_mismatch"  # the short block alone cries wolf
    calls = clock._longer(short, clock.CALLS)
    assert calls == 46 and clock._longer(_block(0.3), clock.CALLS) == clock.CALLS  # 2.4 ms: long enough
    assert clock._longer({**short, "block_ms": 1e-6}, clock.CALLS) == clock.MAX_CALLS
    blocks = [short, _block(0.0061, copy=0.001, eager=0.011, calls=calls)]
    assert not clock._agreed(blocks)  # one long block: no pair yet, however close the short one came
    blocks.append(_block(0.0058, copy=0.001, eager=0.011, calls=calls))
    assert clock._agreed(blocks) and clock.judge(claim, clock._fastest(blocks)) is None
    slow = [short, _block(0.030, copy=0.001, eager=0.011, calls=calls), _block(0.031, copy=0.001, eager=0.011, calls=calls)]
    assert clock._agreed(slow) and clock.judge(claim, clock._fastest(slow))["reason"] == "timing_mismatch"


def test_a_block_of_one_call_is_allowed_what_a_block_pays_once():
    """On an H200 (2026-11-29, the KernelBench sample) three honest kernels whose inputs filled the block's budget at
    one call a block read about 0.15 ms over their timed figure in it, as a block of 8 microsecond calls did, and
    were refused: the block's own excess has one call to spread over. Allowed now; a figure understated four times
    on a 1-call block of a longer kernel is still refused."""
    for claimed, speedup, seen, eager in ((0.2199, 36.6, 0.3777, 8.0580), (0.1300, 8.82, 0.2805, 1.1356),
                                          (0.1297, 3.2, 0.2788, 0.4114)):  # LayerNorm, NewGELU, CrossEntropy
        assert clock.judge(_claim(claimed, speedup), _block(seen, copy=0.15, eager=eager, calls=1)) is None
    assert clock.judge(_claim(0.2199, 36.6), _block(0.3777, copy=0.15, eager=8.058))["reason"] == "timing_mismatch"
    said = clock.judge(_claim(1.0 / 4, 8.0), _block(1.15, copy=0.3, eager=8.0, calls=1))
    assert said["reason"] == "timing_mismatch"


def test_a_block_lengthened_by_another_job_is_outvoted_by_two_that_agree():
    """On an H100 (2026-11-28, concurrency 8) one block of an honest softmax read 0.377 ms a call, 4.6 times
    the 0.08 its blocks read elsewhere, and the one-block rule refused it: other jobs' kernels share the device
    in time slices. Blocks are timed until two agree, and the fastest decides."""
    claim = _claim(0.0407, 1.47)  # row_softmax__nvrtc's timed figures
    blocks = [_block(0.377), _block(0.0805)]
    assert clock.judge(claim, blocks[0])["reason"] == "timing_mismatch"  # the lengthened block alone cries wolf
    assert not clock._agreed(blocks)
    blocks.append(_block(0.0800))
    assert clock._agreed(blocks)
    best = clock._fastest(blocks)
    assert best["candidate_ms"] == pytest.approx(0.08) and best["blocks_ms"] == [0.377, 0.0805, 0.08]
    assert clock.judge(claim, best) is None


def test_each_figure_is_the_fastest_seen_and_an_unconfirmed_block_decides_nothing():
    """The copies and the eager calls are blocks too, and lengthened alike: each its own fastest, so that a
    slow copy block cannot shorten the candidate's figure (it is subtracted) nor a slow eager one widen the bound."""
    forced = {**_block(0.02), "confirmed": False, "why": "the gate opened by itself"}
    best = clock._fastest([forced, _block(0.10, copy=0.05, eager=0.20), _block(0.12, copy=0.01, eager=0.06)])
    assert best["copy_ms"] == 0.01
    # the fastest block, 0.13 a call, less the fastest copy; not 0.10, the second block less its own slow copy
    assert best["candidate_ms"] == pytest.approx(0.12)
    assert best["eager_ms"] == pytest.approx(0.06)
    assert clock._fastest([forced])["why"] == "the gate opened by itself"


SPINNER = """
import sys, threading
def spin():
    while True:
        pass
for _ in range(int(sys.argv[1])):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()  # the main thread waits, as a worker waits for the checker's answer
"""


def _peer(spinners: int):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", SPINNER, str(spinners)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_the_checker_sees_a_thread_that_works_after_the_call_and_not_the_one_that_waits():
    """guards.watch_peer, from another process: a spinning thread is refused however loaded the machine (what it
    ran and waited for a CPU), a process whose main thread waits passes, and a stopped one is not judged."""
    import signal

    from kernelevo.judge.trials import guards

    busy, idle = _peer(1), _peer(0)
    try:
        with pytest.raises(guards.Rejected) as refused:
            guards.watch_peer(busy.pid, gate.threads_ns)
        assert refused.value.reason == "background_work" and refused.value.evidence["where"] == "checker"
        said = guards.watch_peer(idle.pid, gate.threads_ns)
        assert said["window_ms"] >= 200 and "why" not in said and said["threads"] == 1
        os.kill(busy.pid, signal.SIGSTOP)  # paused by another job's timing (measure/hold.py): no window to judge
        try:
            assert "paused" in guards.watch_peer(busy.pid, gate.threads_ns, most_s=0.3)["why"]
        finally:
            os.kill(busy.pid, signal.SIGCONT)
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()


def test_a_claim_of_another_type_is_left_to_the_result_and_never_raises():
    """The clock reads the worker's JSON before JobResult.of does: figures that are not positive finite numbers
    decide nothing here (JobResult.of makes a passing result whose figures do not read judge_error), and raise nothing."""
    seen = {**_seen(next(iter(RECORDED.values()))), "thread_ms": 50.0}
    for forged in ({"timing": [1]}, {"timing": {"candidate": "fast"}}, {"timing": {"candidate": {"median_ms": "1"}}},
                   {"timing": {"candidate": {"median_ms": 10 ** 400}}}, {"speedup_eager": "100x"},
                   {"timing": {"candidate": {"median_ms": float("nan")}}, "speedup_eager": True}):
        assert clock.judge({"verdict": "ok", **forged}, seen) is None, forged
    assert clock.judge(_claim(0.001, 1.0), seen)["reason"] == "timing_mismatch"  # the same clock, a number claimed
