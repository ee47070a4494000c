"""Profiling: ptxas and Nsight Compute parsing of recorded H100 output, speed-of-light arithmetic,
the prompt block, storage, and one real profile of a C candidate on the CPU.

The GPU side cannot run here, so its parsers read real outputs recorded on an H100
(tests/fixtures/profile/); everything that can run on a CPU runs for real.
"""
import json
import os
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES, ROOT, run_cli
from kernelevo.agent.profile_block import profile_block
from kernelevo.archive.store import Archive
from kernelevo.judge.measure import ncu, sol
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.measure.resources import demangle, parse_ptxas
from kernelevo.judge.measure.timing import TimingConfig
from torch import nn

from kernelevo.evaluation import Evaluation, KernelResources, Profile
from kernelevo.tasks import load_task, source_hash

SAMPLES = FIXTURES / "profile"
GOLDEN = Path(__file__).parent / "golden" / "prompts" / "profile_block.txt"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def stored(name: str) -> dict:
    return json.loads(sample(f"evaluation_{name}.json"))


# -- ptxas -------------------------------------------------------------------------------------------

def test_ptxas_nvrtc_log_gives_one_record_per_kernel_in_order():
    assert parse_ptxas(sample("nvrtc_layernorm.log"), "nvrtc") == [
        KernelResources(name="layernorm_generic", arch="sm_90", registers=32, shared_bytes=128, barriers=1,
                        compiler="nvrtc"),
        KernelResources(name="layernorm_vec", arch="sm_90", registers=40, shared_bytes=128, barriers=1,
                        compiler="nvrtc")]


def test_ptxas_spills_and_stack_frame():
    # the warnings and "Overriding maximum register limit" lines before the entry must not confuse it
    [r] = parse_ptxas(sample("nvrtc_spills.log"), "nvrtc")
    assert (r.name, r.registers, r.stack_bytes, r.spill_stores, r.spill_loads) == ("spilly", 24, 1200, 1076, 1168)
    assert (r.barriers, r.shared_bytes) == (0, 0)  # "1200 bytes cumulative stack size" is not smem


def test_ptxas_inside_a_ninja_nvcc_build_log():
    # nvcc prints the properties line without the "ptxas ." prefix, and the name mangled
    [r] = parse_ptxas(sample("nvcc_inline_build.txt"), "nvcc")
    assert r == KernelResources(name="twice", arch="sm_90a", registers=10, compiler="nvcc")
    assert parse_ptxas("no ptxas here\n") == []


def test_demangle():
    assert demangle("_Z5twicePKfPfi") == "twice"
    assert demangle("_ZN2ns4stepEv") == "ns::step"
    assert demangle("softmax_rows") == "softmax_rows"


# -- Nsight Compute ----------------------------------------------------------------------------------

# file -> (name, duration in us, dram %, occupancy %, registers, top stall), as ncu recorded them
NCU = {"ncu_row_softmax.csv": ("softmax_rows", 51.168, 73.44, 86.50, 31, "long_scoreboard"),
       "ncu_layernorm.csv": ("layernorm_vec", 28.8, 51.63, 67.62, 40, "long_scoreboard")}


@pytest.mark.parametrize("name", sorted(NCU))
def test_ncu_csv(name):
    [k] = ncu.parse(sample(name))  # "51,168" ns: a thousands separator, and nanoseconds to microseconds
    assert (k.name, k.duration_us, k.dram, k.occupancy, k.registers, k.stalls[0][0]) == pytest.approx(NCU[name])
    shares = [s for _, s in k.stalls]
    assert len(shares) == 3 and shares == sorted(shares, reverse=True) and all(0 < s <= 1 for s in shares)


def test_ncu_stall_shares_of_row_softmax():
    [k] = ncu.parse(sample("ncu_row_softmax.csv"))
    assert [r for r, _ in k.stalls] == ["long_scoreboard", "not_selected", "barrier"]
    assert k.stalls[0][1] == pytest.approx(8.69 / 18.17, abs=1e-4)  # its share of the listed stall reasons


def test_ncu_parse_without_header_is_empty():
    # what ncu's log holds when the profiled process died before any kernel
    assert ncu.parse("==PROF== Connected to process 1\n==ERROR== the application returned an error\n") == []


def test_ncu_run_without_ncu_says_so(monkeypatch, tmp_path):
    # an empty PATH and CUDA_HOME: find() has nowhere to look but /opt/nvidia/nsight-compute, absent in CI
    (tmp_path / "bin").mkdir()
    (tmp_path / "cuda").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert ncu.find() is None
    kernels, note = ncu.run({}, "cuda:0", timeout=5)
    assert kernels == [] and "not found" in note


