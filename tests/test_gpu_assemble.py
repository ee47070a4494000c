"""A whole model with CUDA kernels in place, on a GPU: benchmarks/models/gpt_stack.py split on the device,
its block and head parts given the fixture nvrtc kernels, written as one drop-in. In eager the parts call
their kernels directly; the file runs whole under torch.compile(mode="reduce-overhead", fullgraph=True)
and under a plain torch.cuda.CUDAGraph capture, matching the original; the judge's modes job times the
original and the assembly in the user's loop in every mode it is asked for."""
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES, ROOT
from kernelevo.evolution.drivers.parts.drop_in import Placed, drop_in_text
from kernelevo.evolution.drivers.parts.split import split_model
from kernelevo.tasks import load_module, load_task

pytestmark = pytest.mark.gpu
MODEL = ROOT / "benchmarks" / "models" / "gpt_stack.py"
KERNELS = FIXTURES / "models" / "kernels"


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    tmp = tmp_path_factory.mktemp("gpt")
    data = split_model(MODEL, tmp / "parts", "cuda:0", top=8, cover=1.0)
    placed = []
    for entry in data["tasks"]:
        name = Path(entry["task"]).stem
        kernel = next((KERNELS / f"{k}__nvrtc.py" for k in ("block", "linear") if name.startswith(k)), None)
        if kernel is None:
            continue
        task = load_task(tmp / "parts" / entry["task"])
        placed.append(Placed(name, kernel.read_text(), task.init_args, ("tensor",),
                             tuple(s["path"] for s in entry["call_sites"]), f"the fixture kernel of {name}"))
    assert placed, data["tasks"]
    path = tmp / "gpt_kernelevo.py"
    path.write_text(drop_in_text(MODEL.read_text(), MODEL.name, placed))
    return load_module(path.read_text(), str(path), "candidate"), load_task(MODEL), path


def _pair(module, task):
    torch.manual_seed(0)
    reference = task.make_model().cuda().eval()
    new = module.ModelNew(*task.init_args).cuda().eval()
    new.load_state_dict(reference.state_dict())
    x = task.get_inputs()[0].cuda()
    return reference, new, x


def _graphed_match(new, reference, x, fresh, want, tol):
    """`new` under torch.compile(mode="reduce-overhead", fullgraph=True) gives `want` on `x`; captured in
    a plain CUDAGraph and replayed on `fresh` copied into its static input, it gives the reference's."""
    graphed = torch.compile(new, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # recorded on a later call, then replayed
        got = graphed(x).clone()
    assert torch.allclose(got, want, atol=tol, rtol=tol)
    static = x.clone()
    new(static)  # warm: every kernel built before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = new(static)
    static.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, reference(static), atol=tol, rtol=tol)


def test_the_assembly_runs_under_cuda_graphs_and_matches(assembled):
    module, task, _ = assembled
    reference, new, x = _pair(module, task)
    with torch.no_grad():
        want = reference(x)
        assert torch.allclose(new(x), want, atol=2e-3, rtol=2e-3)  # eager: the kernels called directly
        _graphed_match(new, reference, x, task.get_inputs()[0].cuda(), want, 2e-3)


def test_the_judge_passes_the_assembly_as_kernelevo_compile_runs_it(assembled, tmp_path):
    """The drop-in judged again with its forward through kernelevo_compile under CUDA graphs (parts/as_run.py):
    every trial and timed output replayed from the graph, compared by the checker; an honest assembly passes."""
    from kernelevo.evolution.drivers.parts.as_run import as_run_text
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.judge.measure.timing import TimingConfig

    _, task, path = assembled
    text = path.read_text().replace('KERNELEVO_MODE = "eager"', 'KERNELEVO_MODE = "reduce-overhead"')
    assert 'KERNELEVO_MODE = "reduce-overhead"' in text
    as_run = tmp_path / "as_run.py"
    as_run.write_text(as_run_text(text))
    with Judge(tmp_path / "cache", JudgeOptions(devices=("cuda:0",), policy="model", compile_baseline=False,
                                                timing=TimingConfig(max_seconds=0.5))) as judge:
        evaluation = judge.evaluate(task, as_run)
    assert evaluation.ok, (evaluation.reason, evaluation.message)
    assert evaluation.correctness.trials >= 2 and evaluation.shapes.supported

def test_the_modes_job_times_both_models_in_each_mode(assembled, tmp_path):
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.judge.measure.timing import TimingConfig

    _, task, path = assembled
    with Judge(tmp_path / "cache", JudgeOptions(devices=("cuda:0",), policy="model",
                                                timing=TimingConfig(max_seconds=0.5))) as judge:
        loop = judge.modes(task, path, "cuda:0", ("eager", "reduce-overhead"))
    assert not loop.errors, loop.errors
    for model in ("original", "assembled"):
        assert loop.modes(model) == ["eager", "reduce-overhead"]
        for mode in ("eager", "reduce-overhead"):
            t = loop.time(model, mode)
            assert 0 < t.low <= t.ms <= t.high
    ratio = loop.ratio(("original", "eager"), ("assembled", "eager"))
    assert ratio.low <= ratio.point <= ratio.high
    assert loop.cached["original@reduce-overhead"]  # compiled from what the warm job left in the opponent's cache


def test_a_region_in_place_runs_under_cuda_graphs_and_matches(tmp_path):
    """tests/fixtures/models/own_attention.py split on the GPU: its own forward becomes a region task,
    placed with the task's own torch code as the kernel. The rewritten forward matches the original in
    eager, under torch.compile(mode="reduce-overhead", fullgraph=True) and replayed from a plain
    CUDAGraph capture; the guard (shapes, dtype, device) holds on the GPU's tensors."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernelevo.evolution.drivers.parts.assemble import chosen_parts

    model = FIXTURES / "models" / "own_attention.py"
    data = split_model(model, tmp_path / "parts", "cuda:0", top=8, cover=1.0)
    regions = [t["task"] for t in data["tasks"] if "region" in t]
    assert regions, (data["tasks"], data["notes"])
    rows = [{"path": str(tmp_path / "parts" / name), "correct": True, "speedup_eager": 2.0, "speedup_eager_ci": [1.9, 2.1],
             "kernel_id": i, "verdict": "ok", "status": "done"} for i, name in enumerate(regions)]
    kernels = [(tmp_path / "parts" / name).read_text().replace("class Model(", "class ModelNew(") for name in regions]
    chosen, _ = chosen_parts(tmp_path / "parts", rows, kernels.__getitem__, min_speedup=1.0, baseline="eager")
    task = load_task(model)
    module = load_module(drop_in_text(task.source, model.name, [c.placed for c in chosen]), str(tmp_path / "a.py"),
                         "candidate")
    torch.manual_seed(0)
    reference = task.make_model().cuda()  # in the mode it was split in: the rewritten forward holds there
    new = module.ModelNew(*task.init_args).cuda()
    new.load_state_dict(reference.state_dict())
    x = task.get_inputs()[0].cuda()
    runs = []
    kernel_run = module._run_model_region
    module._run_model_region = lambda *args: runs.append(1) or kernel_run(*args)
    with torch.no_grad():
        want = reference(x)
        assert torch.allclose(new(x), want, atol=1e-4, rtol=1e-4) and runs == [1]  # the region's kernel ran
        _graphed_match(new, reference, x, task.get_inputs()[0].cuda(), want, 1e-4)
