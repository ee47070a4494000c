"""The whole judge on the CPU backend: worker processes, limits, verdicts, caches."""
import time

import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run import builds
from kernelevo.judge.run.executor import WorkerLimits
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES

CPU = FIXTURES / "cpu"
FAST = TimingConfig(min_reps=5, max_seconds=0.1, target_rel_ci=0.05)


# A generous run limit: with another process on one of 2 cores, a C candidate's OpenMP regions wait for a
# descheduled thread, and its checks took 30 times as long as on a quiet machine (7.6 s against 0.23 s).
# The hang alone is judged under a short one (HANG_LIMIT), by a judge of its own.
OPTIONS = dict(devices=("cpu",), compile_baseline=False, timing=FAST, concurrency=2)
HANG_LIMIT = 5  # the hang spins a core until killed: short, so as not to slow the other tests


@pytest.fixture(scope="module")
def judge(cache_dir):
    with Judge(cache_dir, JudgeOptions(**OPTIONS, limits=WorkerLimits(build=120, run=180))) as j:
        yield j


@pytest.fixture(scope="module")
def task():
    return load_task(CPU / "task_scale.py")


# candidate file -> (verdict, reason)
EXPECTED = {
    "ok_c.py": ("ok", ""),
    "compile_error_c.py": ("compile_error", "cc"),
    "python_syntax.py": ("compile_error", "python_syntax"),
    "wrong_math_c.py": ("incorrect", "value_mismatch"),
    "zeros.py": ("incorrect", "value_mismatch"),
    "wrong_shape.py": ("incorrect", "shape_mismatch"),
    "wrong_dtype.py": ("incorrect", "dtype_mismatch"),
    "segfault_c.py": ("runtime_error", "segfault"),
    "raises.py": ("runtime_error", "exception"),
    "exits.py": ("runtime_error", "exited"),
    "no_model_new.py": ("runtime_error", "missing_model_new"),
    "hang_c.py": ("timeout", "run_timeout"),
}


