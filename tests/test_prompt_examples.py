"""The example kernel in each candidate-format prompt must itself be a correct candidate: models
copy its shape. Judged on the CPU in CI (C, and Triton in its interpreter); on a GPU the CUDA and
Triton examples are judged too."""
import re

import pytest
from kernelevo import runtime
from kernelevo.agent.prompting import template_text
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run.executor import WorkerLimits
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES

TASK = FIXTURES / "cuda" / "task_relu.py"  # relu(x * scale): what the examples compute
FAST = TimingConfig(min_reps=10, max_seconds=0.3, target_rel_ci=0.05)


def example(fmt: str) -> str:
    (code,) = re.findall(r"```python\n(.*?)```", template_text(f"format_{fmt}.md"), re.S)
    return code


def judge_example(fmt: str, device: str, tmp_path, task=TASK):
    path = tmp_path / f"example_{fmt}.py"
    path.write_text(example(fmt))
    # two random draws besides the judge's derived shapes, redrawn weights and large values: the
    # task is GPU-sized (32 MiB), and more draws add nothing to "is this example a correct kernel"
    options = JudgeOptions(devices=(device,), compile_baseline=False, timing=FAST, trials=2,
                           limits=WorkerLimits(build=600, run=60))
    with Judge(tmp_path / "cache", options) as judge:
        return judge.evaluate(load_task(task), path)


def smaller_task(folder):
    """The task with a CPU-sized tensor (the judge derives its other shapes from it all the same)."""
    small = folder / "task_relu.py"
    small.write_text(TASK.read_text().replace("torch.randn(2048, 4096)", "torch.randn(256, 1000)"))
    return small


def test_c_example_is_an_ok_candidate(tmp_path):
    e = judge_example("c", "cpu", tmp_path, smaller_task(tmp_path))  # 32 MiB on a 2-core CPU is slow, not more right
    assert e.ok, (e.verdict, e.reason, e.message)


def test_triton_example_is_an_ok_candidate_in_the_interpreter(tmp_path):
    small = smaller_task(tmp_path)  # the interpreter runs each program of the grid in turn: a smaller tensor
    e = judge_example("triton", "cpu", tmp_path, small)
    assert e.ok and e.format == "triton", (e.verdict, e.reason, e.message)
    assert e.speedup_eager is None and any(n.startswith("not timed: Triton") for n in e.notes), e.notes


def test_nvrtc_example_compiles_without_a_gpu():
    source = re.search(r'CUDA_SRC = r"""(.*?)"""', example("nvrtc"), re.S).group(1)
    cubin, _ = runtime.compile_cubin(source, "sm_80")
    assert cubin


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["nvrtc", "inline", "triton"])
def test_cuda_examples_are_ok_candidates(fmt, tmp_path):
    e = judge_example(fmt, "cuda:0", tmp_path)
    assert e.ok, (e.verdict, e.reason, e.message)