# -- speed of light ----------------------------------------------------------------------------------

class Copy(nn.Module):
    def forward(self, x):
        return x.clone()


PEAKS = {"bandwidth": 1e12, "flops": {"float32": 1e13, "float16": 1e14}, "method": "by hand", "measured_at": "now"}


def test_sol_copy_is_memory_bound():
    work = sol.count_work(Copy(), [torch.randn(2**20)])
    assert work == {"flops": 0.0, "bytes": 2 * 4 * 2**20, "dtype": "float32"}  # read once, written once
    s = sol.bound(work, PEAKS, reference_ms=None, candidate_ms=0.0104858)
    assert s.bound == "memory" and s.compute_ms == 0.0
    assert s.bound_ms == pytest.approx(0.008388608) and s.memory_ms == s.bound_ms
    assert s.candidate_pct == pytest.approx(80.0, abs=1e-3) and s.reference_pct is None
    assert not s.fewer_flops and s.calibration == "by hand, measured now"


def test_sol_gemm_is_compute_bound():
    work = sol.count_work(nn.Linear(1024, 1024, bias=False), [torch.randn(1024, 1024)])
    assert work == {"flops": 2.0 * 1024**3, "bytes": 3 * 4 * 1024 * 1024, "dtype": "float32"}  # x, W, y
    s = sol.bound(work, PEAKS, reference_ms=0.25, candidate_ms=0.3)
    assert s.bound == "compute" and s.peak_flops == 1e13
    assert s.bound_ms == pytest.approx(0.2147483648) and s.memory_ms == pytest.approx(0.012582912)
    assert s.candidate_pct == pytest.approx(100 * 0.2147483648 / 0.3)
    assert s.reference_pct == pytest.approx(100 * 0.2147483648 / 0.25) and not s.fewer_flops
    # just under the compute bound (not under 80 % of it): still judged against it, over 100 %
    s = sol.bound(work, PEAKS, reference_ms=0.25, candidate_ms=0.9 * s.compute_ms)
    assert not s.fewer_flops and s.candidate_pct == pytest.approx(100 / 0.9)


def test_sol_candidate_under_compute_bound_does_fewer_flops():
    # diag(a) @ b done as a row scaling: far under the GEMM's bound, so the memory floor is its bound
    work = {"flops": 2.0 * 1024**3, "bytes": 3 * 4 * 1024 * 1024, "dtype": "float32"}
    s = sol.bound(work, PEAKS, reference_ms=0.25, candidate_ms=0.05)
    assert s.fewer_flops and s.bound == "compute" and s.bound_ms == pytest.approx(0.2147483648)
    assert s.candidate_pct == pytest.approx(100 * 0.012582912 / 0.05)


def test_sol_dtype_picks_its_peak():
    work = sol.count_work(nn.Linear(1024, 1024, bias=False).half(), [torch.randn(1024, 1024).half()])
    assert work["dtype"] == "float16" and work["bytes"] == 3 * 2 * 1024 * 1024
    s = sol.bound(work, PEAKS, None, None)
    assert s.peak_flops == 1e14 and s.compute_ms == pytest.approx(0.02147483648)
    # a dtype the calibration did not measure falls back to float32's peak
    assert sol.bound({**work, "dtype": "bfloat16"}, PEAKS, None, None).peak_flops == 1e13


def test_sol_peaks_calibrate_once_then_cached(tmp_path):
    path = sol.calibration_path(tmp_path, "Test CPU", torch.__version__)
    unkept, measured = sol.peaks(tmp_path, "cpu", "Test CPU", store=False)  # as a candidate's profile job
    assert measured and unkept["bandwidth"] > 0 and not path.exists()
    first, measured = sol.peaks(tmp_path, "cpu", "Test CPU")
    assert measured and path.is_file()
    assert first["bandwidth"] > 0 and set(first["flops"]) == {"float32", "float64"}
    assert all(v > 0 for v in first["flops"].values()) and first["device_name"] == "Test CPU"
    again, measured = sol.peaks(tmp_path, "cpu", "Test CPU")
    assert again == first and not measured
    assert json.loads(path.read_text()) == first


# -- the prompt block --------------------------------------------------------------------------------

