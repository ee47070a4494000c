"""Block granularity on the CPU: a forward traced through its submodules is cut at its residual joins
(a pre-norm layer into its attention block and its MLP block, a post-norm layer likewise, a chain of
layers stays one block); `split --granularity block` writes each block as a task of every layer, which
gives back what the model computed there; and the model assembled with every block in place gives the
original's outputs, in eager and under torch.compile, and its own forward on other shapes."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import FIXTURES, own_kernels_placed
from kernelevo.evolution.drivers.parts.drop_in import drop_in_text
from kernelevo.evolution.drivers.parts.region_cut import blocks
from kernelevo.evolution.drivers.parts.region_file import character_text, unscaled
from kernelevo.evolution.drivers.parts.split import split_model
from kernelevo.tasks import load_module, load_task

STACK = FIXTURES / "models" / "prenorm_stack.py"


class _Tracer(torch.fx.Tracer):
    def is_leaf_module(self, m, qualname) -> bool:  # through every submodule, as block granularity traces
        return False


def _cut(module: nn.Module) -> list[list[str]]:
    graph = _Tracer().trace(module)
    return [[n.name for n in block] for block in blocks(graph)]


class PreNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(8), nn.LayerNorm(8)
        self.attn, self.up, self.down = nn.Linear(8, 8), nn.Linear(8, 32), nn.Linear(32, 8)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class PostNorm(PreNorm):
    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.down(F.relu(self.up(x))))


def test_a_prenorm_layer_is_cut_into_its_attention_and_mlp_blocks():
    assert _cut(PreNorm()) == [["layer_norm", "linear", "add"], ["layer_norm_1", "linear_1", "gelu", "linear_2", "add_1"]]


def test_a_postnorm_layer_keeps_each_norm_with_the_block_it_closes():
    assert _cut(PostNorm()) == [["linear", "add", "layer_norm"], ["linear_1", "relu", "linear_2", "add_1", "layer_norm_1"]]


def test_a_chain_without_residuals_is_one_block():
    chain = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8), nn.LayerNorm(8))
    assert len(_cut(chain)) == 1


def test_a_weight_is_written_as_a_draw_of_its_own_mean_and_spread():
    """A Linear's small signed weights, a trained norm's scale near one, a non-negative buffer spread from
    zero, a shifted one: each written draw has the tensor's mean and spread, and a non-negative tensor's
    stays non-negative; texts that differ only in those figures are one text unscaled."""
    torch.manual_seed(0)
    for t in (torch.randn(4096) * 0.02, 1.0 + 0.05 * torch.randn(4096), torch.rand(4096) * 3, -2 + 0.1 * torch.randn(4096)):
        text = character_text(t)
        drawn = eval(text, {"torch": torch})  # noqa: S307 - the text this module writes into task files
        assert drawn.shape == t.shape and drawn.dtype == t.dtype, text
        assert abs(float(drawn.mean() - t.mean())) <= 0.1 * float(t.std()) + 0.02 * abs(float(t.mean())), text
        assert abs(float(drawn.std() - t.std())) <= 0.1 * float(t.std()), text
        assert float(t.min()) < 0 or float(drawn.min()) >= 0, text
        assert unscaled(text) == unscaled(character_text(t * 1.3)), text


def test_split_at_block_granularity_writes_each_block_of_every_layer(tmp_path):
    data = split_model(STACK, tmp_path, "cpu", top=8, cover=1.0, granularity="block")
    assert data["notes"] == ["layers.0 (Layer): cut into 2 residual blocks"], data["notes"]
    blocks_ = [t for t in data["tasks"] if t["built_from"] == "a residual block of its forward"]
    assert sorted(t["task"] for t in blocks_) == ["layer_part1.py", "layer_part2.py"]
    for task in blocks_:
        assert [s["path"] for s in task["call_sites"]] == ["layers.0", "layers.1", "layers.2"]
        assert task["inputs"] == ["float32[4, 64, 64]"] and task["checked"].startswith("gives back"), task
    attention = next(t for t in blocks_ if "scaled_dot_product_attention" in t["region"]["nodes"])
    assert attention["region"]["nodes"][0] == "layer_norm" and attention["region"]["nodes"][-1] == "add"
    assert ["attn_qkv_weight", "attn.qkv.weight"] in attention["region"]["tensors"]
    mlp = next(t for t in blocks_ if t is not attention)
    assert {"linear_2", "gelu", "linear_3", "add_1"} <= set(mlp["region"]["nodes"])
    # the blocks share out their layers' time (timed alone, scaled to the layer's): no layer's time is left over
    assert all(s["ms"] > 0 for t in blocks_ for s in t["call_sites"])
    assert attention["task"] == "layer_part1.py" and mlp["task"] == "layer_part2.py"  # in the forward's order
    text = (tmp_path / "layer_part2.py").read_text()
    assert "split --granularity block" in text and "def get_init_inputs():\n    return []\n" in text
    # Weights are drawn at the model's scale, not a unit normal (which saturates the attention's
    # softmax), and its three layers are one task though their weights' spreads round apart.
    built, model = load_task(tmp_path / "layer_part1.py").make_model(), load_task(STACK).make_model()
    pairs = ((built.attn_qkv_weight, model.layers[0].attn.qkv.weight), (built.norm1_weight, model.layers[0].norm1.weight))
    for mine, theirs in ((a.detach(), b.detach()) for a, b in pairs):
        assert abs(float(mine.std()) - float(theirs.std())) <= 0.25 * float(theirs.std()) + 1e-6, (mine.std(), theirs.std())
        assert abs(float(mine.mean()) - float(theirs.mean())) <= 0.1 * float(theirs.abs().mean()) + 0.01


def test_the_model_with_every_block_in_place_is_the_original(tmp_path):
    """Each block task placed with its own reference code as the kernel: the rewritten layers are the
    model's, in eager and as custom ops under torch.compile, and read the model's weights as they are."""
    data = split_model(STACK, tmp_path / "parts", "cpu", top=8, cover=1.0, granularity="block")
    names = [t["task"] for t in data["tasks"] if "region" in t]
    chosen = own_kernels_placed(tmp_path / "parts", names)
    assert sorted(c.placed.name for c in chosen) == sorted(n[:-3] for n in names)
    task = load_task(STACK)
    module = load_module(drop_in_text(task.source, "prenorm_stack.py", [c.placed for c in chosen]),
                         str(tmp_path / "assembled.py"), "candidate")
    torch.manual_seed(4)
    reference = task.make_model()
    live = task.make_model()
    live.load_state_dict(reference.state_dict())
    assert sorted(module.apply(live)) == sorted(f"layers.{k}:{n[:-3]}" for k in range(3) for n in names)
    runs = []
    for name in names:
        run = getattr(module, f"_run_{name[:-3]}")
        setattr(module, f"_run_{name[:-3]}", lambda *args, f=run, n=name: runs.append(n) or f(*args))
    x, other = task.get_inputs()[0], torch.randn(2, 64, 64)
    with torch.no_grad():
        assert torch.allclose(live(x), reference(x), atol=1e-5) and len(runs) == 6
        assert torch.equal(live(other), reference(other)) and len(runs) == 6  # another batch: its own forward
        for m in (reference, live):  # weights changed after apply: the kernels read the model's
            m.layers[1].attn.qkv.weight.mul_(0.5)
        assert torch.allclose(live(x), reference(x), atol=1e-5)
        compiled = torch.compile(live, fullgraph=True)
        assert torch.allclose(compiled(x), reference(x), atol=1e-5) and len(runs) > 12