@pytest.fixture(scope="module")
def verdicts(judge, task, cache_dir):
    with Judge(cache_dir, JudgeOptions(**OPTIONS, limits=WorkerLimits(build=120, run=HANG_LIMIT))) as short:
        futures = {name: (short if name == "hang_c.py" else judge).submit(task, CPU / name) for name in EXPECTED}
        return {name: f.result(timeout=900) for name, f in futures.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict(verdicts, name):
    e = verdicts[name]
    assert (e.verdict, e.reason) == EXPECTED[name], (e.message, e.excerpt)
    assert e.message or e.verdict == "ok"


def test_ok_has_times_and_correctness(verdicts):
    e = verdicts["ok_c.py"]
    assert e.format == "c" and e.device == "cpu"
    # five fresh draws, redrawn weights, large values, the task's two extra shapes, and the shapes the
    # judge derives, each below and above: the 512 features with the constructor argument they are tied
    # to, a batch of 251 and 257
    assert e.correctness.trials == 5 + 1 + 1 + 2 + 4
    assert e.shapes.supported == ("float32[256, 512]", "float32[3, 512]", "float32[1000, 512]",
                                  "float32[256, 509] with Model(features=509)",
                                  "float32[256, 521] with Model(features=521)", "float32[251, 512]",
                                  "float32[257, 512]")
    assert e.correctness.rel_l2 < 1e-6
    assert e.candidate.median_ms > 0 and e.eager.median_ms > 0
    # The speedup is the paired median of per-round ratios (its direction: test_timing's synthetic rounds).
    # Not compared with the ratio of the medians: with a core busy they came out 0.64 against 0.11.
    low, high = e.speedup_eager_ci  # its width on a busy CI machine says little
    assert 0 < low <= e.speedup_eager <= high
    assert any("copied all 2 reference weights" in n for n in e.notes)
    # the checker's clock timed a block of its calls; on the CPU it confirms only where the calling thread ran
    # alone (this kernel is OpenMP), and says why not otherwise
    clock = e.evidence["clock"]
    assert clock["calls"] >= 1 and clock["device"] == "cpu" and (clock["confirmed"] or clock["why"]), clock
    assert clock["confirmed"] or any(n.startswith("times not confirmed by the checker's clock") for n in e.notes)
    # the outputs of its last timed calls (one per input set) and of its last fresh-values call, compared again
    # in the checker
    assert e.evidence["checker"]["timed_outputs"] == JudgeOptions().input_sets + 1, e.evidence["checker"]


def test_failures_explain_themselves(verdicts):
    assert "candidate.c:8:13: error: expected ',' or ';'" in verdicts["compile_error_c.py"].excerpt
    assert "SIGSEGV" in verdicts["segfault_c.py"].message
    assert "candidate gave up" in verdicts["raises.py"].message
    mismatch = verdicts["wrong_math_c.py"]
    assert "relative L2 error" in mismatch.message and mismatch.correctness.max_abs > 0


def test_three_evaluations_of_one_kernel_carry_their_intervals(judge, task):
    """The same kernel judged three times, one after another: each speedup carries a 95 % interval around
    it. (Whether the three overlap is the machine's repeatability, measured by benchmarks/timing_spread.py
    and cpu_timing_noise.py: another process busy on a 2-core machine moves a CPU figure beyond its own
    interval.)"""
    found = [judge.evaluate(task, CPU / "ok_c.py") for _ in range(3)]
    assert all(e.ok and e.speedup_eager_ci for e in found), [e.message for e in found]
    assert all(e.speedup_eager_ci[0] <= e.speedup_eager <= e.speedup_eager_ci[1] for e in found), \
        [(e.speedup_eager, e.speedup_eager_ci) for e in found]
    assert all(e.speedup_eager_ci[0] < e.speedup_eager_ci[1] for e in found)


def test_hang_is_killed_at_its_limit(verdicts):
    """Killed for running past its limit (HANG_LIMIT), and not before it. (How soon after it is the machine's
    load: no clock bound is asserted.)"""
    e = verdicts["hang_c.py"]
    assert f"no verdict within {HANG_LIMIT} s of run" in e.message and "killed" in e.message, e.message
    assert e.wall_s >= HANG_LIMIT, e.wall_s


def test_unwritten_row_caught_on_other_shapes(judge, task):
    e = judge.evaluate(task, CPU / "skips_rows_c.py")
    # The row it skips holds whatever malloc returns: the judge's NaN fill (seen from the first trial
    # on, since the fill now precedes every call), or other stale values on the extra shapes.
    assert (e.verdict, e.reason) in {("rejected", "uninitialized_output"), ("incorrect", "value_mismatch")}


def test_crash_does_not_poison_the_next_candidate(judge, task):
    crashed = judge.evaluate(task, CPU / "segfault_c.py")
    after = judge.evaluate(task, CPU / "ok_c.py")
    assert crashed.verdict == "runtime_error" and after.verdict == "ok"


def test_near_constant_output_rejected(judge):
    offset = load_task(CPU / "task_offset.py")
    assert judge.evaluate(offset, CPU / "constant.py").reason == "near_constant"
    assert judge.evaluate(offset, CPU / "offset_ok_c.py").verdict == "ok"


@pytest.mark.slow
def test_inline_cpp_extension_counts_as_own_kernel(judge, task):
    """A load_inline C++ loop is the candidate's own code: torch imports what it builds without
    entering it in sys.modules, where the policy once looked for it and said no_own_kernel."""
    e = judge.evaluate(task, CPU / "ok_inline_cpu.py")
    assert (e.format, e.verdict) == ("inline", "ok"), (e.reason, e.message, e.evidence)
    assert e.evidence["policy"]["own_kernels"] == ["ok_inline_cpu_scale_relu.scale_relu"]
    assert e.evidence["policy"]["torch_compute"] == []  # its empty_like is glue


def test_build_cached_by_source_hash(judge, task, cache_dir):
    judge.evaluate(task, CPU / "ok_c.py")
    own = builds.folder(cache_dir, (CPU / "ok_c.py").read_text()) / "c"  # the candidate's own build folder
    built = {p: p.stat().st_mtime_ns for p in own.glob("*.so")}
    again = judge.evaluate(task, CPU / "ok_c.py")
    assert again.ok and built  # the same source: the library is loaded again, not built again
    assert {p: p.stat().st_mtime_ns for p in own.glob("*.so")} == built
    assert not any("rebuilt" in note for note in again.notes), again.notes


def test_a_kept_build_that_is_not_what_was_built_is_built_again(judge, task, cache_dir):
    """A library in a candidate's build folder that is not the one its record names (rewritten since) is
    not loaded: it is built again, and the verdict says so."""
    source = (CPU / "ok_c.py").read_text()
    assert judge.evaluate(task, CPU / "ok_c.py").ok
    for library in (builds.folder(cache_dir, source) / "c").glob("*.so"):
        library.write_bytes(library.read_bytes() + b"\0")
    again = judge.evaluate(task, CPU / "ok_c.py")
    assert again.ok and any("cache entry did not match its source" in note for note in again.notes), again.notes


def test_workers_build_in_parallel(cache_dir, task, tmp_path):
    """Two slow imports overlap: the pool runs builds concurrently, only timing is exclusive. Seen as two
    workers alive at once while both builds sleep (no clock compared: another process may be busy)."""
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(4)\n" + (CPU / "ok_c.py").read_text())
    options = JudgeOptions(devices=("cpu",), compile_baseline=False, timing=FAST, trials=1,
                           concurrency=2)
    busy = []
    with Judge(cache_dir, options) as judge:
        futures = [judge.submit(task, slow) for _ in range(2)]
        while not all(f.done() for f in futures):
            busy.append(len(judge.executor._busy))
            time.sleep(0.05)
        results = [f.result(timeout=120) for f in futures]
    assert [r.verdict for r in results] == ["ok", "ok"]
    assert all(r.build_s >= 4 for r in results)
    assert max(busy) == 2


def test_compile_baseline_cached(cache_dir, task):
    options = JudgeOptions(devices=("cpu",), compile_baseline=True, timing=FAST, trials=1, bounds="off")
    with Judge(cache_dir, options) as judge:
        first = judge.evaluate(task, CPU / "ok_c.py")
    assert first.speedup_compile is not None and first.compiled is not None
    cached = [p for p in (cache_dir / "baselines").glob("*.json") if not p.name.endswith("-eager.json")]
    assert len(cached) == 1  # eager-only baselines (task kind, eager time) are kept apart
    with Judge(cache_dir, options) as judge:
        second = judge.evaluate(task, CPU / "ok_c.py")
    assert second.speedup_compile is not None
    assert any("torch.compile measured" in n for n in second.notes)
    # the final judgement on the CPU times torch.compile beside the candidate, in a fresh process
    with Judge(cache_dir, options) as judge:
        final = judge.evaluate(task, CPU / "ok_c.py", final=True)
    assert final.ok and any("timed beside the candidate" in n for n in final.notes)
    assert not any("rescaled" in n for n in final.notes)
    assert final.compiled.median_ms > 0 and final.compiled != second.compiled  # its own samples
    assert final.speedup_compile != second.speedup_compile


def test_two_judges_measuring_one_baseline_at_once_take_no_honest_kernel_for_a_tamperer(judge, cache_dir, tmp_path):
    """Two runs sharing a cache may measure a task's baseline at the same time. The file is written
    once, never replaced: had the second run's write replaced the first's, the first would have seen
    its baseline change under a candidate (audit_files) and rejected an honest kernel as tampering."""
    fresh = tmp_path / "task_scale.py"  # a source of its own: no baseline of it is cached yet
    fresh.write_text((CPU / "task_scale.py").read_text() + "# measured by two judges at once\n")
    task = load_task(fresh)
    with Judge(cache_dir, JudgeOptions(**{**OPTIONS, "concurrency": 1}, trials=1)) as second:
        second.executor.device_info("cpu")  # started, so that both ask before either has measured
        measured = [f.result(timeout=300) for f in [j.prefetch_baseline(task, "cpu") for j in (judge, second)]]
        judged = [j.evaluate(task, CPU / "ok_c.py") for j in (judge, second)]
    assert [m.verdict for m in measured] == ["ok", "ok"] and measured[0] != measured[1]  # measured twice
    assert [(e.verdict, e.reason) for e in judged] == [("ok", ""), ("ok", "")], [e.message for e in judged]
    assert not list((cache_dir / "baselines").glob(".*"))  # no partial file left behind


def test_a_judging_process_slow_to_note_the_go_takes_no_honest_worker_for_a_forger(judge, task, monkeypatch):
    """A worker may claim no more device time than the judging process saw pass (executor.audit). On a
    loaded machine that process was once descheduled for 64 ms right after sending `go`, and an honest
    result was rejected as forged_report: its clock must start before `go` is sent."""
    from kernelevo.judge.run.executor import Worker

    send = Worker.send

    def slow_after_go(self, message):
        send(self, message)
        if isinstance(message, dict) and message.get("go"):
            time.sleep(3)  # the worker runs its trials and timing meanwhile

    monkeypatch.setattr(Worker, "send", slow_after_go)
    e = judge.evaluate(task, CPU / "ok_c.py")
    assert (e.verdict, e.reason) == ("ok", ""), e.message


def test_a_zygote_that_died_is_started_again(cache_dir, task):
    """Workers are forked from a process that imported torch once (judge/run/zygote.py). If it dies
    between jobs (the OOM killer, a kill), the next job's worker comes from a new one."""
    import os

    with Judge(cache_dir, JudgeOptions(**{**OPTIONS, "concurrency": 1}, trials=1)) as judge:
        first = judge.evaluate(task, CPU / "ok_c.py")
        zygote = judge.executor.pools["cpu"].zygote._proc
        os.kill(zygote.pid, 9)
        zygote.wait()
        second = judge.evaluate(task, CPU / "ok_c.py")
        assert judge.executor.pools["cpu"].zygote._proc.pid != zygote.pid
    assert (first.verdict, second.verdict) == ("ok", "ok"), second.message


ORPHAN = r'''
import os, signal, sys, time
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.tasks import load_task
judge = Judge(sys.argv[1], JudgeOptions(devices=("cpu",), compile_baseline=False))
judge.submit(load_task(sys.argv[2]), sys.argv[3])
while not judge.executor._busy:
    time.sleep(0.1)
pid = next(iter(judge.executor._busy)).proc.pid
time.sleep(2)
print(pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''


def test_worker_dies_with_a_killed_parent(cache_dir):
    """kill -9 of the judging process leaves no candidate spinning behind it."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", ORPHAN, str(cache_dir), str(CPU / "task_scale.py"),
                          str(CPU / "hang_c.py")], capture_output=True, text=True, timeout=120)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pid, 9)
    raise AssertionError("the worker outlived its parent")


def test_the_checker_falls_back_to_a_file_when_its_device_memory_cannot_hold_the_timed_outputs():
    """A task whose outputs do not fit beside the checker's reference on the device: its verdict stands, the
    outputs come through a file on the host (the worker's path on the CPU), and the notes say so."""
    import torch

    from kernelevo.judge.run import check

    class Full:
        def timed_room(self):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    result = {"verdict": "ok", "checks": ["shapes: 7 checked"]}
    assert check._room(Full(), result) is None
    assert result["verdict"] == "ok" and result["checks"][0] == "shapes: 7 checked"
    assert result["checks"][1].startswith("the timed outputs came through a file on the host") \
        and "OutOfMemoryError" in result["checks"][1]


def test_refusals_a_neighbour_can_decide_are_judged_again_alone():
    """Running out of memory and the host clock's escaped work can be the other jobs' doing on a shared device
    (issue 52's rounds refused GEMM tune variants for escaped work beside their siblings; one passed alone), so
    the executor judges those again with the device to itself; a wrong value cannot be a neighbour's."""
    from kernelevo.judge.run.room import decided_by_neighbours

    assert "memory" in decided_by_neighbours({"verdict": "runtime_error", "reason": "out_of_memory"})
    assert "host clock" in decided_by_neighbours({"verdict": "rejected", "reason": "escaped_work"})
    for result in ({"verdict": "ok", "reason": ""}, {"verdict": "incorrect", "reason": "value_range"},
                   {"verdict": "rejected", "reason": "cached_result"}, {"verdict": "runtime_error", "reason": "exception"}):
        assert decided_by_neighbours(result) is None, result


def test_a_candidates_own_failed_allocation_is_out_of_memory():
    """A candidate that allocates through cuda-python reports a full device in CUDA's words, not torch's. Classed
    as out_of_memory, it is judged again with the device to itself (judge/run/room.py) instead of refused beside
    its neighbours: issue 52's 17_Conv2d mutation lost its reply to a 'runtime_error: exception' this way."""
    from kernelevo.judge.verdicts import classify_run

    for text in ("cudaMalloc failed: <cudaError_t.cudaErrorMemoryAllocation: 2>",
                 "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", "CUDA out of memory. Tried to allocate 2.00 GiB"):
        assert classify_run(RuntimeError(text)).reason == "out_of_memory", text
    assert classify_run(RuntimeError("cudaMalloc failed: cudaErrorInvalidValue")).reason == "exception"


def test_a_result_the_judge_cannot_read_is_its_own_error_not_a_crash(judge, task, monkeypatch):
    """Whatever fails in the judging process after the worker answered (a report the records could not catch, our
    bug) comes back as a verdict that says so, runtime_error judge_error: the search goes on, nothing is lost."""
    from kernelevo.judge import api

    def unreadable(*args, **kwargs):
        raise KeyError("ms")

    monkeypatch.setattr(api, "to_evaluation", unreadable)
    found = judge.evaluate(task, CPU / "ok_c.py")
    assert (found.verdict, found.reason) == ("runtime_error", "judge_error") and not found.ok
    assert "the judge failed on this job: KeyError" in found.message and found.task == task.name


def test_a_zygote_whose_close_is_interrupted_is_killed_and_the_rest_closed(tmp_path, monkeypatch):
    """Ctrl-C while the judging process exits cut close()'s wait for the zygote short: it was left running, and the
    atexit hook printed a KeyboardInterrupt traceback (a timed-out `assemble`, H200, 2026-11-30)."""
    import subprocess
    import sys

    from kernelevo.judge.run import zygote

    made = []
    for seconds in (60, 0.2):  # the first's wait is cut short; the second ends by itself, as a zygote told to does
        one = zygote.Zygote("cpu", tmp_path, {}, 10.0)
        one._proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
        made.append(one)

    def interrupted(timeout=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(made[0]._proc, "wait", interrupted)
    monkeypatch.setattr(zygote, "_kept", {f"k{i}": z for i, z in enumerate(made)})
    zygote._close_kept()  # raises nothing
    for one in made:
        assert subprocess.Popen.wait(one._proc, timeout=10) is not None  # ended, none left behind
    assert made[0]._proc.returncode == -9  # killed
    assert zygote._kept == {}


def test_a_workers_exit_is_seen_by_every_thread_that_waits_for_it(tmp_path):
    """Ctrl-C during a job: the thread that cancels it and the one that drives it both wait for its worker. The
    first took the exit status and the second sat out its whole timeout, 10 s each time (an interrupted modes job
    ended 13 to 34 s after Ctrl-C, CPU, 2026-12-02; an `assemble` under `timeout -s INT` was killed 30 s later)."""
    import json
    import socket
    import threading

    from kernelevo.judge.run import zygote

    one = zygote.Zygote("cpu", tmp_path, {}, 10.0)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    one._gone = False  # as _start leaves it: the listener below is its zygote's end
    listener = threading.Thread(target=one._listen, args=(ours,), daemon=True)
    listener.start()
    theirs.send(json.dumps({"forked": 4242}).encode())
    assert one._reply(10) == 4242
    seen: list[int | None] = []
    waiters = [threading.Thread(target=lambda: seen.append(one.exit_status(4242, 30))) for _ in range(2)]
    for w in waiters:
        w.start()
    theirs.send(json.dumps({"exited": 4242, "code": -9}).encode())
    for w in waiters:
        w.join(timeout=20)
    assert seen == [-9, -9]  # both at once: a waiter left out would still be waiting (30 s)
    assert one.exit_status(4242, 0) == -9  # and any later one
    theirs.send(json.dumps({"forked": 4242}).encode())  # the pid used again: the old status is not the new worker's
    assert one._reply(10) == 4242 and one.exit_status(4242, 0.1) is None
    theirs.close()
    listener.join(timeout=10)
