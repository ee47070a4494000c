"""A candidate that runs out of device memory beside other jobs is judged again with the device to itself; only
one that runs out alone is refused for it (judge/run/room.py). Run on the GPU machine: pytest -m gpu."""

import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES

pytestmark = pytest.mark.gpu
CUDA = FIXTURES / "cuda"


def test_two_jobs_that_do_not_fit_on_the_device_together_are_both_judged_ok(cache_dir, tmp_path):
    """Each keeps 55 % of the GPU's memory while its process lives; submitted together, the second to import runs
    out of memory while the first still holds its share. It is judged again alone, and passes."""
    paths = []
    for i in range(2):  # two files: a copy of one would be the same job
        path = tmp_path / f"workspace_{i}.py"
        path.write_text(f"# copy {i}\n" + (CUDA / "workspace_nvrtc.py").read_text())
        paths.append(path)
    options = JudgeOptions(devices=("cuda:0",), compile_baseline=False, timing=TimingConfig(max_seconds=0.3),
                           concurrency=4)
    task = load_task(CUDA / "task_relu.py")
    with Judge(cache_dir, options) as judge:
        results = [f.result(timeout=600) for f in [judge.submit(task, p) for p in paths]]
        # the task is known now to need the device alone: a later job of it is judged so at once, not twice
        third = tmp_path / "workspace_2.py"
        third.write_text("# copy 2\n" + (CUDA / "workspace_nvrtc.py").read_text())
        later = judge.submit(task, third).result(timeout=600)
    assert [(e.verdict, e.reason) for e in results] == [("ok", ""), ("ok", "")], [e.message for e in results]
    again = [e for e in results if any("judged again with the device to itself" in n for n in e.notes)]
    assert len(again) >= 1, [e.notes for e in results]
    assert (later.verdict, later.reason) == ("ok", ""), later.message
    assert any("this task's jobs ran out of device memory beside other jobs before" in n for n in later.notes), later.notes