def test_profile_block_row_softmax():
    profile = Profile.from_dict(stored("row_softmax")["profile"])
    text = profile_block(profile)
    assert text.startswith("Profile of this kernel on NVIDIA H100 80GB HBM3:\n")
    assert "softmax_rows 0.0478 ms (100%)" in text  # the dominant kernel, with its time
    assert "31 registers" in text and "no spills" in text and "256 B static shared memory" in text
    assert "Nsight Compute, softmax_rows" in text and "long_scoreboard (60%)" in text
    assert "This kernel is at 90% of it, eager PyTorch at 79%" in text  # % of speed of light
    assert profile_block(Profile.from_dict(stored("row_softmax")["profile"])) == text  # deterministic
    assert profile_block(Profile(device_name="x")) == ""  # nothing to say: no block


def test_profile_block_fewer_flops_and_several_kernels():
    text = profile_block(Profile.from_dict(stored("diag_matmul")["profile"]))
    assert "this kernel does less arithmetic" in text and "memory floor: 0.023 ms" in text
    assert "at 102% of that floor" in text
    text = profile_block(Profile.from_dict(stored("sum_reduction")["profile"]))
    assert "sum_partial 0.0241 ms (94%); sum_finish 0.00162 ms (6%)" in text
    assert "Nsight Compute, sum_partial" in text  # the longest kernel only


def test_profile_block_past_the_bound_says_what_is_known():
    # A correct kernel past the memory bound is cache-resident (or the calibration is low): it is
    # not accused of skipping work; past the compute bound it is within the calibration's error.
    memory = sol.bound({"flops": 0.0, "bytes": 50_000_000, "dtype": "float32"},
                       {**PEAKS, "bandwidth": 16.8e9}, reference_ms=6.0, candidate_ms=2.1)
    text = profile_block(Profile(device_name="CPU", sol=memory))
    assert "likely stays in cache" in text and "50 MB" in text and "non-temporal" in text
    assert "less work" not in text and "sound" not in text
    gemm = {"flops": 2.0 * 1024**3, "bytes": 3 * 4 * 1024 * 1024, "dtype": "float32"}
    compute = sol.bound(gemm, PEAKS, reference_ms=0.25, candidate_ms=0.19)  # 113 %, under 80 %: no
    text = profile_block(Profile(device_name="GPU", sol=compute))
    assert "float32 compute peak" in text and "calibration's error" in text and "cache" not in text
    skipped = sol.bound(gemm, PEAKS, reference_ms=0.25, candidate_ms=0.01)  # past its memory floor too
    text = profile_block(Profile(device_name="GPU", sol=skipped))
    assert "does less arithmetic" in text and "likely stays in cache" in text


