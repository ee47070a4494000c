"""The host-inclusive twin of every timed figure: calls back to back as a user's loop makes them
(judge/measure/loop.py), carried into the Evaluation, its JSON, the prompts and the drop-in."""
import json

import pytest

from kernelevo.agent.prompting import HOST_BOUND, Opponent, opponent, variant
from kernelevo.evaluation import Evaluation
from kernelevo.twins import GraphTiming, LoopTiming
from kernelevo.evolution.drivers.bench_score import _speedup_against
from kernelevo.judge.job_result import JobResult
from kernelevo.judge.results import _graph_figures, _loop_figures
from kernelevo.text import graph_text
from kernelevo.judge.measure import loop
from conftest import FIXTURES, variant_of

torch = pytest.importorskip("torch")


def test_calls_back_to_back_interleave_and_give_a_ratio_with_its_interval():
    x = torch.randn(64, 64)
    fns = {"small": lambda a: a[0] + 1, "large": lambda a: (a[0] @ a[0]).relu()}
    measured, calls = loop.back_to_back(fns, [[x], [x.clone()]], "cpu", seconds=0.2, ratios=(("large", "small"),))
    assert loop.MIN_CALLS <= calls <= loop.MAX_CALLS
    assert len(measured.samples["small"]) == len(measured.samples["large"]) >= loop.MIN_ROUNDS
    out = loop.figures(measured, calls, (("large", "small"),))
    point, low, high = out["large/small"]
    assert low <= point <= high and set(out["ms"]) == {"small", "large"} and out["calls"] == calls


def test_a_block_is_timed_after_one_call_of_its_own(monkeypatch):
    """A user's loop calls one model after itself: a block's timed calls must not include the one that follows
    another function's block (whose data may have pushed this one's out of the caches). A clock of the test's own:
    a call costs 5 ms right after the other function ran, 1 ms after itself."""
    import types

    clock, last = [0], [None]

    def timed(name):
        def call(_inputs):
            clock[0] += (1 if last[0] == name else 5) * 1_000_000
            last[0] = name
        return call

    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter_ns=lambda: clock[0],
                                                            perf_counter=__import__("time").perf_counter))
    measured, calls = loop.back_to_back({"a": timed("a"), "b": timed("b")}, [[None]], "cpu", seconds=0.05)
    assert calls == loop.MIN_CALLS  # 2 ms blocks of 1 ms calls: the fewest
    assert set(measured.samples["a"]) == set(measured.samples["b"]) == {1.0}


def _result():
    return JobResult.of({"verdict": "ok", "loop": {"calls": 20, "rounds": 30, "ms": {"candidate": 0.02, "eager": 0.06},
                                                   "eager/candidate": [3.0, 2.9, 3.1]}})


def _beside(**figures):
    """What a fresh process timing torch.compile beside the candidate sent back (a final's)."""
    return JobResult.of({"verdict": "ok", **figures})


def test_the_compiled_figure_in_a_loop_is_eager_s_scaled_by_the_baseline_s_own_loop_ratio():
    baseline = JobResult.of({"verdict": "ok", "loop": {"compiled/eager": [0.5, 0.48, 0.52]}})
    figures = _loop_figures(_result(), baseline, None, device_ms=0.015)
    assert figures.speedup_eager == 3.0 and figures.speedup_compile == pytest.approx(1.5)
    low, high = figures.speedup_compile_ci
    assert low < 1.5 < high and high / low > 0.52 / 0.48  # both intervals combined, wider than either
    assert figures.compiled_ms == pytest.approx(0.03) and figures.host_share == pytest.approx(0.25)
    timed_beside = _beside(loop={"ms": {}, "compiled/candidate": [2.2, 2.1, 2.3]})
    beside = _loop_figures(_result(), baseline, timed_beside, None)  # timed beside: taken as it is
    assert beside.speedup_compile == 2.2 and beside.speedup_compile_ci == (2.1, 2.3) and beside.host_share is None
    assert _loop_figures(JobResult.of({"verdict": "ok"}), baseline, None, None) is None  # judged before loops were timed


def test_the_loop_travels_through_json():
    baseline = JobResult.of({"verdict": "ok", "loop": {"compiled/eager": [0.5, 0.48, 0.52]}})
    looped = _loop_figures(_result(), baseline, None, 0.015)
    e = Evaluation(verdict="ok", reason="", message="", loop=looped)
    again = Evaluation.from_dict(json.loads(json.dumps(e.to_dict())))
    assert again.loop == looped and isinstance(again.loop, LoopTiming)


