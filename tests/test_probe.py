"""The probe: degenerate references are flagged with the right reason, healthy ones are not,
and the starter tasks get the kind their ops say."""
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES, ROOT
from kernelevo.judge.trials import inputs, probe
from torch import nn

from kernelevo.tasks import load_module

PROBE = FIXTURES / "probe"
STARTERS = ROOT / "benchmarks" / "tasks"
SEED = 1234
# Dimensions above this are cut to it in the starter tasks: at full size the probe took about
# 5 s on two CPU cores (16M-element outputs in float64), too slow for the fast suite.
CAP = 64


def _load(path: Path, cap: int | None = None):
    module = load_module(path.read_text(), str(path))
    if cap:
        for name, value in list(vars(module).items()):
            if name.isupper() and type(value) is int and value > cap:
                setattr(module, name, cap)  # get_inputs/get_init_inputs read these at call time
    inputs.seed_all(SEED)
    return module, module.Model(*module.get_init_inputs())


def _reasons(path: Path, cap: int | None = None) -> list:
    module, model = _load(path, cap)
    return probe.degenerate(module, model, "cpu", SEED)


@pytest.mark.parametrize("name", ["constant.py", "zeros.py", "all_nan.py"])
def test_constant_output(name):
    warnings = _reasons(PROBE / name)
    assert [w.reason for w in warnings] == ["constant_output"]  # not also input_insensitive
    evidence = warnings[0].evidence
    assert evidence["ratio"] < probe.CONSTANT_RTOL
    assert evidence["finite_fraction"] == (0.0 if name == "all_nan.py" else 1.0)
    assert "\n" not in warnings[0].message and "mean nothing" in warnings[0].message


def test_constant_message_names_what_was_seen():
    assert "all zeros" in _reasons(PROBE / "zeros.py")[0].message
    assert "NaN/inf" in _reasons(PROBE / "all_nan.py")[0].message
    assert _reasons(PROBE / "constant.py")[0].evidence["mean_abs"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["input_insensitive.py", "fixed_inputs_ignored.py"])
def test_input_insensitive(name):
    warnings = _reasons(PROBE / name)
    assert [w.reason for w in warnings] == ["input_insensitive"]  # the weights do matter
    assert warnings[0].evidence["relative_difference"] < probe.INSENSITIVE_RTOL
    assert "inputs change" in warnings[0].message


# sign_gate: redrawn weights keep the sign of non-negative ones (as the judge's inputs keep
# their domain), so a gain that only enters through its sign is found irrelevant
@pytest.mark.parametrize("name", ["weight_insensitive.py", "sign_gate.py"])
def test_weight_insensitive(name):
    warnings = _reasons(PROBE / name)
    assert [w.reason for w in warnings] == ["weight_insensitive"]
    assert warnings[0].evidence["relative_difference"] < probe.INSENSITIVE_RTOL
    assert warnings[0].evidence["tensors_redrawn"] == 1


@pytest.mark.parametrize("path", [FIXTURES / "cpu" / "task_scale.py", PROBE / "batchnorm.py",
                                  PROBE / "scalar_loss.py", PROBE / "argmax.py",
                                  PROBE / "fixed_inputs.py",
                                  # its mean dwarfs its variation, but the judge's centered
                                  # test still rejects a stored answer: not degenerate
                                  FIXTURES / "cpu" / "task_offset.py"],
                         ids=lambda p: p.stem)
def test_healthy_fixtures_give_no_warnings(path):
    assert _reasons(path) == []


def test_broken_reference_gives_no_warnings():
    assert _reasons(PROBE / "raises.py") == []

    class NoInputs:
        @staticmethod
        def get_inputs():
            raise ValueError("no inputs")

    assert probe.degenerate(NoInputs, nn.Identity(), "cpu", SEED) == []


def test_passed_model_is_left_as_it_was():
    module, model = _load(PROBE / "batchnorm.py")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert probe.degenerate(module, model, "cpu", SEED) == []
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # running stats restored too


STARTER_KINDS = {
    "conv2d_relu": "conv",
    "device_copy": "elementwise",  # clone: movement only
    "diag_matmul": "gemm",  # diag_embed then mm
    "elementwise_chain": "elementwise",
    "gemm_bias_gelu": "gemm",
    "layernorm": "reduction",
    "row_softmax": "reduction",
    "small_attention": "gemm",  # bmm, softmax, bmm
    "sum_reduction": "reduction",
}


def test_starter_tasks_are_listed():
    assert sorted(p.stem for p in STARTERS.glob("*.py")) == sorted(STARTER_KINDS)


@pytest.mark.parametrize("name", sorted(STARTER_KINDS))
def test_starter_task(name):
    module, model = _load(STARTERS / f"{name}.py", CAP)
    assert probe.degenerate(module, model, "cpu", SEED) == []
    drawn, _ = inputs.trial_inputs(module.get_inputs, 0, SEED, "cpu", "as given")
    kind, ops = probe.task_kind(model, drawn, "cpu")
    assert kind == STARTER_KINDS[name], ops
    assert ops and all(op.startswith("aten::") for op in ops)


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


X = torch.randn(2, 3, 8, 8)


@pytest.mark.parametrize("fn, kind", [
    (lambda x: torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3)) @ torch.randn(6, 6), "conv"),
    (lambda x: torch.softmax(x @ x.transpose(-1, -2), -1), "gemm"),
    (lambda x: torch.nn.functional.scaled_dot_product_attention(x, x, x), "gemm"),
    (lambda x: torch.einsum("bcij,bcjk->bcik", x, x), "gemm"),
    (lambda x: x.amax(dim=-1) + 1, "reduction"),
    (lambda x: torch.max(x, dim=1).values, "reduction"),
    (lambda x: torch.nn.functional.avg_pool2d(x, 2), "reduction"),
    (lambda x: torch.maximum(x, x.flip(0)).reshape(-1).contiguous(), "elementwise"),
    (lambda x: torch.where(x > 0, x, torch.zeros_like(x)).permute(0, 2, 3, 1), "elementwise"),
    (lambda x: torch.cat([x, x]).clone(), "elementwise"),
    (lambda x: x.flatten()[torch.tensor([3, 1, 2])], "other"),
    (lambda x: torch.gather(x, -1, torch.zeros_like(x, dtype=torch.long)) * 2, "other"),
])
def test_task_kind(fn, kind):
    assert probe.task_kind(_Lambda(fn), [X], "cpu")[0] == kind


def test_task_kind_of_a_failing_forward_is_other():
    assert probe.task_kind(_Lambda(lambda x: x.no_such_method()), [X], "cpu") == ("other", [])


def test_every_kind_has_a_threshold():
    assert set(probe.IMPLAUSIBLE_SPEEDUP) == {"gemm", "conv", "reduction", "elementwise", "other"}
    assert probe.IMPLAUSIBLE_SPEEDUP["gemm"] < probe.IMPLAUSIBLE_SPEEDUP["elementwise"]
