"""Each function as a model's CUDA graph replays it (judge/measure/graphs.py), and a final's figures in a
graph beside torch.compile's, on a real GPU. Run on the GPU machine: pytest -m gpu."""
import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.measure import graphs
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
FAST = TimingConfig(max_seconds=0.3)
RATIOS = (("many", "one"),)


def _sets() -> list[list]:
    return [[torch.randn(256, 512, device="cuda")] for _ in range(3)]


def _weights():
    return torch.randn(512, 512, device="cuda") / 512 ** 0.5


def test_honest_functions_are_replayed_and_timed_with_a_paired_ratio():
    w = _weights()

    def many(a):  # several launches where one would do: events see the gaps, a graph does not
        y = a[0] @ w
        for _ in range(6):
            y = y * 1.0001
        return y.relu()

    out = graphs.figures({"many": many, "one": lambda a: (a[0] @ w).relu()}, _sets(), "cuda:0", FAST, RATIOS)
    assert "why" not in out, out
    assert set(out["ms"]) == {"many", "one"} and all(ms > 0 for ms in out["ms"].values())
    point, low, high = out["many/one"]
    assert low <= point <= high


def test_a_function_whose_capture_records_no_work_has_no_figure():
    w = _weights()

    class Kept:  # under capture it returns the warm-up's answer and launches nothing: a replay is free
        last = None

        def __call__(self, a):
            if torch.cuda.is_current_stream_capturing() and self.last is not None:
                return self.last
            self.last = (a[0] @ w).relu()
            return self.last

    out = graphs.figures({"many": Kept(), "one": lambda a: (a[0] @ w).relu()}, _sets(), "cuda:0", FAST, RATIOS)
    assert out["why"].startswith("many: ") and "did not record all of its work" in out["why"], out


def test_a_function_that_waits_for_the_device_cannot_be_captured_and_says_so():
    def synced(a):
        return a[0] * float(a[0].abs().max().item())  # a host sync: not allowed while capturing

    out = graphs.figures({"many": synced, "one": lambda a: a[0] * 2}, _sets(), "cuda:0", FAST, RATIOS)
    assert out["why"].startswith("many: cannot be captured in a CUDA graph"), out


def test_a_final_on_a_gpu_is_measured_in_a_cuda_graph_beside_torch_compile(cache_dir):
    task = load_task(FIXTURES / "cpu" / "task_scale.py")
    options = JudgeOptions(devices=("cuda:0",), timing=FAST, bounds="off")
    with Judge(cache_dir, options) as judge:
        e = judge.evaluate(task, FIXTURES / "triton" / "ok_triton.py", final=True)
    assert e.ok, (e.reason, e.message)
    assert e.graph is not None and not e.graph.why, e.graph
    assert e.graph.candidate_ms > 0 and e.graph.compiled_ms > 0 and e.graph.speedup_compile is not None
    low, high = e.graph.speedup_compile_ci
    assert low <= e.graph.speedup_compile <= high
    assert any("torch.compile timed beside the candidate" in n for n in e.notes), e.notes
