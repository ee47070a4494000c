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


def test_the_assembly_runs_under_cuda_graphs_and_matches(assembled):
    module, task, _ = assembled
    reference, new, x = _pair(module, task)
    with torch.no_grad():
        want = reference(x)
        assert torch.allclose(new(x), want, atol=2e-3, rtol=2e-3)  # eager: the kernels called directly
        graphed = torch.compile(new, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):  # recorded on a later call, then replayed
            got = graphed(x).clone()
        assert torch.allclose(got, want, atol=2e-3, rtol=2e-3)
        static = x.clone()
        new(static)  # warm: every kernel built before the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = new(static)
        static.copy_(task.get_inputs()[0].cuda())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, reference(static), atol=2e-3, rtol=2e-3)


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
