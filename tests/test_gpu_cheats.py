"""The judge against the GPU-only exploits, and the starter suite through every check, on a real
GPU. Run on the GPU machine: pytest -m gpu."""
import re

import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run.executor import Limits
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import FIXTURES, ROOT

pytestmark = pytest.mark.gpu
CHEATS = FIXTURES / "cheats" / "cuda"
SUITE = ROOT / "benchmarks" / "tasks"
STARTERS = sorted(p for p in (SUITE / "candidates").glob("*.py") if not p.stem.endswith(("__c", "_cpp_inline")))
JOINED = FIXTURES / "cuda" / "side_stream_joined_nvrtc.py"  # honest: a side stream joined back
GRAPHED = FIXTURES / "honest" / "static" / "input_cache__cuda_graph.py"  # honest: CUDA graphs keyed by placement
OPTIONS = dict(devices=("cuda:0",), compile_baseline=False, limits=Limits(run=60),
               timing=TimingConfig(max_seconds=0.5), concurrency=8)


def expected(path) -> tuple[str, str]:
    return tuple(re.search(r"^# expect: (\w+) (\w+)$", path.read_text(), re.M).groups())


@pytest.fixture(scope="module")
def judged(cache_dir):
    relu = load_task(FIXTURES / "cuda" / "task_relu.py")
    with Judge(cache_dir, JudgeOptions(**OPTIONS)) as judge:
        futures = {p.name: judge.submit(relu, p) for p in sorted(CHEATS.glob("*.py"))}
        futures.update({p.name: judge.submit(load_task(SUITE / f"{p.stem.split('__')[0]}.py"), p)
                        for p in STARTERS})
        futures[JOINED.name] = judge.submit(relu, JOINED)
        futures[GRAPHED.name] = judge.submit(relu, GRAPHED)
        return {name: f.result(timeout=900) for name, f in futures.items()}


@pytest.mark.parametrize("name", sorted(p.name for p in CHEATS.glob("*.py")))
def test_gpu_cheat_rejected_with_its_reason(judged, name):
    e = judged[name]
    assert (e.verdict, e.reason) == expected(CHEATS / name), (e.message, e.evidence)
    assert e.speedup_eager is None


def test_side_stream_evidence_is_event_against_wall_time(judged):
    clock = judged["escaped_work__side_stream.py"].evidence
    assert clock["wall_ms"] > clock["event_ms"] + clock["escaped_ms"] * 0.9 > 0


def test_joined_side_stream_with_host_overhead_passes(judged):
    """Fresh-value calls are compared with control calls measured alike, not with the timed calls:
    against those (device time only) the lone calls of a candidate like this one, host launch
    included, once looked seven times slower, and it was rejected as cached_result."""
    e = judged[JOINED.name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    # The case it stands for: more host time per call than device time (else it tests nothing).
    assert e.candidate.host_ms > e.candidate.median_ms, e.candidate
    fresh = e.evidence["fresh_values"]
    assert fresh["control_ms"] > 0 and fresh["fresh_values_ms"] > 0


def test_placement_keyed_cuda_graph_passes(judged):
    """A graph captured once per input placement (looked up by data_ptr) and replayed every call
    recomputes from the current values and returns a fresh copy: honest, and once refused statically
    as input_cache. The same graph returning its static buffer is output_reused (cheats/cuda)."""
    e = judged[GRAPHED.name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)


@pytest.mark.parametrize("name", [p.name for p in STARTERS])
def test_honest_starter_candidates_pass_every_check(judged, name):
    e = judged[name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    assert e.evidence["policy"]["own_kernels"], e.evidence["policy"]
    assert e.evidence["host_clock"]["escaped_ms"] < 0.05
    assert not e.warnings


def test_strict_policy_on_the_gpu(cache_dir):
    relu = load_task(FIXTURES / "cuda" / "task_relu.py")
    with Judge(cache_dir, JudgeOptions(**{**OPTIONS, "policy": "strict"})) as judge:
        honest = judge.evaluate(relu, FIXTURES / "cuda" / "ok_nvrtc.py")
    assert honest.verdict == "ok" and honest.policy == "strict", (honest.reason, honest.message)
    assert honest.evidence["policy"]["torch_compute"] == []


def test_implausible_speedup_is_remeasured_and_kept_when_it_agrees(cache_dir):
    relu = load_task(FIXTURES / "cuda" / "task_relu.py")
    everything_implausible = {kind: 0.5 for kind in ("gemm", "conv", "reduction", "elementwise", "other")}
    with Judge(cache_dir, JudgeOptions(**OPTIONS, implausible=everything_implausible)) as judge:
        e = judge.evaluate(relu, FIXTURES / "cuda" / "ok_nvrtc.py")
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    assert e.evidence["remeasure_timer"] == "CUPTI kernel spans" and e.evidence["task_kind"] == "elementwise"
    assert e.speedup_eager <= 1.25 * e.evidence["remeasured_speedup"]
    assert any("re-measured in a fresh process" in n for n in e.notes)
