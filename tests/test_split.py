"""`kernelevo split` on the CPU: small models become suites of task files. Identical layers fold
into one task, a part built from other modules opens into its children with the reason said, and
every written task rebuilds, standalone, the output of each of its call sites from the inputs and
weights captured there."""
import json
import sys

import pytest
import torch
import torch.nn as nn

from conftest import FIXTURES, run_cli
from kernelevo.evolution.drivers.bench import suite_tasks
from kernelevo.evolution.drivers.parts.record import build, constructor_args, record
from kernelevo.evolution.drivers.parts.split import SPLIT_JSON, split, split_model
from kernelevo.tasks import load_task

MODELS = FIXTURES / "models"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    out = tmp_path_factory.mktemp("stack")
    return out, split_model(MODELS / "mlp_stack.py", out, "cpu", top=8, cover=1.0)


def test_identical_blocks_fold_into_one_task_and_the_head_is_its_own(stack):
    out, data = stack
    tasks = {t["task"]: t for t in data["tasks"]}
    assert list(tasks) == ["mlp_block.py", "gated_head.py"]  # hottest first
    assert [s["path"] for s in tasks["mlp_block.py"]["call_sites"]] == [f"blocks.{i}" for i in range(4)]
    assert [s["path"] for s in tasks["gated_head.py"]["call_sites"]] == ["head"]
    assert tasks["mlp_block.py"]["init"] == ["64", "256"] and tasks["gated_head.py"]["init"] == ["64", "32", "1e-05"]
    assert tasks["mlp_block.py"]["inputs"] == ["float32[8, 16, 64]"]
    shares = [t["share"] for t in data["tasks"]]
    assert all(0 < s <= 1 for s in shares) and sum(shares) <= 1.0 + 1e-9
    assert abs(tasks["mlp_block.py"]["share"] - sum(s["share"] for s in tasks["mlp_block.py"]["call_sites"])) < 1e-3
    assert data["notes"] == [] and json.loads((out / SPLIT_JSON).read_text()) == data
    assert sorted(p.name for p in suite_tasks(out)) == ["gated_head.py", "mlp_block.py"]  # a suite bench runs


def test_a_task_file_holds_what_its_part_needs_and_the_recorded_arguments(stack):
    out, _ = stack
    text = (out / "mlp_block.py").read_text()
    assert "class MLPBlock(nn.Module)" in text and "class Model(MLPBlock):" in text
    assert "class GatedHead" not in text and "class RMSNorm" not in text  # the block needs neither
    assert "mlp_stack" not in text and "blocks.0" not in text  # nothing of this model: another's same part
    head = (out / "gated_head.py").read_text()
    assert "class RMSNorm(nn.Module)" in head and "def __init__(self, dim, out, eps):" in head
    task = load_task(out / "gated_head.py")
    assert task.init_args == (64, 32, 1e-05) and task.input_summary() == "float32[8, 16, 64]"


def test_every_task_rebuilds_every_call_site(stack):
    """Not only the site split checked: each site's own weights and captured inputs, through the file."""
    out, data = stack
    _rebuilds_every_site(out, data, MODELS / "mlp_stack.py")


def test_a_part_built_from_modules_writes_them_as_its_arguments(tmp_path):
    data = split_model(MODELS / "built_from_modules.py", tmp_path, "cpu", top=8)
    assert all(n.startswith("covered ") for n in data["notes"]), data["notes"]  # nothing left out; maybe short of 90 %
    tasks = {t["task"]: t for t in data["tasks"] if "region" not in t}  # the model's own `* scale` may be one
    assert set(tasks) == {"residual.py", "residual_2.py"} and [t["init"] for t in tasks.values()] == [[], []]
    assert {tuple(s["path"] for s in t["call_sites"]) for t in tasks.values()} == {("first",), ("second",)}
    texts = {(tmp_path / name).read_text() for name in tasks}
    assert "        super().__init__(nn.Sequential(nn.Linear(48, 48), nn.ReLU()))\n" in "".join(texts)
    assert "        super().__init__(nn.Linear(48, 48))\n" in "".join(texts)
    assert data["covered"] == pytest.approx(sum(t["share"] for t in data["tasks"]), abs=1e-3)


def test_top_writes_the_hottest_only(tmp_path):
    data = split_model(MODELS / "mlp_stack.py", tmp_path, "cpu", top=1)
    assert [t["task"] for t in data["tasks"]] == ["mlp_block.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp_block.py", SPLIT_JSON]


class _Scaled(nn.Module):
    def __init__(self, dim, *extra, scale=1.0, **options):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.scale = scale

    def forward(self, x, shift=0.0):
        return self.lin(x) * self.scale + (0.0 if shift is None else shift)