def test_the_graph_figures_of_a_final_travel_from_the_fresh_process_to_json_and_text():
    graph = {"ms": {"candidate": 0.0236, "eager": 0.05, "compiled": 0.0203},
             "compiled/candidate": [0.86, 0.85, 0.87], "eager/candidate": [2.1, 2.0, 2.2]}
    figures = _graph_figures(_beside(graph=graph))
    assert figures.speedup_compile == 0.86 and figures.speedup_compile_ci == (0.85, 0.87)
    assert figures.speedup_eager == 2.1 and figures.compiled_ms == 0.0203 and not figures.why
    assert "0.86x" in graph_text(figures) and "vs torch.compile (20.3 µs)" in graph_text(figures)
    e = Evaluation(verdict="ok", reason="", message="", graph=figures)
    again = Evaluation.from_dict(json.loads(json.dumps(e.to_dict())))
    assert again.graph == figures and isinstance(again.graph, GraphTiming)
    why = _graph_figures(_beside(graph={"why": "candidate: cannot be captured"}))
    assert why.speedup_compile is None and graph_text(why) == "not measured: candidate: cannot be captured"
    assert _graph_figures(_beside(graph=None)) is None  # the CPU: none
    assert _graph_figures(None) is None


def test_prompts_name_the_opponent_with_its_kernels():
    o = Opponent("compile", 0.088, 0.0556, (("cunn_SoftMaxForward", 1, 0.05),), (("triton_red_fused_0", 2, 0.04),))
    text = opponent(o)
    assert "must beat: torch.compile" in text and "0.0556 ms compiled" in text and "0.0880 ms in eager" in text
    assert "`triton_red_fused_0` (2 launches, 0.0400 ms)" in text and "`cunn_SoftMaxForward` (1 launch" in text
    assert text.index("triton_red_fused_0") < text.index("cunn_SoftMaxForward")  # the opponent's first
    assert "must beat: PyTorch eager" in opponent(Opponent("eager", 0.3, 0.2))
    assert "must beat: PyTorch eager" in opponent(Opponent("compile", 0.3))  # torch.compile gave no figure


def test_a_kernel_whose_calls_are_mostly_host_work_is_told_so():
    shown = variant_of("src", "nvrtc", speedup_eager=2.0, speedup_compile=1.1, ms=0.01, loop_ms=0.02,
                    host_share=HOST_BOUND + 0.3)
    assert "0.0200 ms per call" in variant(shown) and "launches dominate" in variant(shown)
    assert f"host overhead {0.02 * (HOST_BOUND + 0.3):.4f} ms per call" in variant(shown)
    quiet = variant_of("src", "nvrtc", speedup_eager=2.0, ms=0.01, loop_ms=0.011, host_share=0.09)
    assert "host overhead 0.0010 ms per call (9 % of the call" in variant(quiet) and "dominate" not in variant(quiet)
    assert "back to back" not in variant(variant_of("src", "c", speedup_eager=2.0, ms=0.01))


def test_a_models_part_is_told_that_its_model_replays_it_in_a_cuda_graph(tmp_path):
    """A part of a model runs where torch.compile's CUDA graphs replay it (reduce-overhead, a GPU model's usual
    best mode): advice to cut launches and allocations misleads there. kernel 35 of gpt_stack_bf16's MLP block:
    0.0266 ms by events, 0.1965 back to back (86 % host), 1.137x torch.compile in a graph (H200, 2026-12-01)."""
    import dataclasses

    from kernelevo.agent.prompting import Context, Target, TaskView, crossover
    from kernelevo.tasks import load_task, model_part

    shown = variant_of("src", "triton", speedup_eager=1.35, ms=0.0266, loop_ms=0.1965, host_share=0.86)
    graphed = variant(shown, graphed=True)
    assert "host overhead 0.1690 ms per call (86 % of the call" in graphed and "dominate" not in graphed
    assert "CUDA graph: there its device time decides" in graphed and "dominate" in variant(shown)
    view = TaskView("part", "class Model: ...\n", "bfloat16[8, 384]", "[]")
    gpu = Target("triton", "NVIDIA H200", (9, 0), 132)
    for seen in (False, True):
        text = "".join(m.content for m in crossover(Context(dataclasses.replace(view, graphed=seen), gpu), [shown]))
        assert ("captures the whole forward" in text) is seen and ("launches dominate" in text) is not seen
    # which tasks are parts: those split.json beside them lists
    task = tmp_path / "block_part1.py"
    task.write_text((FIXTURES / "cpu" / "task_scale.py").read_text())
    assert not model_part(task)
    (tmp_path / "split.json").write_text(json.dumps({"tasks": [{"task": "block_part2.py"}]}))
    assert not model_part(task)
    (tmp_path / "split.json").write_text(json.dumps({"tasks": [{"task": "block_part2.py"}, {"task": task.name}]}))
    assert model_part(task) and model_part(load_task(task).path)
    (tmp_path / "split.json").write_text("{not json")
    assert not model_part(task)


def test_a_candidates_bench_chooses_by_its_baseline():
    fast_eager = Evaluation(verdict="ok", reason="", message="", speedup_eager=6.9, speedup_compile=0.96)
    fast_compiled = Evaluation(verdict="ok", reason="", message="", speedup_eager=5.3, speedup_compile=1.2)
    assert max([fast_eager, fast_compiled], key=_speedup_against("compile")) is fast_compiled
    assert max([fast_eager, fast_compiled], key=_speedup_against("eager")) is fast_eager
    unmeasured = Evaluation(verdict="ok", reason="", message="", speedup_eager=2.0)
    assert _speedup_against("compile")(unmeasured) == 2.0
