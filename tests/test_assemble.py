"""A model handed back with kernels in place, on the CPU: the drop-in file matches the model, swaps
the parts of a live instance, and compiles whole under torch.compile with no graph break; judged end
to end by the real judge, a part that is right alone but wrong in place (it assumes contiguous rows,
and the model hands it a strided view) is reverted with the judge's reason, and the rest is verified.
`optimize MODEL.py --parts 2` end to end is in test_assemble_optimize.py (a file of its own, so that
under --dist loadfile it runs beside these)."""
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.evolution.drivers.parts.assemble import Candidate, verified
from kernelevo.evolution.drivers.parts.drop_in import Placed, drop_in_text
from kernelevo.evolution.drivers.parts.split import split_model
from kernelevo.tasks import load_module, load_task

MODELS = FIXTURES / "models"
KERNELS = MODELS / "kernels"


def placed_parts(model: Path, out: Path) -> list[Placed]:
    """The model's parts (split into `out`), each with the fixture kernel of its task."""
    data = split_model(model, out, "cpu", top=8, cover=1.0)
    placed = []
    for entry in data["tasks"]:
        task = load_task(out / entry["task"])
        name = Path(entry["task"]).stem
        placed.append(Placed(name, (KERNELS / f"{name}__c.py").read_text(), task.init_args,
                             tuple("tensor" for _ in task.get_inputs()),
                             tuple(s["path"] for s in entry["call_sites"]), f"the fixture kernel of {name}"))
    return placed


def model_and_assembled(module, task, seed: int):
    """The original model and the assembled one with the same weights, and the model's own input."""
    torch.manual_seed(seed)
    reference = task.make_model()
    new = module.ModelNew(*task.init_args)
    new.load_state_dict(reference.state_dict())
    return reference, new, task.get_inputs()[0]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    text = drop_in_text((MODELS / "mlp_stack.py").read_text(), "mlp_stack.py", placed_parts(MODELS / "mlp_stack.py", tmp))
    (tmp / "assembled.py").write_text(text)
    return load_module(text, str(tmp / "assembled.py"), "candidate"), load_task(MODELS / "mlp_stack.py")


def test_the_drop_in_matches_the_model_and_swaps_a_live_one(stack):
    module, task = stack
    torch.manual_seed(0)
    reference = task.make_model()
    new = module.ModelNew(*task.init_args)
    assert not set(new.state_dict()) ^ set(reference.state_dict())  # the same weights by the same names
    new.load_state_dict(reference.state_dict())
    x = task.get_inputs()[0]
    with torch.no_grad():
        want = reference(x)
        assert torch.allclose(new(x), want, atol=1e-5, rtol=1e-5)
    live = task.make_model()
    live.load_state_dict(reference.state_dict())
    assert module.apply(live) == ["blocks.0", "blocks.1", "blocks.2", "blocks.3", "head"]
    assert type(live.blocks[2]).__name__ == "_InPlace_mlp_block" and type(live.head).__name__ == "_InPlace_gated_head"
    with torch.no_grad():
        assert torch.allclose(live(x), want, atol=1e-5, rtol=1e-5)


def test_the_drop_in_compiles_whole_with_the_kernels_as_custom_ops(stack):
    module, task = stack
    reference, new, _ = model_and_assembled(module, task, seed=1)
    compiled = torch.compile(new, fullgraph=True)  # a graph break would raise here
    with torch.no_grad():
        for x in (task.get_inputs()[0], torch.randn(3, 5, 64)):  # another shape: traced again, still whole
            assert torch.allclose(compiled(x), reference(x), atol=1e-5, rtol=1e-5)


def test_in_eager_without_autograd_a_part_calls_its_kernel_directly(stack):
    """No custom-op dispatch on a user's no_grad loop (its host cost); with autograd on, the op, whose
    backward is refused rather than silently lost."""
    from torch.profiler import profile

    module, task = stack
    reference, new, x = model_and_assembled(module, task, seed=3)

    def ops_called(grad: bool) -> set[str]:
        with torch.set_grad_enabled(grad), profile() as prof:
            out = new(x)
        assert torch.allclose(out, reference(x), atol=1e-5, rtol=1e-5)
        return {e.name for e in prof.events() if e.name.startswith("kevo_")}

    assert ops_called(grad=False) == set()
    assert {name.split("::")[1] for name in ops_called(grad=True)} == {"mlp_block", "gated_head"}
    with pytest.raises(RuntimeError, match="autograd"):
        new(x.requires_grad_()).sum().backward()