def test_constructor_arguments_are_read_as_called_and_the_hook_goes_away():
    before = sys.getprofile()
    with constructor_args() as seen:
        module = _Scaled(4, 7, 8, scale=2.0, mode="x")
        plain = nn.Linear(3, 5, bias=False)
    assert seen[id(module)] == ((4, 7, 8), {"scale": 2.0, "mode": "x"})
    assert seen[id(module.lin)] == ((4, 4, True, None, None), {})  # every parameter, defaults included
    assert seen[id(plain)] == ((3, 5, False, None, None), {})
    assert sys.getprofile() is before


def test_what_cannot_be_rebuilt_is_said(tmp_path):
    def local_model():
        class Inner(nn.Module):
            def forward(self, x):
                return x * 2

        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Inner()
                self.keyed = _Scaled(6, scale=3.0, mode="y")
                self.optional = _Scaled(6)

            def forward(self, x):
                return self.optional(self.keyed(self.inner(x)), shift=None) + self.keyed(x, shift=0.0)
        return Outer()

    model, inits = build(local_model)
    recording = record(model, [torch.randn(2, 6)], "cpu", inits)
    data = split(recording, "", "local.py", tmp_path, top=8)
    assert data["notes"][0] == "inner (Inner): its class is defined inside a function; left out"
    assert all(n.startswith("covered ") for n in data["notes"][1:])
    # keyword arguments, as the constructor was called; None in the call (the model's own `+` may be a region)
    keyed, optional = [t for t in data["tasks"] if "region" not in t]
    assert keyed["init"] == ["6", "3.0", "'y'"] and keyed["call_sites"][0]["path"] == "keyed"
    assert "    def __init__(self, dim, scale, mode):\n        super().__init__(dim, scale=scale, mode=mode)\n" \
        in (tmp_path / keyed["task"]).read_text()
    assert "        return super().forward(x, shift=None)\n" in (tmp_path / optional["task"]).read_text()
    task = load_task(tmp_path / optional["task"])
    with torch.no_grad():
        assert torch.equal(task.make_model()(torch.ones(2, 6)).isnan(), torch.zeros(2, 6, dtype=torch.bool))


