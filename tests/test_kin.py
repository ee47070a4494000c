"""Parts of one class built for other sizes (DenseNet's layers, each for its channel count) fold into one
task on the CPU: its file lists every call site's constructor arguments and input shapes in
get_call_sites() (which the judge checks a kernel at: test_generality), and the model assembled with
the task's kernel builds it at each site with that site's arguments and gives the original's outputs."""
import pytest
import torch

from conftest import FIXTURES, own_kernels_placed
from kernelevo.evolution.drivers.parts.drop_in import drop_in_text
from kernelevo.evolution.drivers.parts.split import split_model
from kernelevo.tasks import TaskError, load_module, load_task

DENSE = FIXTURES / "models" / "dense_growth.py"


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    out = tmp_path_factory.mktemp("dense")
    return out, split_model(DENSE, out, "cpu", top=8, cover=1.0)


def test_layers_built_for_other_sizes_fold_into_one_task_listing_every_site(dense):
    out, data = dense
    layer = next(t for t in data["tasks"] if t["class"] == "DenseLayer")
    assert len([t for t in data["tasks"] if t["class"] == "DenseLayer"]) == 1, data["tasks"]
    # the hottest site is the task's own construction and inputs; every site says which build it is
    sites = {s["path"]: s["built"] for s in layer["call_sites"]}
    assert set(sites) == {f"layers.{k}" for k in range(4)} and sorted(sites.values()) == [0, 1, 2, 3]
    task = load_task(out / layer["task"])
    assert {init for init, _ in task.call_sites} == {(64, 32), (96, 32), (128, 32), (160, 32)}
    assert task.call_sites[0] == (task.init_args, (tuple(task.get_inputs()[0].shape),))
    for path, k in sites.items():  # each site's build is its layer's in_features
        assert task.call_sites[k][0][0] == 64 + 32 * int(path.split(".")[1])
    assert layer["share"] == pytest.approx(sum(s["share"] for s in layer["call_sites"]), abs=1e-3)


def test_the_folded_task_is_placed_at_every_site_with_its_own_arguments(dense, tmp_path):
    out, data = dense
    layer = next(t for t in data["tasks"] if t["class"] == "DenseLayer")
    placed = own_kernels_placed(out, [layer["task"]])[0].placed
    assert sorted(init[0] for init, _ in placed.by_init()) == [64, 96, 128, 160]
    task = load_task(DENSE)
    module = load_module(drop_in_text(task.source, "dense_growth.py", [placed]), str(tmp_path / "a.py"), "candidate")
    torch.manual_seed(5)
    reference = task.make_model()
    live = task.make_model()
    live.load_state_dict(reference.state_dict())
    assert sorted(module.apply(live)) == [f"layers.{k}" for k in range(4)]
    assert [m.fc.in_features for m in live.layers] == [64, 96, 128, 160]
    x = task.get_inputs()[0]
    with torch.no_grad():
        assert torch.allclose(live(x), reference(x), atol=1e-5)
        assert torch.allclose(torch.compile(live, fullgraph=True)(x), reference(x), atol=1e-5)


def test_a_malformed_list_of_call_sites_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(DENSE.read_text() + "\n\ndef get_call_sites():\n    return [([64, 32, 4], [256, 64])]\n")
    with pytest.raises(TaskError, match=r"get_call_sites\(\) item 0 must be \(\[constructor arguments\]"):
        load_task(bad)


CONVS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = nn.Conv2d(8, 16, 3, padding=1)
        self.wider = nn.Conv2d(16, 24, 3, padding=1)
        self.point = nn.Conv2d(24, 24, 1)

    def forward(self, x):
        return self.point(self.wider(self.wide(x)))


def get_inputs():
    return [torch.randn(2, 8, 32, 32)]


def get_init_inputs():
    return []
"""


def test_only_parts_apart_in_sizes_fold_not_in_kernel_size(tmp_path):
    model = tmp_path / "convs.py"
    model.write_text(CONVS)
    data = split_model(model, tmp_path / "parts", "cpu", top=8, cover=1.0)
    convs = sorted(sorted(s["path"] for s in t["call_sites"]) for t in data["tasks"])
    assert convs == [["point"], ["wide", "wider"]], data["tasks"]


LAYERS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"DenseNet121's own form: each layer a Sequential of torch's modules, built for its channel count.\"\"\"
    def __init__(self, features, growth, depth):
        super().__init__()
        self.layers = nn.ModuleList([self._layer(features + k * growth, growth) for k in range(depth)])

    def _layer(self, c, growth):
        return nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, growth, 3, padding=1, bias=False))

    def forward(self, x):
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        return x


def get_inputs():
    return [torch.randn(2, 16, 16, 16)]


def get_init_inputs():
    return [16, 8, 4]
"""


def test_sizes_inside_module_arguments_become_the_folded_tasks_parameters(tmp_path):
    model = tmp_path / "layers.py"
    model.write_text(LAYERS)
    data = split_model(model, tmp_path / "parts", "cpu", top=8, cover=1.0)
    layer = next(t for t in data["tasks"] if t["class"] == "Sequential")
    # the hottest layer's (timed: whichever it is) are the task's own arguments, the others its call sites
    assert len(layer["call_sites"]) == 4 and len(layer["init"]) == 2, data["tasks"]
    text = (tmp_path / "parts" / layer["task"]).read_text()
    assert "def __init__(self, args_0_num_features, args_2_in_channels):" in text
    assert "nn.BatchNorm2d(args_0_num_features)" in text and "nn.Conv2d(args_2_in_channels, 8, 3" in text
    task = load_task(tmp_path / "parts" / layer["task"])
    assert sorted(init for init, _ in task.call_sites) == [(16, 16), (24, 24), (32, 32), (40, 40)]
    chosen = own_kernels_placed(tmp_path / "parts", [layer["task"]])
    whole = load_task(model)
    module = load_module(drop_in_text(whole.source, "layers.py", [chosen[0].placed]), str(tmp_path / "a.py"), "candidate")
    torch.manual_seed(6)
    reference = whole.make_model().eval()
    live = whole.make_model()
    live.load_state_dict(reference.state_dict())
    live.eval()
    assert sorted(module.apply(live)) == [f"layers.{k}" for k in range(4)]
    x = whole.get_inputs()[0]
    with torch.no_grad():
        assert torch.allclose(live(x), reference(x), atol=1e-5)