def test_profile_block_matches_golden_file():
    # regenerate with KERNELEVO_UPDATE_GOLDEN=1 after changing prompts/ on purpose, and read the diff
    text = profile_block(Profile.from_dict(stored("row_softmax")["profile"]))
    if os.environ.get("KERNELEVO_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert GOLDEN.read_text() == text, f"{GOLDEN.name} changed; regenerate with KERNELEVO_UPDATE_GOLDEN=1 if meant"


# -- round trips -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["row_softmax", "diag_matmul", "sum_reduction"])
def test_evaluation_round_trip(name):
    data = stored(name)
    e = Evaluation.from_dict(data)
    assert isinstance(e.profile, Profile) and e.profile.ncu and e.profile.sol is not None
    assert Evaluation.from_dict(e.to_dict()) == e
    again = json.loads(json.dumps(e.to_dict()))
    # lossless against what was recorded; fields added since the recording come back as defaults, and
    # the relative half-width recorded before intervals comes back as the interval [low, high] it means
    speedup, half = data["speedup_eager"], data["speedup_eager_ci"]
    assert again.pop("speedup_eager_ci") == pytest.approx([speedup * (1 - half), speedup * (1 + half)])
    assert {k: v for k, v in again.items() if k in data} == {k: v for k, v in data.items() if k != "speedup_eager_ci"}
    assert again.get("shapes") is None and e.shapes is None


def test_archive_keeps_profile_in_its_own_column(tmp_path):
    data = stored("row_softmax")
    e = Evaluation.from_dict(data)
    source = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    with Archive.open(tmp_path / "archive.sqlite") as archive:
        task_id = archive.add_task("row_softmax", source, source_hash(source))
        run_id = archive.start_run(task_id, {}, seed=1, device="cuda:0", gpu_name="NVIDIA H100 80GB HBM3",
                                   torch_version="2.11", cuda_version="12.8")
        kernel_id = archive.add_kernel(task_id, "class ModelNew: pass\n", "nvrtc", "translate", run_id=run_id)
        other = archive.add_kernel(task_id, "class ModelNew: pass  # 2\n", "nvrtc", "mutate", run_id=run_id)
        eval_id = archive.add_evaluation(kernel_id, e)
        archive.add_evaluation(other, Evaluation.from_dict({**data, "profile": None}))
        assert archive.profiles(run_id) == {kernel_id: Profile.from_dict(data["profile"])}  # none: no entry
        [row] = archive.kernel(kernel_id).evaluations
        assert "profile" not in row.data and row.data["resources"][0]["registers"] == 31
        replacement = stored("diag_matmul")["profile"]
        archive.set_profile(eval_id, replacement)
        assert archive.profiles(run_id) == {kernel_id: Profile.from_dict(replacement)}


# -- end to end on the CPU ---------------------------------------------------------------------------

COPY_TASK = FIXTURES / "cpu" / "task_copy.py"  # the starter copy task at 16 MiB: 128 MiB is slow on a CI CPU
COPY_C = ROOT / "benchmarks" / "tasks" / "candidates" / "device_copy__c.py"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One cache for the judge and the CLI below: the CPU is calibrated once (by the baseline: no worker
    that runs candidate code keeps a calibration, sandbox.OPPONENT_WRITES)."""
    return tmp_path_factory.mktemp("profile-cache")


def test_judge_profiles_a_c_candidate_on_the_cpu(shared_cache):
    options = JudgeOptions(devices=("cpu",), compile_baseline=False, trials=2, sol=True,
                           timing=TimingConfig(min_reps=5, max_seconds=0.2, target_rel_ci=0.05))
    with Judge(shared_cache, options) as judge:
        e = judge.evaluate(load_task(COPY_TASK), COPY_C, profile=True)
    assert e.ok, (e.message, e.excerpt)
    p = e.profile
    assert p is not None and p.backend == "cpu"
    assert p.candidate[0].own and p.candidate[0].name == "copy_floats"
    assert "aten::copy_" in [k.name for k in p.reference]
    assert (p.sol.bound, p.sol.flops, p.sol.bytes) == ("memory", 0.0, 2 * 4 * 4 * 2**20)
    assert any("Nsight Compute" in n and "skipped on the CPU" in n for n in p.notes)
    assert p.ncu == ()
    assert list((shared_cache / "calibration").glob("*.json"))  # for the CLI test to reuse


def test_cli_prints_the_profile(shared_cache, tmp_path):
    task = tmp_path / COPY_TASK.name  # 4 MiB: what is printed does not depend on the size (its bounds trial does)
    task.write_text(COPY_TASK.read_text().replace("ELEMENTS = 4 * 1024 * 1024", "ELEMENTS = 1024 * 1024"))
    out = run_cli("evaluate", str(task), str(COPY_C), "--device", "cpu", "--profile", "--trials", "2",
                  "--no-compile-baseline", "--cache-dir", str(shared_cache))
    assert out.returncode == 0, out.stderr
    assert "speed of light" in out.stdout and "as the search's prompts show it" in out.stdout
    assert "Profile of this kernel on" in out.stdout and "copy_floats" in out.stdout


def test_a_kernel_judged_on_a_device_this_judge_lacks_is_profiled_on_one_it_has(tmp_path):
    """A resumed run's kernel judged in an earlier session on cuda:0 (one GPU then), resumed by a bench on cuda:1:
    its profile goes to the judge's own device, and the search's count of work per device gains no foreign key
    (from which the next child would have been sent to a device the judge does not have)."""
    from collections import Counter
    from types import SimpleNamespace

    from kernelevo.evolution.loop.profiler import Profiler

    import concurrent.futures

    asked = []

    class OneDeviceJudge:  # the judge of cuda:1 alone: what the profiler asks of it
        def profile(self, task, path, evaluation, ncu=True):
            asked.append(evaluation.device)
            return concurrent.futures.Future()

    state = SimpleNamespace(task=None, kernel_path=lambda k: tmp_path / f"k{k}.py")
    load = Counter({"cuda:1": 0})
    profiler = Profiler(state, OneDeviceJudge(), SimpleNamespace(), load, None)
    profiler._start(8, Evaluation(verdict="ok", reason="", message="", device="cuda:0", node_id="n0"), 15, False)
    assert asked == ["cuda:1"] and load == Counter({"cuda:1": 1})
    assert [meta.device for meta in profiler.futures.values()] == ["cuda:1"]