def test_the_command_writes_the_suite_and_says_so(tmp_path):
    """By default each part is also timed under torch.compile (inductor's C++ on the CPU) against its
    speed of light, and the parts are ranked by what the compiler leaves."""
    done = run_cli("split", str(MODELS / "mlp_stack.py"), "-o", str(tmp_path / "parts"), "--device", "cpu",
                   "--top", "2", "--cover", "1", "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert "mlp_block.py" in done.stdout and "gated_head.py" in done.stdout
    said = " ".join(done.stdout.split())
    assert f"kernelevo bench {tmp_path / 'parts'}" in said and "ranked by headroom" in said
    data = json.loads((tmp_path / "parts" / "split.json").read_text())
    assert data["ranked_by"] == "headroom_ms" and len(data["tasks"]) == 2
    for t in data["tasks"]:
        assert t["ms_compiled"] > 0 and t["sol_ms"] > 0, t
        bound = 0.0 if t.get("sol_unreliable") else t["sol_ms"]  # a bound a baseline beat counts for nothing
        assert t["headroom_ms"] == pytest.approx(t["ms_compiled"] - bound, abs=1e-4)
        assert t["left_to_compiler"] == (t["ms_compiled"] <= 1.2 * t["floor_ms"])
    measured = [t["headroom_ms"] for t in data["tasks"]]
    assert measured == sorted(measured, reverse=True)
    shown = run_cli("split", str(MODELS / "mlp_stack.py"), "-o", str(tmp_path / "again"), "--device", "cpu", "--json",
                    "--no-compile-baseline")
    assert shown.returncode == 0 and json.loads(shown.stdout)["tasks"][0]["task"] == "mlp_block.py"
    assert "ms_compiled" not in json.loads(shown.stdout)["tasks"][0]
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    bad = run_cli("split", str(broken), "-o", str(tmp_path / "x"), "--device", "cpu")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "get_inputs" in bad.stderr


def test_the_same_part_of_another_model_writes_the_same_task(stack, tmp_path):
    """Nothing of the model or the run is in a task file, so a later model's same part has the same
    source hash, and its search is seeded from this one's kernels."""
    out, _ = stack
    other = (MODELS / "mlp_stack.py").read_text().replace('"""A small', '"""Another, deeper').replace(
        "DIM, HIDDEN, DEPTH, OUT = 64, 256, 4, 32", "DIM, HIDDEN, DEPTH, OUT = 64, 256, 6, 10")
    (tmp_path / "deeper.py").write_text(other)
    data = split_model(tmp_path / "deeper.py", tmp_path / "parts", "cpu", top=8, cover=1.0)
    assert len(data["tasks"][0]["call_sites"]) == 6
    assert (tmp_path / "parts" / "mlp_block.py").read_text() == (out / "mlp_block.py").read_text()
    assert (tmp_path / "parts" / "gated_head.py").read_text() != (out / "gated_head.py").read_text()  # 10 outputs


def test_a_factory_model_is_split_with_its_parts_imported(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(MODELS))
    data = split_model("zoo:make_model", tmp_path, "cpu", top=8, inputs="zoo:make_inputs")
    (task,) = data["tasks"]
    # a Sequential of blocks of one class is a stack: its blocks fold into one task
    assert task["task"] == "expand.py" and [s["path"] for s in task["call_sites"]] == ["layers.0", "layers.1", "layers.2"]
    text = (tmp_path / "expand.py").read_text()
    assert "from zoo import Expand" in text and "class Model(Expand):" in text and "class Net" not in text
    assert load_task(tmp_path / "expand.py").init_args == (16, 2)
    with pytest.raises(Exception, match="pkg.module:make_inputs"):
        split_model("zoo:make_model", tmp_path, "cpu", top=8)
    with pytest.raises(Exception, match="cannot be imported"):
        split_model("zoo:no_such", tmp_path, "cpu", top=8, inputs="zoo:make_inputs")


def test_a_model_search_takes_the_parts_with_most_headroom_and_leaves_the_rest_to_the_compiler():
    from kernelevo.evolution.drivers.parts.headroom import _figures, _read, searched, weighted_calls
    from kernelevo.judge.api import JobResult

    def ms(median: float) -> dict:  # a baseline's timing of one role, as its worker sends it
        return {"median_ms": median, "p10_ms": median, "p90_ms": median, "min_ms": median, "mean_ms": median,
                "n": 10, "rel_ci": 0.01}

    near = _figures(*_read(JobResult.of({"verdict": "ok", "sol": {"bound_ms": 1.0, "memory_ms": 1.0},
                                         "timing": {"eager": ms(2.0), "compiled": ms(1.1)}})))
    assert near == {"ms_compiled": 1.1, "sol_ms": 1.0, "floor_ms": 1.0, "headroom_ms": 0.1, "left_to_compiler": True}
    four = _figures(*_read(JobResult.of({"verdict": "ok", "timing": {"compiled": ms(1.1)},
                                         "sol": {"bound_ms": 1.0}})), calls=4)
    assert (four["ms_compiled"], four["sol_ms"]) == (4.4, 4.0)  # per forward of the model, as eager's ms
    # a folded task's sites built at other sizes count by their eager time against its own sites' per call
    sites = [{"calls": 2, "ms": 4.0}, {"calls": 1, "ms": 2.2}, {"calls": 1, "ms": 0.5, "built": 1}, {"calls": 2, "ms": 2.0, "built": 2}]
    assert weighted_calls(sites) == pytest.approx(3 + (0.5 + 2.0) / (6.2 / 3))
    assert weighted_calls([{"calls": 3, "ms": 0.9}, {"calls": 1, "ms": 0.2}]) == 4  # sites of its own size count whole
    failed = _figures(*_read(JobResult.of({"verdict": "ok", "timing": {"eager": ms(2.0)},
                                           "sol": {"bound_ms": 1.0}, "compile_error": "BackendCompilerFailed: x"})))
    assert failed["headroom_ms"] is None and "BackendCompilerFailed" in failed["not_measured"]
    broken = _figures(*_read(JobResult.of({"verdict": "runtime_error", "reason": "exception",
                                           "message": "the reference raised"})))
    assert broken["ms_compiled"] is None and broken["not_measured"] == "the reference raised"
    tasks = [{"task": "a.py", "left_to_compiler": False}, {"task": "b.py", "left_to_compiler": True},
             {"task": "c.py", "left_to_compiler": False}]
    assert [t["task"] for t in searched({"tasks": tasks}, 2)] == ["a.py", "c.py"]


def _rebuilds_every_site(folder, data, model_file):
    """Each task, built with each of its call sites' weights and given that site's inputs as the task
    takes them, returns the tensors of the site's output the model uses."""
    from kernelevo.evolution.drivers.parts.call import of, used

    module = load_task(model_file)
    torch.manual_seed(3)
    model, seen = build(module.model_cls, *module.init_args)
    recording = record(model, module.get_inputs(), "cpu", seen)
    for entry in data["tasks"]:
        task = load_task(folder / entry["task"])
        for call in entry["call_sites"]:
            site = recording.sites[call["path"]]
            spec, inputs = of(site.module.forward, site.args, site.kwargs, site.output, recording.unused_outputs(site))
            rebuilt = task.make_model()
            rebuilt.load_state_dict(site.module.state_dict())
            with torch.no_grad():
                got = rebuilt(*inputs)
            got = list(got) if isinstance(got, tuple) else [got]
            want = used(spec, site.output)
            assert len(got) == len(want) and all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want)), call


