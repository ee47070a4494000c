"""The core reserved for timing holds a worker's timing thread during its timed phases and nothing else: the
worker moves there for the phase only (what it starts outside one, a compiler say, stays on the build cores), and
the judging process with everything it starts keeps off it (issue 52: ptxas and the bench process ran there)."""
import os
import subprocess
import sys
import threading

import pytest
from kernelevo.judge.run import executor

needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin between")


def _two_cores() -> tuple[int, int]:
    cores = sorted(os.sched_getaffinity(0))
    return cores[0], cores[-1]


@needs_two_cores
def test_a_worker_times_on_the_reserved_core_and_starts_processes_off_it(monkeypatch):
    from kernelevo.judge.run.worker import Channel

    build, timing = _two_cores()
    monkeypatch.setenv("KERNELEVO_BUILD_CPUS", str(build))
    monkeypatch.setenv("KERNELEVO_TIMING_CPU", str(timing))
    read, write = os.pipe()
    channel = Channel(write, "cuda:0")  # a GPU worker: its quiet phase sends nothing
    seen = {}

    def worker_thread():  # pinning moves the calling thread: not the test's own
        os.sched_setaffinity(0, {build})
        with channel.quiet():
            seen["timed"] = os.sched_getaffinity(0)
        seen["after"] = os.sched_getaffinity(0)
        child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)
        seen["child"] = child.stdout.strip()

    thread = threading.Thread(target=worker_thread)
    thread.start()
    thread.join()
    os.close(read)
    assert seen["timed"] == {timing}
    assert seen["after"] == {build} and seen["child"] == str([build])


@needs_two_cores
def test_the_judging_process_and_what_it_starts_keep_off_the_timing_cores():
    build, timing = _two_cores()
    script = f"""
import os, subprocess, sys, threading, time
from kernelevo.judge.run import executor
stop = threading.Event()
helper = threading.Thread(target=stop.wait)
helper.start()
executor.keep_off_timing_cores({{"cuda:0": {{"KERNELEVO_BUILD_CPUS": "{build}", "KERNELEVO_TIMING_CPU": "{timing}"}}}})
threads = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, check=True).stdout.strip()
stop.set()
print(len(threads), all(t == [{build}] for t in threads), child)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) >= 2 and out[1] == "True" and out[2] == str([build])


def test_a_second_executor_reserves_the_same_cores_after_the_first_narrowed_the_process(monkeypatch):
    cores = [set(range(8))]
    monkeypatch.setattr(executor.os, "sched_getaffinity", lambda pid: cores[0])
    executor._machine_cores.cache_clear()
    try:
        first = executor.cpu_plan(["cuda:0", "cuda:1"])
        cores[0] = set(range(6))  # what keep_off_timing_cores leaves the process
        assert executor.cpu_plan(["cuda:0", "cuda:1"]) == first
        assert {p["KERNELEVO_TIMING_CPU"] for p in first.values()} == {"6", "7"}
        assert first["cuda:0"]["KERNELEVO_BUILD_CPUS"] == "0,1,2,3,4,5"
    finally:
        executor._machine_cores.cache_clear()
