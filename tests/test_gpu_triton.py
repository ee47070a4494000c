"""Triton on a GPU: every starter Triton candidate judged with timings (its first call counted as
build time), and a scripted `--format auto` search that asks for nvrtc and Triton side by side."""
import sys

import pytest
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import ROOT

pytestmark = pytest.mark.gpu
SUITE = ROOT / "benchmarks" / "tasks"
CANDIDATES = sorted((SUITE / "candidates").glob("*__triton.py"))


@pytest.fixture(scope="module")
def verdicts(cache_dir):
    options = JudgeOptions(devices=("cuda:0",), compile_baseline=False, timing=TimingConfig(max_seconds=0.5))
    with Judge(cache_dir, options) as judge:
        futures = {p.stem: judge.submit(load_task(SUITE / f"{p.stem.split('__')[0]}.py"), p) for p in CANDIDATES}
        return {name: f.result(timeout=900) for name, f in futures.items()}


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.stem)
def test_starter_triton_candidate_is_timed_ok(verdicts, path):
    e = verdicts[path.stem]
    assert (e.verdict, e.format) == ("ok", "triton"), (e.reason, e.message, e.excerpt)
    assert e.speedup_eager is not None and e.speedup_eager_ci and e.candidate.median_ms > 0
    assert e.evidence["policy"]["own_kernels"]  # the profiler named the @triton.jit functions
    assert e.build_s > 0 and any(n.startswith("build: import and construction") for n in e.notes)
    assert len(e.shapes.supported) > 1 and not e.specialized


def test_an_autotuned_candidate_tunes_in_its_first_call(cache_dir):
    options = JudgeOptions(devices=("cuda:0",), compile_baseline=False, timing=TimingConfig(max_seconds=0.5))
    with Judge(cache_dir, options) as judge:
        e = judge.evaluate(load_task(ROOT / "tests" / "fixtures" / "cuda" / "task_relu.py"),
                           ROOT / "tests" / "fixtures" / "triton" / "autotuned_triton.py")
    assert e.ok and e.speedup_eager, (e.verdict, e.reason, e.message, e.excerpt)
    assert any(n.startswith("autotune scaled_relu") for n in e.notes), e.notes  # the config its benchmarking chose
    assert any("first call (Triton's compile, autotuning)" in n for n in e.notes), e.notes


def test_format_auto_searches_in_both_languages(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from format_auto import run_task

    for task in ("layernorm", "row_softmax"):
        folder = tmp_path / task
        folder.mkdir()
        done = run_task(task, folder, calls=6, device="cuda:0")
        assert done["exit"] in (0, 3), done["stderr_tail"]
        asked = {r["format"] for r in done["formats"] if r["calls"]}
        assert asked == {"nvrtc", "triton"}, done
        assert all(done["best"][f]["speedup_eager"] for f in ("nvrtc", "triton")), done["best"]
        assert any(line.lstrip().startswith("format triton") for line in done["summary"]), done["summary"]