def test_torch_layers_copied_by_the_encoder_and_an_attention_call_become_tasks(tmp_path):
    data = split_model(MODELS / "encoder.py", tmp_path, "cpu", top=16)
    tasks = {t["task"]: t for t in data["tasks"]}
    layer = tasks["transformer_encoder_layer.py"]  # deep copies: no constructor ran for them
    assert layer["built_from"] == "a copy of an instance built in the constructor"
    assert [s["path"] for s in layer["call_sites"]] == ["encoder.layers.0", "encoder.layers.1", "encoder.layers.2"]
    assert "super().__init__(d_model, nhead, dim_feedforward, dropout, batch_first=batch_first)" in \
        (tmp_path / "transformer_encoder_layer.py").read_text()
    pool = tasks["multihead_attention.py"]  # query, then the tokens once as key and value; weights not asked
    assert pool["inputs"] == ["float32[8, 1, 64]", "float32[8, 64, 64]"] and "left_out" not in pool
    assert "        out = super().forward(query, key, key, need_weights=False)\n        return out[0]\n" in \
        (tmp_path / "multihead_attention.py").read_text()
    assert "drop (Dropout): does no work (returns its input unchanged, or a view of it); left out" in data["notes"]
    assert 0 < data["covered"] <= 1 and data["covered"] == pytest.approx(sum(t["share"] for t in tasks.values()), abs=1e-3)
    _rebuilds_every_site(tmp_path, data, MODELS / "encoder.py")


def test_an_lstm_built_with_keywords_is_a_task_returning_what_the_model_uses(tmp_path):
    data = split_model(MODELS / "recurrent.py", tmp_path, "cpu", top=16)
    lstm = data["tasks"][0]
    assert lstm["task"] == "lstm.py" and lstm["init"] == ["32", "32", "2", "True", "0.0"]
    assert lstm["inputs"] == ["float32[4, 48, 32]", "float32[2, 4, 32]", "float32[2, 4, 32]"]
    assert lstm["left_out"] == ["output[1][0]: float32[2, 4, 32]", "output[1][1]: float32[2, 4, 32]"]
    text = (tmp_path / "lstm.py").read_text()
    assert "super().__init__(args_0, args_1, args_2, batch_first=batch_first, dropout=dropout)" in text
    assert "        out = super().forward(input, (hx_0, hx_1))\n" in text and "        return out[0]\n" in text
    # the Linears around it take a few percent each: whether one makes the cut is timing, so covered is the sum
    assert 0 < data["covered"] <= 1 and data["covered"] == pytest.approx(sum(t["share"] for t in data["tasks"]), abs=1e-3)
    assert lstm["share"] == max(t["share"] for t in data["tasks"])
    _rebuilds_every_site(tmp_path, data, MODELS / "recurrent.py")


def test_a_part_counts_its_fastest_forward_and_a_parent_the_sum_of_its_parts():
    """Times per forward as a loaded machine gives them: each forward slowed somewhere else. The model's
    fastest whole forward (10 ms) was never clean; built from its fastest parts it is 7 ms, as unloaded.
    A container that is never called keeps its own time (none), whatever its children took."""
    import torch.nn as nn

    from kernelevo.evolution.drivers.parts.record import Site, _fastest_parts

    root, a, b, box, c = nn.Identity(), nn.Identity(), nn.Identity(), nn.Identity(), nn.Identity()
    sites = {"": Site("", root, calls=1, children=["a", "b", "box"]), "a": Site("a", a, calls=1),
             "b": Site("b", b, calls=1), "box": Site("box", box, children=["box.c"]), "box.c": Site("box.c", c, calls=1)}
    per_forward = {id(root): [10.0, 10.0, 10.0], id(a): [6.0, 3.0, 3.0], id(b): [3.0, 6.0, 3.0],
                   id(box): [0.0, 0.0, 0.0], id(c): [0.5, 0.4, 0.6]}
    assert _fastest_parts(sites, per_forward, "") == pytest.approx(1.0 + 3.0 + 3.0)  # root's own: 10-9, 10-9, 10-6
    assert (sites["a"].ms, sites["b"].ms, sites["box"].ms, sites["box.c"].ms) == (3.0, 3.0, 0.0, 0.4)