def test_compiled_under_no_grad_a_part_is_its_plain_op_and_with_autograd_its_custom_op(stack):
    """A compiled model without CUDA graphs pays a part's op at every call: under no_grad it is the plain
    op (one kernel of the dispatcher); with autograd on, the custom op, which refuses a backward."""
    from torch.profiler import profile

    module, task = stack
    reference, new, x = model_and_assembled(module, task, seed=5)

    def ops_called(grad: bool) -> set[str]:
        compiled = torch.compile(new, fullgraph=True)
        with torch.set_grad_enabled(grad):
            compiled(x)  # traced here, outside the profile
            with profile() as prof:
                out = compiled(x)
        assert torch.allclose(out, reference(x), atol=1e-5, rtol=1e-5)
        return {e.name.split("::")[1] for e in prof.events() if e.name.startswith("kevo_")}

    assert ops_called(grad=False) == {"mlp_block_nograd", "gated_head_nograd"}
    torch._dynamo.reset()
    for p in new.parameters():
        p.requires_grad_(False)  # with autograd on, and nothing to differentiate: the forward still runs
    assert ops_called(grad=True) == {"mlp_block", "gated_head"}


def test_a_second_load_of_the_same_file_runs_its_own_parts(tmp_path):
    """The ops' namespace is the file's hash, so a second load of the same file in one process would meet
    the first's ops, whose code runs the first load's parts: it takes a namespace of its own. Each load's
    models are right, eager and compiled, whichever was loaded last."""
    model = MODELS / "mlp_stack.py"
    text = drop_in_text(model.read_text(), "mlp_stack.py", placed_parts(model, tmp_path))
    task = load_task(model)
    first, second = (load_module(text, str(tmp_path / f"load{i}.py"), "candidate") for i in (1, 2))
    with torch.no_grad():
        for seed, module in enumerate((first, second, first)):
            reference, new, x = model_and_assembled(module, task, seed=10 + seed)
            assert torch.allclose(new(x), reference(x), atol=1e-5, rtol=1e-5)
            torch._dynamo.reset()
            assert torch.allclose(torch.compile(new, fullgraph=True)(x), reference(x), atol=1e-5, rtol=1e-5)


def test_an_op_never_hands_back_an_input_s_memory(stack):
    """An op's output must not alias its inputs (the compiler may reuse an input's memory once read): a
    kernel that returns its input, or a view of it, has it copied; its own tensors are handed back as made."""
    module, _ = stack
    x = torch.randn(4, 6)
    weight = torch.randn(6)
    for aliased in (x, x.view(6, 4), weight[:3]):
        out = module._own(aliased, [weight], x)
        assert torch.equal(out, aliased) and out.untyped_storage().data_ptr() != aliased.untyped_storage().data_ptr()
    made = torch.randn(24).view(4, 6)
    assert module._own(made, [weight], x) is made


def test_through_its_op_a_kernel_keeps_nothing_it_sets_on_itself_and_called_directly_it_does(tmp_path):
    """A kernel that keeps a workspace from its first call: under CUDA graphs (reduce-overhead) that tensor
    is made in the graph's pool and outlives the graph, which refuses it (the bf16 stack's attention kernel,
    2026-11-30). Through its op (any compiled mode) what the call set on the kernel is dropped after it, and
    what it held before stays; in eager, called directly, it keeps its workspace for the next call."""
    model = MODELS / "mlp_stack.py"
    parts = {p.name: p for p in placed_parts(model, tmp_path)}
    keep = "        x = x.contiguous()\n"
    kernel = parts["mlp_block"].kernel_source
    assert keep in kernel
    kernel = kernel.replace(keep, keep + "        if getattr(self, '_ws', None) is None:\n"
                                         "            self._ws = torch.empty(x.numel())\n"
                                         "            self._made = getattr(self, '_made', 0) + 1\n", 1)
    import dataclasses

    text = drop_in_text(model.read_text(), "mlp_stack.py",
                        [dataclasses.replace(parts["mlp_block"], kernel_source=kernel), parts["gated_head"]])
    module, task = load_module(text, str(tmp_path / "kept.py"), "candidate"), load_task(model)
    reference, new, x = model_and_assembled(module, task, seed=4)
    block = new.blocks[0]
    block.held = "before"  # an attribute it had before the call stays
    compiled = torch.compile(new, fullgraph=True)
    with torch.no_grad():
        for _ in range(2):
            assert torch.allclose(compiled(x), reference(x), atol=1e-5, rtol=1e-5)
        assert getattr(block, "_ws", None) is None and block.held == "before"
        assert torch.allclose(new(x), reference(x), atol=1e-5, rtol=1e-5)  # eager: called directly
        assert block._ws is not None and block._made == 1
        new(x)
        assert block._made == 1  # its workspace kept for the next call


