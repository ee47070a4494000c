"""The judge against the GPU-only exploits, and the starter suite through every check, on a real
GPU. Run on the GPU machine: pytest -m gpu."""
import re

import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run.executor import WorkerLimits
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.judge.run import bounds
from kernelevo.tasks import load_task

from conftest import FIXTURES, ROOT

pytestmark = pytest.mark.gpu
CHEATS = FIXTURES / "cheats" / "cuda"
SUITE = ROOT / "benchmarks" / "tasks"
STARTERS = sorted(p for p in (SUITE / "candidates").glob("*.py") if not p.stem.endswith(("__c", "_cpp_inline")))
JOINED = FIXTURES / "cuda" / "side_stream_joined_nvrtc.py"  # honest: a side stream joined back
MACRO = FIXTURES / "cuda" / "macro_kernels_nvrtc.py"  # honest: its kernels defined by a macro
GRAPHED = FIXTURES / "honest" / "static" / "input_cache__cuda_graph.py"  # honest: CUDA graphs keyed by placement
GRAPH_INPUT = FIXTURES / "honest" / "dynamic" / "input_cache__graph_static_input.py"  # flagged, left to the trials
PERSISTING = FIXTURES / "harmless" / "persisting_l2__window_left_set_nvrtc.py"  # left set; reset before timed calls
BOUNDS = sorted((FIXTURES / "bounds").glob("*.py"))  # right values on every shape, an index out of bounds
# The bounds trial holds the device for 10-80 s a candidate under memcheck: it runs on the candidates it is
# for (final=True), one starter of each format among them, not on all 27 (that took over 8 minutes)
BOUNDED = {"elementwise_chain__nvrtc.py", "row_softmax__triton.py", "layernorm__inline.py"}
OPTIONS = dict(devices=("cuda:0",), compile_baseline=False, limits=WorkerLimits(run=60),
               timing=TimingConfig(max_seconds=0.5), concurrency=8, bounds="final")


def expected(path) -> tuple[str, str]:
    return tuple(re.search(r"^# expect: (\w+) (\w+)$", path.read_text(), re.M).groups())


@pytest.fixture(scope="module")
def judged(cache_dir):
    relu = load_task(FIXTURES / "cuda" / "task_relu.py")
    with Judge(cache_dir, JudgeOptions(**OPTIONS)) as judge:
        futures = {p.name: judge.submit(relu, p) for p in sorted(CHEATS.glob("*.py"))}
        futures.update({p.name: judge.submit(load_task(SUITE / f"{p.stem.split('__')[0]}.py"), p,
                                             final=p.name in BOUNDED) for p in STARTERS})
        futures[JOINED.name] = judge.submit(relu, JOINED, final=True)
        futures[MACRO.name] = judge.submit(relu, MACRO)
        futures[GRAPHED.name] = judge.submit(relu, GRAPHED, final=True)
        futures.update({p.name: judge.submit(relu, p, final=True) for p in BOUNDS})
        futures[GRAPH_INPUT.name] = judge.submit(relu, GRAPH_INPUT, final=True)
        judged = {name: f.result(timeout=900) for name, f in futures.items()}
        # Alone, after the others: the L2 set-aside it changes is the device's, and while it changed, others'
        # gated blocks in the checker's clock were once left unconfirmed (suspected, not proven; l2.py)
        judged[PERSISTING.name] = judge.evaluate(relu, PERSISTING)
        return judged


@pytest.mark.parametrize("name", sorted(p.name for p in CHEATS.glob("*.py")))
def test_gpu_cheat_rejected_with_its_reason(judged, name):
    e = judged[name]
    assert (e.verdict, e.reason) == expected(CHEATS / name), (e.message, e.evidence)
    assert e.speedup_eager is None


def test_side_stream_is_caught_in_the_checkers_timed_block(judged):
    """Work on a stream that does not wait for the caller's runs ahead of the checker's gate, on inputs not
    yet written: its outputs there are wrong, though every trial's were right."""
    e = judged["escaped_work__side_stream.py"]
    assert "the checker's timed block, call" in e.message, e.message


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


