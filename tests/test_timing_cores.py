"""The core reserved for timing holds a worker's timing thread during its timed phases and nothing else: the
worker moves there for the phase only (what it starts outside one, a compiler say, stays on the build cores), and
the judging process with everything it starts keeps off it (issue 52: ptxas and the bench process ran there)."""
import os
import subprocess
import sys
import threading

import pytest
from kernelevo.judge.run import cores

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
from kernelevo.judge.run import cores
stop = threading.Event()
helper = threading.Thread(target=stop.wait, daemon=True)
helper.start()
cores.keep_off_timing_cores({{"cuda:0": {{"KERNELEVO_BUILD_CPUS": "{build}", "KERNELEVO_TIMING_CPU": "{timing}"}}}})
threads = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, check=True).stdout.strip()
stop.set()
print(len(threads), all(t == [{build}] for t in threads), child)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    assert int(out[0]) >= 2 and out[1] == "True" and out[2] == str([build])


@pytest.fixture
def eight_cores_two_gpus(monkeypatch):
    """A machine of 8 cores and 2 GPUs, as the plan sees it; `machine[0]` is what sched_getaffinity answers."""
    machine = [set(range(8))]
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: machine[0])
    monkeypatch.setattr(cores, "_visible_gpus", lambda: 2)
    cores._machine_cores.cache_clear()
    yield machine
    cores._machine_cores.cache_clear()


def test_a_second_executor_reserves_the_same_cores_after_the_first_narrowed_the_process(eight_cores_two_gpus):
    first = cores.plan(["cuda:0", "cuda:1"])
    eight_cores_two_gpus[0] = set(range(6))  # what keep_off_timing_cores leaves the process
    assert cores.plan(["cuda:0", "cuda:1"]) == first
    assert (first["cuda:0"]["KERNELEVO_TIMING_CPU"], first["cuda:1"]["KERNELEVO_TIMING_CPU"]) == ("7", "6")
    assert first["cuda:0"]["KERNELEVO_BUILD_CPUS"] == "0,1,2,3,4,5"


def test_each_gpu_times_on_its_own_core_when_each_has_an_executor_of_its_own(eight_cores_two_gpus):
    """A bench judges each task with an executor of its one device: the two GPUs' timing workers were put on one
    core (issue 52), and the builds of one executor ran on the other GPU's."""
    alone = {d: cores.plan([d])[d] for d in ("cuda:0", "cuda:1")}
    assert alone["cuda:0"]["KERNELEVO_TIMING_CPU"] != alone["cuda:1"]["KERNELEVO_TIMING_CPU"]
    assert alone == cores.plan(["cuda:0", "cuda:1"])
    timing = {p["KERNELEVO_TIMING_CPU"] for p in alone.values()}
    assert all(not timing & set(p["KERNELEVO_BUILD_CPUS"].split(",")) for p in alone.values())


def test_too_few_cores_pin_nothing(eight_cores_two_gpus):
    eight_cores_two_gpus[0] = set(range(5))  # 2 GPUs need 2 timing cores and at least 2 to build on, and 2 spare
    assert cores.plan(["cuda:1"]) == {} and cores.plan(["cpu"]) == {}