def test_a_model_let_go_frees_its_parts(stack):
    import gc

    module, task = stack
    new = module.ModelNew(*task.init_args)
    mine = module._SITES[-5:]  # its five sites: four blocks and the head
    assert all(ref() is not None for ref in mine)
    del new
    gc.collect()
    assert all(ref() is None for ref in mine)


def test_a_kernel_parameter_named_like_a_module_constant_keeps_its_name_in_place():
    """A Triton kernel's `BLOCK_M: tl.constexpr` beside a module constant BLOCK_M: prefixing the constant
    must leave the parameter (Triton refuses a non-constexpr global inside a kernel)."""
    from kernelevo.evolution.drivers.parts.drop_in import _prefixed

    source = ("SCALE = 4\n\ndef kernel(x, SCALE: int = SCALE):\n    y = x * SCALE\n    return y\n\n"
              "def call(x):\n    return kernel(x, SCALE) + SCALE\n")
    text = _prefixed(source, "_k0_")
    assert "def _k0_kernel(x, SCALE: int=_k0_SCALE):\n    y = x * SCALE" in text
    namespace: dict = {}
    exec(text, namespace)
    assert namespace["_k0_call"](2) == 12 and namespace["_k0_kernel"](2, 3) == 6


def _judge(cache: Path):
    return Judge(cache, JudgeOptions(devices=("cpu",), trials=2, compile_baseline=False, bounds="off",
                                     timing=TimingConfig(max_seconds=0.2)))


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    """One judge (its zygote, its pool) for the tests here that judge parts and assembled files."""
    with _judge(tmp_path_factory.mktemp("judge") / "cache") as j:
        yield j


def test_a_part_wrong_in_place_is_reverted_and_the_rest_verified(tmp_path, judge):
    model = MODELS / "strided.py"
    parts = {p.name: p for p in placed_parts(model, tmp_path / "parts")}
    assert set(parts) == {"mix", "row_norm"}
    # each kernel is right alone, on its task
    alone = {name: judge.evaluate(load_task(tmp_path / "parts" / f"{name}.py"), KERNELS / f"{name}__c.py")
             for name in parts}
    assert all(e.verdict == "ok" for e in alone.values()), {n: e.message for n, e in alone.items()}
    candidates = [Candidate(parts["mix"], 0.6, 1.1, None, 1), Candidate(parts["row_norm"], 0.4, 1.2, None, 2)]
    task = load_task(model)
    evaluation = verified(task.source, "strided.py", tmp_path / "strided_kernelevo.py", candidates,
                          lambda path: judge.evaluate(task, path, final=True))
    assert evaluation.verdict == "ok", evaluation.message
    mix, row_norm = candidates
    assert mix.reverted == "" and row_norm.reverted.startswith("wrong in place: incorrect")
    written = (tmp_path / "strided_kernelevo.py").read_text()
    assert "_InPlace_mix" in written and "_InPlace_row_norm" not in written  # the file holds what was verified


class _Judged:
    """The judge's verdict on an assembled file, as result() reads it."""
    verdict, reason, message, device, device_name = "ok", "", "", "cuda", "GPU"
    speedup_eager = speedup_eager_ci = speedup_compile = speedup_compile_ci = None