def test_parts_stop_at_the_share_of_time_asked(tmp_path):
    data = split_model(MODELS / "encoder.py", tmp_path, "cpu", top=2, cover=0.5)
    shares = [t["share"] for t in data["tasks"]]
    assert data["tasks"][0]["task"] == "transformer_encoder_layer.py" and data["covered"] == pytest.approx(sum(shares))
    assert sum(shares[:-1]) < 0.5 and (sum(shares) >= 0.5 or len(shares) == 2)  # the last one crossed it, or --top


OWN_FORWARD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Its time is in its own forward: a large matrix product written as a torch call, beside a small Linear;
    a branch on a tensor's value keeps the forward from being traced into regions."""
    def __init__(self, dim):
        super().__init__()
        self.small = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(dim, dim))

    def forward(self, x, y):
        big = (x @ self.w @ self.w).sum()
        if big > 0:
            big = big * 2
        return big + self.small(y).sum()


def get_inputs():
    return [torch.randn(384, 384), torch.randn(4, 8)]


def get_init_inputs():
    return [384]
'''


def test_a_split_short_of_its_cover_says_where_the_rest_goes(tmp_path):
    model = tmp_path / "own.py"
    model.write_text(OWN_FORWARD)
    data = split_model(model, tmp_path / "parts", "cpu", top=8, cover=0.9)
    assert [t["task"] for t in data["tasks"]] == ["linear.py"] and data["covered"] < 0.5
    assert data["notes"][0].startswith("the model's own forward (Model) is left as it is: its forward cannot be "
                                       "traced: TraceError: "), data["notes"]  # one line, and no crash
    assert len(data["notes"]) == 2 and "\n" not in data["notes"][0]
    assert data["rest"]["own_forwards"] > 0.5 and list(data["rest"]["own_by_module"]) == ["the model"], data["rest"]
    line = data["notes"][-1]
    assert line.startswith(f"covered {100 * data['covered']:.1f} % of the 90 % asked: ") and \
        "is in forwards' own torch calls outside any submodule (the model " in line, line
    assert line.endswith("most of it is the model's own forward: `kernelevo optimize` on the model file searches "
                         "it as one task"), line


def test_a_bf16_model_gives_bf16_tasks(tmp_path):
    source = (MODELS / "mlp_stack.py").read_text()
    source = source.replace("        self.head = GatedHead(dim, out, eps=1e-5)\n",
                            "        self.head = GatedHead(dim, out, eps=1e-5)\n        self.to(torch.bfloat16)\n")
    source = source.replace("torch.randn(8, 16, DIM)", "torch.randn(8, 16, DIM, dtype=torch.bfloat16)")
    model = tmp_path / "mlp_bf16.py"
    model.write_text(source)
    data = split_model(model, tmp_path / "parts", "cpu", top=8, cover=1.0)
    assert [t["task"] for t in data["tasks"]] == ["mlp_block.py", "gated_head.py"], data["notes"]
    for entry in data["tasks"]:
        assert "self.to(torch.bfloat16)" in (tmp_path / "parts" / entry["task"]).read_text()
        task = load_task(tmp_path / "parts" / entry["task"])
        with torch.no_grad():
            out = task.make_model()(*task.get_inputs())
        assert out.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in task.make_model().parameters())


UNUSED_ARGUMENT = '''
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim, drop_path=0.0, scale=1.0):
        super().__init__()
        self.drop_path = nn.Identity()  # the rate is taken and never used, as in Swin's blocks
        self.scale = scale
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.drop_path(self.lin(x)) * self.scale


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        rates = [0.0, 0.1, 0.2, 0.3]
        self.blocks = nn.ModuleList([Block(dim, drop_path=r) for r in rates] + [Block(dim, scale=0.5)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [32]
'''


def test_arguments_the_forward_never_uses_do_not_split_a_class(tmp_path):
    model = tmp_path / "unused.py"
    model.write_text(UNUSED_ARGUMENT)
    data = split_model(model, tmp_path / "parts", "cpu", top=8, cover=1.0)
    sites = sorted(tuple(s["path"] for s in t["call_sites"]) for t in data["tasks"])
    # four blocks differ only in a rate their forward never reads: one task; the scale is read: its own
    assert sites == [("blocks.0", "blocks.1", "blocks.2", "blocks.3"), ("blocks.4",)], data["tasks"]
