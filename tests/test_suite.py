"""The starter suite: every task loads, every CUDA source compiles, every C candidate is correct.

No GPU here: CUDA is compiled, not run (NVRTC for the nvrtc format; for the inline format, its
device code, since CI has no cuSPARSE/cuBLAS headers for ATen's CUDA host headers). The GPU
tests and benchmarks/judge_throughput.py run them on a GPU.
"""
import ast
import re
from pathlib import Path

import pytest

from kernelevo import runtime
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.timing import TimingConfig
from kernelevo.tasks import load_task

from conftest import ROOT

SUITE = ROOT / "benchmarks" / "tasks"
TASKS = sorted(p for p in SUITE.glob("*.py") if not p.name.startswith("_"))
CANDIDATES = sorted((SUITE / "candidates").glob("*.py"))


def of_format(fmt: str) -> list[Path]:
    return [p for p in CANDIDATES if p.stem.endswith(f"__{fmt}")]


def cuda_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "__global__" in n.value]


def device_code(source: str) -> str:
    """An inline CUDA source without its torch host code: top-level pieces that mention torch
    or ATen are dropped, and so are includes other than CUDA's own device headers."""
    kept, depth, piece = [], 0, []
    for line in source.splitlines():
        if depth == 0 and line.lstrip().startswith("#include") and "cuda_fp16" not in line and "cuda_bf16" not in line:
            continue
        piece.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and (line.rstrip().endswith(("}", ";")) or line.lstrip().startswith("#")):
            text = "\n".join(piece)
            if not re.search(r"\b(torch|at|c10|TORCH_CHECK|AT_DISPATCH\w*)\b", text):
                kept.append(text)
            piece = []
    return "\n".join(kept)


def test_suite_is_complete():
    assert len(TASKS) >= 8
    for task in TASKS:
        for fmt in ("nvrtc", "inline", "c"):
            assert (SUITE / "candidates" / f"{task.stem}__{fmt}.py").exists(), (task.stem, fmt)


@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.stem)
def test_task_loads(path):
    task = load_task(path)
    assert task.input_summary()


@pytest.mark.parametrize("path", of_format("nvrtc"), ids=lambda p: p.stem)
def test_nvrtc_sources_compile(path):
    sources = cuda_strings(path)
    assert sources, "no CUDA source found"
    for source in sources:
        assert runtime.cuda_kernels(source), "no extern \"C\" kernel to launch"
        runtime.compile_cubin(source, "sm_90")


@pytest.mark.parametrize("path", of_format("inline"), ids=lambda p: p.stem)
def test_inline_device_code_compiles(path):
    sources = cuda_strings(path)
    assert sources, "no CUDA source found"
    for source in sources:
        code = device_code(source)
        assert "__global__" in code
        runtime.compile_cubin(code, "sm_90")


@pytest.fixture(scope="module")
def c_verdicts(cache_dir):
    """Every starter C candidate, submitted at once so builds and worker start-up overlap the judging."""
    # The starter tasks are sized for GPUs (device_copy moves 128 MiB): on a 2-core CPU each trial's
    # float64 comparison takes seconds, so one draw, the task's own shapes and one timed input set.
    # The judge's generality checks are tested on small tasks in test_generality.py.
    options = JudgeOptions(devices=("cpu",), compile_baseline=False, trials=1, shapes="exact", input_sets=1,
                           timing=TimingConfig(min_reps=5, max_seconds=0.2, target_rel_ci=0.05), concurrency=2)
    with Judge(cache_dir, options) as judge:
        futures = {p.stem: judge.submit(load_task(SUITE / f"{p.stem.split('__')[0]}.py"), p) for p in of_format("c")}
        return {name: f.result(timeout=900) for name, f in futures.items()}


@pytest.mark.parametrize("path", of_format("c"), ids=lambda p: p.stem)
def test_c_candidates_are_correct(c_verdicts, path):
    e = c_verdicts[path.stem]
    assert e.verdict == "ok", (e.reason, e.message, e.excerpt)