def test_a_part_is_placed_only_where_its_kernel_beats_the_compiled_part(tmp_path):
    from kernelevo.cli.views.parts import _graph_cell
    from kernelevo.evolution.drivers.parts.assemble import chosen_parts, result
    from kernelevo.text import speedup_text

    from kernelevo.archive.records import BenchTaskRecord
    from kernelevo.archive.reports.bench_data import task_rows

    placed_parts(MODELS / "mlp_stack.py", tmp_path / "parts")
    # the rows as a bench's stored tasks give them (the assembly reads nothing else); the head's final ran on a GPU,
    # which also replayed it in a CUDA graph
    graph = {"candidate_ms": 0.02, "compiled_ms": 0.019, "speedup_compile": 0.95, "speedup_compile_ci": [0.94, 0.96]}
    rows = task_rows([
        BenchTaskRecord("b1", 0, str(tmp_path / "parts" / "mlp_block.py"), "mlp_block", "done", kernel_id=7,
                        verdict="ok", speedup_eager=1.6, speedup_eager_ci=[1.5, 1.7], speedup_compile=0.93,
                        speedup_compile_ci=[0.9, 0.96], evaluation={"format": "c"}),
        BenchTaskRecord("b1", 1, str(tmp_path / "parts" / "gated_head.py"), "gated_head", "done", kernel_id=8,
                        verdict="ok", speedup_eager=2.0, speedup_eager_ci=[1.9, 2.1], speedup_compile=1.2,
                        speedup_compile_ci=[1.1, 1.3], evaluation={"format": "cuda", "graph": graph})])
    chosen, left = chosen_parts(tmp_path / "parts", rows, lambda kid: f"# kernel {kid}\n", min_speedup=1.0)
    assert [c.kernel_id for c in chosen] == [8]
    # a final on a GPU measured it in a CUDA graph too: what it can give a model under reduce-overhead
    assert (chosen[0].graph.speedup_compile, chosen[0].graph.speedup_compile_ci) == (0.95, (0.94, 0.96))
    data = result("m.py", tmp_path / "m_kernelevo.py", "b1", chosen, left, _Judged())
    assert data["host"]["cores"] >= 1 and data["host"]["cpu"]  # whose host the host-included figures are
    part = data["parts"][0]
    assert (part["speedup_graph_compile"], part["speedup_graph_compile_ci"], part["graph_why"]) == (0.95, [0.94, 0.96], "")
    assert _graph_cell(part) == speedup_text(0.95, [0.94, 0.96])
    assert _graph_cell({"graph_why": "candidate: cannot be captured"}).startswith("not measured (candidate: cannot")
    assert [(x["task"], x["why"]) for x in left] == [
        ("mlp_block.py", "its kernel is not faster than 1x torch.compile of the part beyond noise (0.93x)")]
    assert "1.20x against torch.compile alone, 2.00x against eager" in chosen[0].placed.label
    assert (chosen[0].compile_speedup, chosen[0].compile_ci) == (1.2, (1.1, 1.3))  # the parts table's "alone vs compile"
    chosen, left = chosen_parts(tmp_path / "parts", rows, lambda kid: f"# kernel {kid}\n", min_speedup=1.0,
                                baseline="eager")
    assert [c.kernel_id for c in chosen] == [7, 8] and left == []


def test_only_kernels_faster_beyond_noise_are_placed_and_nothing_placed_is_the_model_unchanged(tmp_path, judge):
    from kernelevo.evolution.drivers.parts.assemble import chosen_parts, result

    placed_parts(MODELS / "mlp_stack.py", tmp_path / "parts")  # the split, with split.json
    rows = [{"path": str(tmp_path / "parts" / "mlp_block.py"), "correct": True, "speedup_eager": 1.3,
             "speedup_eager_ci": [0.95, 1.6], "kernel_id": 7, "verdict": "ok", "status": "done"},
            {"path": str(tmp_path / "parts" / "gated_head.py"), "correct": False, "speedup_eager": None,
             "verdict": "no correct kernel", "status": "done"}]
    chosen, left = chosen_parts(tmp_path / "parts", rows, lambda kid: "unused", min_speedup=1.0)
    assert chosen == [] and [(x["task"], x["why"]) for x in left] == [
        ("mlp_block.py", "its kernel is not faster than 1x eager beyond noise (1.30x)"),
        ("gated_head.py", "no verified kernel (no correct kernel)")]
    # a search still open (a replay waiting for its next reply) has no final: it says so, and how to end it
    waiting = [dict(rows[0], status="pending", correct=False, verdict="ok", calls=14, search_speedup_compile=1.28)]
    _, left = chosen_parts(tmp_path / "parts", waiting, lambda kid: "unused", min_speedup=1.0)
    assert left[0]["why"].startswith("its search is still open (14 calls, best so far 1.28x): resume the bench")
    chosen, _ = chosen_parts(tmp_path / "parts", rows, lambda kid: f"# kernel {kid}\n", min_speedup=0.9)
    assert [(c.placed.name, c.kernel_id, c.placed.kernel_source) for c in chosen] == [("mlp_block", 7, "# kernel 7\n")]
    # nothing in place: the file is the model as it was, judged all the same (about 1.0x)
    out = tmp_path / "unchanged.py"
    task = load_task(MODELS / "mlp_stack.py")
    with Judge(tmp_path / "cache", JudgeOptions(devices=("cpu",), trials=2, compile_baseline=False, policy="model",
                                                timing=TimingConfig(max_seconds=0.3))) as whole:
        evaluation = verified(task.source, "mlp_stack.py", out, [], lambda path: whole.evaluate(task, path, final=True))
    data = result(str(MODELS / "mlp_stack.py"), out, "b1", [], left, evaluation)
    assert data["verdict"] == "ok" and data["message"].startswith("no part in place") and data["amdahl_bound"] == 1.0
    assert data["speedup_eager"] > 0, data  # the model against itself, timed: no bound on a loaded CPU's figure
    assert evaluation.policy == "model" and evaluation.evidence["policy"]["own_kernels"] == []
    assert judge.evaluate(task, out).reason == "no_own_kernel"  # a search's policy would refuse it: no kernel of its own ran
    module = load_module(out.read_text(), str(out), "candidate")
    reference, new, x = model_and_assembled(module, task, seed=4)
    with torch.no_grad():
        assert torch.equal(new(x), reference(x))


