"""Candidates submitted without a device are spread over the judge's devices by its executor (on
the CPU backend: "cpu" and "cpu:1" are two devices to the executor, one CPU to their workers)."""
import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run.executor import WorkerLimits, LocalExecutor, least_busy
from kernelevo.judge.job import Job
from kernelevo.judge.trials.probe import IMPLAUSIBLE_SPEEDUP
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES

CPU = FIXTURES / "cpu"
FAST = TimingConfig(min_reps=10, max_seconds=0.3, target_rel_ci=0.02)


def test_least_busy_takes_the_device_with_fewest_jobs_then_the_one_chosen_longest_ago():
    assert least_busy({"cuda:0": 3, "cuda:1": 1}, {"cuda:0": 1, "cuda:1": 2}) == "cuda:1"
    assert least_busy({"cuda:0": 2, "cuda:1": 2}, {"cuda:0": 5, "cuda:1": 4}) == "cuda:1"
    assert least_busy({"cuda:0": 0, "cuda:1": 0}, {}) == "cuda:0"


def test_choose_device_follows_the_outstanding_counts(tmp_path):
    executor = LocalExecutor(["cpu", "cpu:1"], tmp_path)  # no spares: no worker starts
    try:
        assert [executor.choose_device() for _ in range(4)] == ["cpu", "cpu:1", "cpu", "cpu:1"]
        executor.outstanding["cpu:1"] = 2  # a device held up by slow builds gets the next ones elsewhere
        assert [executor.choose_device() for _ in range(2)] == ["cpu", "cpu"]
        with pytest.raises(ValueError, match="not one of this executor's"):
            executor.submit(Job(), "cuda:3")
    finally:
        executor.close()


def test_judge_submit_without_a_device_spreads_over_both(tmp_path):
    # One candidate passes (so a baseline is measured on the device it landed on), the others stop
    # at the syntax check; no timing runs on both "devices" at once, as it would on one real CPU. No
    # re-measurement: what is tested is where jobs go, not the two CPU clocks' agreement under load.
    options = JudgeOptions(devices=("cpu", "cpu:1"), compile_baseline=False, timing=FAST, trials=1,
                           limits=WorkerLimits(build=120, run=60), concurrency=2,
                           implausible=dict.fromkeys(IMPLAUSIBLE_SPEEDUP, 1e9))
    task = load_task(CPU / "task_scale.py")
    names = ["python_syntax.py", "ok_c.py", "python_syntax.py", "python_syntax.py"]
    with Judge(tmp_path, options) as judge:
        futures = [judge.submit(task, CPU / name) for name in names]
        results = [f.result(timeout=300) for f in futures]
        left = dict(judge.executor.outstanding)
    assert [r.device for r in results] == ["cpu", "cpu:1", "cpu", "cpu:1"]
    assert [r.verdict for r in results] == ["compile_error", "ok", "compile_error", "compile_error"], \
        [(r.message, r.excerpt) for r in results]
    assert results[1].speedup_eager > 0 and results[1].eager.median_ms > 0
    assert left == {"cpu": 0, "cpu:1": 0}  # every job, baseline included, counted out again
