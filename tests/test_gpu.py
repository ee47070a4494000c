"""Every verdict path on a real GPU. Run on the GPU machine: pytest -m gpu."""
import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run.executor import WorkerLimits
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES

pytestmark = pytest.mark.gpu
CUDA = FIXTURES / "cuda"

EXPECTED = {
    "ok_nvrtc.py": ("ok", ""),
    "ok_inline.py": ("ok", ""),
    "compile_error_nvrtc.py": ("compile_error", "nvrtc"),
    "illegal_address_nvrtc.py": ("runtime_error", "illegal_memory_access"),
    "bad_launch_nvrtc.py": ("runtime_error", "invalid_launch_configuration"),
    "oom.py": ("runtime_error", "out_of_memory"),
    "unwritten_nvrtc.py": ("rejected", "uninitialized_output"),
    "hang_nvrtc.py": ("timeout", "run_timeout"),
}


@pytest.fixture(scope="module")
def judged(cache_dir):
    options = JudgeOptions(devices=("cuda:0",), compile_baseline=True, limits=WorkerLimits(run=30),
                           timing=TimingConfig(max_seconds=0.5), concurrency=8)
    task = load_task(CUDA / "task_relu.py")
    with Judge(cache_dir, options) as judge:
        futures = {name: judge.submit(task, CUDA / name) for name in EXPECTED}
        results = {name: f.result(timeout=600) for name, f in futures.items()}
        results["after_crash"] = judge.evaluate(task, CUDA / "ok_nvrtc.py")
    return results


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpu_verdict(judged, name):
    e = judged[name]
    assert (e.verdict, e.reason) == EXPECTED[name], (e.message, e.excerpt)


def test_gpu_ok_is_faster_than_eager_and_named(judged):
    e = judged["ok_nvrtc.py"]
    assert e.device_name.startswith("NVIDIA")
    assert e.speedup_eager > 1.2  # one fused pass instead of two over 32 MiB
    assert e.speedup_compile is not None
    assert e.candidate.rel_ci < 0.02


def test_gpu_next_candidate_unaffected_by_crashes(judged):
    assert judged["after_crash"].verdict == "ok"


def test_gpu_formats_agree(judged):
    nvrtc, inline = judged["ok_nvrtc.py"], judged["ok_inline.py"]
    assert nvrtc.format == "nvrtc" and inline.format == "inline"
    assert abs(nvrtc.candidate.median_ms / inline.candidate.median_ms - 1) < 0.1