@pytest.mark.parametrize("name", ["block", "linear"])
def test_the_gpt_stack_part_kernels_compile_and_read_clean(name):
    """The CUDA kernels benchmarks/whole_model.py answers gpt_stack's parts with (run on a GPU there):
    here, their sources compile for sm_90 and the static checks find nothing."""
    import ast

    from kernelevo import runtime
    from kernelevo.judge import static

    source = (KERNELS / f"{name}__nvrtc.py").read_text()
    cuda = [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and "__global__" in str(n.value)]
    assert cuda and all(runtime.compile_cubin(text, "sm_90")[0] for text in cuda)
    assert static.check(source) == []


def test_an_lstm_of_torch_returning_a_tuple_is_assembled_and_verified_end_to_end(tmp_path, judge):
    """recurrent.py: nn.LSTM built with keywords, given (h0, c0) as a tuple, returning (output, (h_n, c_n))
    of which the model uses the output. The task takes x, h0 and c0 and returns the output; in place, its
    op returns that and the call site gets (output, (None, None)); the whole is judged as a candidate."""
    from kernelevo.evolution.drivers.parts.call import parse

    data = split_model(MODELS / "recurrent.py", tmp_path / "parts", "cpu", top=16)
    entry = next(t for t in data["tasks"] if t["task"] == "lstm.py")
    task = load_task(tmp_path / "parts" / "lstm.py")
    placed = Placed("lstm", (KERNELS / "lstm__c.py").read_text(), task.init_args, ("tensor",) * 3, ("lstm",),
                    "the fixture kernel of lstm", parse(entry["call"], 3))
    model = load_task(MODELS / "recurrent.py")
    candidate = Candidate(placed, entry["share"], 1.0, None, 1)
    evaluation = verified(model.source, "recurrent.py", tmp_path / "recurrent_kernelevo.py", [candidate],
                          lambda path: judge.evaluate(model, path, final=True))
    assert evaluation.verdict == "ok" and candidate.reverted == "", (candidate.reverted, evaluation.message)
    module = load_module((tmp_path / "recurrent_kernelevo.py").read_text(), "assembled.py", "candidate")
    torch.manual_seed(5)
    reference = model.make_model()
    new = module.ModelNew(*model.init_args)
    new.load_state_dict(reference.state_dict())
    inputs = model.get_inputs()
    with torch.no_grad():
        want = reference(*inputs)
        assert torch.allclose(new(*inputs), want, atol=1e-5)
        out, state = new.lstm(new.embed(inputs[0]), (inputs[1], inputs[2]))
        assert state == (None, None) and out.shape == (4, 48, 32)
        compiled = torch.compile(new, fullgraph=True)  # the op returns one tensor, the tuple is put together around it
        assert torch.allclose(compiled(*inputs), want, atol=1e-5)


_TWO = '''import torch
import torch.nn as nn

from kernelevo import runtime

_lib = runtime.load_c(r"""
#include <stdint.h>
void scale_shift(const float* x, const float* s, float* a, float* b, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; ++i) { a[i] = x[i] * s[i % cols]; b[i] = x[i] + 1.0f; }
}
""")


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        a, b = torch.empty_like(x), torch.empty_like(x)
        _lib.scale_shift(x, self.scale.contiguous(), a, b, x.numel() // x.shape[-1], x.shape[-1])
        return a, b
'''