def test_a_graph_cache_keeping_its_input_and_static_output_passes(judged):
    """Keyed by the input's address, its entry keeps the input it reads and the output buffer it writes:
    static reading flags that, and the trials (new values in the same memory) show it recomputes."""
    e = judged[GRAPH_INPUT.name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    assert any(n.startswith("static suspicion (input_cache), left to the trials") for n in e.notes), e.notes


def test_a_persisting_l2_window_left_set_is_reset_before_every_timed_call(judged):
    """A set-aside and a window over its input, set on every call and left set: before each timed call the
    judge puts both back and returns persisting lines to normal, and says so. Whether its speedup then
    matches the same kernel's without the window is measured by benchmarks/persisting_l2.py."""
    e = judged[PERSISTING.name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    reset = e.evidence["l2_reset"]
    assert "persisting-L2 set-aside" in reset["found"] and "access-policy window" in reset["found"], reset
    assert reset["calls"] >= e.candidate.n, (reset, e.candidate)  # every timed call of the candidate, at least
    assert any("returned every persisting L2 line to normal" in n for n in e.notes), e.notes
    # and nothing is named where no candidate set anything
    assert not [name for name, h in judged.items() if "l2_reset" in h.evidence and name != PERSISTING.name]


@pytest.mark.parametrize("name", [p.name for p in STARTERS])
def test_honest_starter_candidates_pass_every_check(judged, name):
    e = judged[name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    assert e.evidence["policy"]["own_kernels"], e.evidence["policy"]
    host = e.evidence["host_clock"]
    assert host["escaped_ms"] < 0.05
    assert all(0 <= host[k] <= host["calls"] for k in ("preempted_calls", "eager_preempted_calls", "slept_calls",
                                                        "eager_slept_calls"))
    assert not e.warnings
    # the checker's clock timed a block of its calls behind the gate (none waits for the device in a call)
    clock = e.evidence["clock"]
    assert clock["confirmed"] and clock["calls"] >= 1 and clock["candidate_ms"] > 0, clock
    # the outputs of its last timed calls (one per input set) and of its last fresh-values call, compared again
    # in the checker
    assert e.evidence["checker"]["timed_outputs"] == 3 + 1, e.evidence["checker"]
    # the bounds trial saw every index in bounds, or (confined workers) says it could not check
    assert name not in BOUNDED or any(n.startswith("bounds trial: compute-sanitizer memcheck saw every index in bounds")
               or n == f"bounds trial skipped: {bounds.SANDBOXED}" for n in e.notes), e.notes


def test_kernels_a_macro_defines_are_the_candidates_own(judged):
    """An honest reply's attention kernels, instantiated by a macro, were once judged a runtime error."""
    e = judged[MACRO.name]
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    assert any(k.startswith(("relu_x1", "relu_x4")) for k in e.evidence["policy"]["own_kernels"]), e.evidence["policy"]


def _checked(e):
    if f"bounds trial skipped: {bounds.SANDBOXED}" in e.notes:
        pytest.skip(bounds.SANDBOXED)  # a kernel without Landlock: no launcher (judge/run/launcher.py)
    return e


@pytest.mark.parametrize("name", [p.name for p in BOUNDS])
def test_out_of_bounds_grids_are_rejected(judged, name):
    e = _checked(judged[name])
    assert (e.verdict, e.reason) == expected(FIXTURES / "bounds" / name), (e.message, e.evidence, e.notes)


def test_out_of_bounds_names_the_kernel_the_access_and_the_shape(judged):
    e = _checked(judged["out_of_bounds__tail_load_unguarded_nvrtc.py"])
    found = e.evidence["bounds"]
    assert found["kernel"].startswith("relu_scale_tail") and found["kind"] == "read" and found["size"] == 4
    assert found["shape"].startswith("test inputs 1") and "relu_scale_tail" in e.message
    triton = judged["out_of_bounds__row_block_unmasked_load_triton.py"].evidence["bounds"]
    assert triton["kind"] == "read" and "relu_rows" in triton["kernel"]


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
    assert e.speedup_eager <= 1.25 * e.evidence["remeasured_speedup"]  # a device-bound eager: both timers agree
    assert e.evidence["remeasured_ms"]["candidate"] <= 1.25 * e.candidate.median_ms  # its span, its events
    assert any("re-measured in a fresh process" in n for n in e.notes)


def test_host_bound_reference_is_remeasured_like_for_like(cache_dir):
    """A deep narrow MLP, whose eager call is its host's module calls and launches. The judge's events time the
    device's work (eager's launches queued, no gaps), as the re-measure's CUPTI spans after a spin do: were the
    events to count eager's host, a fused kernel would read several times faster by them than by the spans, and
    the re-measure would refuse an honest kernel as timing_mismatch. The host's share is in the loop figure."""
    mlp = load_task(FIXTURES / "cuda" / "task_deep_narrow.py")
    everything_implausible = {kind: 0.5 for kind in ("gemm", "conv", "reduction", "elementwise", "other")}
    with Judge(cache_dir, JudgeOptions(**OPTIONS, implausible=everything_implausible)) as judge:
        e = judge.evaluate(mlp, FIXTURES / "cuda" / "deep_narrow_fused_nvrtc.py")
    assert e.verdict == "ok", (e.reason, e.message, e.evidence)
    assert e.evidence["task_kind"] == "gemm" and any("re-measured in a fresh process" in n for n in e.notes)
    assert e.speedup_eager <= 1.25 * e.evidence["remeasured_speedup"]
    assert e.loop.speedup_eager > 2 * e.speedup_eager  # eager is host-bound: the loop counts what events do not
    print("host-bound MLP:", e.speedup_eager, e.loop.speedup_eager, e.evidence["remeasured_ms"])