def test_a_part_returning_several_tensors_is_placed_with_the_ones_the_model_uses(tmp_path):
    from kernelevo.evolution.drivers.parts.call import parse

    data = split_model(MODELS / "two_outputs.py", tmp_path, "cpu", top=4)
    # the part, and the model's own `a * b` on the two outputs it picks from the part's tuple (a region)
    assert sorted(t["task"] for t in data["tasks"]) == ["model_region.py", "scale_shift.py"], data["tasks"]
    entry = next(t for t in data["tasks"] if t["class"] == "ScaleShift")
    assert entry["left_out"] == ["output[2]: float32[64]"]
    assert "        return out[0], out[1]\n" in (tmp_path / entry["task"]).read_text()
    task = load_task(tmp_path / entry["task"])
    placed = Placed("scale_shift", _TWO, task.init_args, ("tensor",), ("pair",), "a C kernel", parse(entry["call"], 1))
    model = load_task(MODELS / "two_outputs.py")
    module = load_module(drop_in_text(model.source, "two_outputs.py", [placed]), str(tmp_path / "a.py"), "candidate")
    torch.manual_seed(0)
    reference = model.make_model()
    new = module.ModelNew(*model.init_args)
    new.load_state_dict(reference.state_dict())
    x = model.get_inputs()[0]
    with torch.no_grad():
        assert torch.allclose(new(x), reference(x)) and new.pair(x)[2] is None
        assert torch.allclose(torch.compile(new, fullgraph=True)(x), reference(x))  # the op returns a list of two


def test_a_part_its_parent_calls_with_keywords_at_their_defaults_is_placed_and_checks_them(tmp_path):
    """nn.TransformerEncoder calls each layer as layer(x, src_mask=None, is_causal=False, src_key_padding_mask=None);
    the split leaves keywords at their defaults out of the call, and the part in place took `x` alone: ViT's
    encoder-layer kernel (1.65x torch.compile alone) failed in place with "unexpected keyword argument
    'src_mask'". The part in place takes them, at their defaults only, and the constants of its call as they
    were: another value is a call the kernel was never verified on, refused, not ignored."""
    from kernelevo.evolution.drivers.parts.call import parse_defaults

    data = split_model(MODELS / "encoder.py", tmp_path, "cpu", top=8, cover=1.0)
    entry = next(t for t in data["tasks"] if t["task"] == "transformer_encoder_layer.py")
    assert dict(parse_defaults(entry["defaults"])) == {"src_mask": None, "src_key_padding_mask": None, "is_causal": False}
    placed = [_itself(tmp_path, entry), _itself(tmp_path, next(t for t in data["tasks"] if t["task"] == "multihead_attention.py"))]
    model = load_task(MODELS / "encoder.py")
    module = load_module(drop_in_text(model.source, "encoder.py", placed), str(tmp_path / "a.py"), "candidate")
    reference, new, x = model_and_assembled(module, model, seed=4)
    reference.eval(), new.eval()
    with torch.no_grad():
        want = reference(x)
        assert torch.allclose(new(x), want, atol=1e-5, rtol=1e-5)  # eager: the kernel called directly
        assert torch.allclose(torch.compile(new, fullgraph=True)(x), want, atol=1e-5, rtol=1e-5)  # through its op
        layer = new.encoder.layers[1]
        assert type(layer).__name__ == "_InPlace_transformer_encoder_layer"
        with pytest.raises(TypeError, match="verified on calls that leave src_mask at its default"):
            layer(x, src_mask=torch.zeros(64, 64))
        # a constant of the call (the pool's need_weights=False), passed otherwise, is refused too
        with pytest.raises(TypeError, match="verified on calls with need_weights=False"):
            new.pool(x[:, :1], x, x, need_weights=True)
        with pytest.raises(TypeError, match="verified on calls with need_weights=False"):
            new.pool(x[:, :1], x, x)  # left at its default, True


def _itself(folder, entry) -> Placed:
    """A part with its own task's module as its kernel: the wiring around it is what is tested."""
    from kernelevo.evolution.drivers.parts.call import parse, parse_defaults

    task = load_task(folder / entry["task"])
    kinds = tuple("tensor" for _ in task.get_inputs())
    return Placed(Path(entry["task"]).stem, task.source.replace("class Model(", "class ModelNew("), task.init_args,
                  kinds, tuple(s["path"] for s in entry["call_sites"]), "itself", parse(entry["call"], len(kinds)),
                  defaults=parse_defaults(entry.get("defaults")))
