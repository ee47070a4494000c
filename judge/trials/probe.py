"""Facts about a task that the judge learns once, before a search, from the reference alone.

`degenerate` warns when speedups on a task would mean nothing: the reference's output is
(near-)constant, or does not depend on its inputs, or on its weights. A kernel can then return
a stored answer, or skip the work, and still pass every correctness trial.

`task_kind` names the kind of computation (gemm, conv, reduction, elementwise, other) from the
aten ops one forward runs, as a key into `IMPLAUSIBLE_SPEEDUP`.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

from kernelevo.judge.trials import compare
from kernelevo.judge.trials import inputs as judge_inputs

# Speedups over eager above which the judge re-measures a candidate in a fresh process before
# believing it. Library GEMMs and convolutions already run near the hardware's peak; a fused
# kernel beats eager only by removing launches and round trips of the epilogue, so 4x is rare.
# Memory-bound work has more room: fusing a chain of N pointwise ops (or a reduction with its
# pre/post-processing) saves up to N round trips through memory, so 10x can be honest.
IMPLAUSIBLE_SPEEDUP: dict[str, float] = {"gemm": 4.0, "conv": 4.0, "reduction": 10.0,
                                          "elementwise": 10.0, "other": 10.0}

CONSTANT_RTOL = 1e-6  # std / mean magnitude below this: variation only in the last bits of float32
INSENSITIVE_RTOL = 1e-4  # relative L2 change between two draws below this: output ignores them
_WEIGHT_SEED_OFFSET = 104729  # redrawn weights must differ from those built under `seed`
_MEANINGLESS = "so speedups on this task mean nothing"


@dataclass(frozen=True)
class Warning:  # the judge's name for it; shadows the builtin only inside this module
    reason: str  # stable id: constant_output, input_insensitive, weight_insensitive
    message: str
    evidence: dict = field(default_factory=dict)


def degenerate(task_module: Any, model: Any, device: str, seed: int) -> list[Warning]:
    """Warnings about the reference (empty when healthy); at most three forwards.

    Never raises: a check that cannot run gives no warning. The passed model is left as it
    was (buffers a forward updates are restored; weights are redrawn on a copy).
    """
    import torch

    try:
        first, _ = judge_inputs.trial_inputs(task_module.get_inputs, 0, seed, device, "as given")
    except Exception:  # noqa: BLE001 - no inputs, nothing to judge
        return []
    # a forward may update buffers (batch-norm running stats): put them back afterwards
    saved = [(b, b.detach().clone()) for b in model.buffers()] if hasattr(model, "buffers") else []
    try:
        with torch.no_grad():
            base = _forward(model, first)
            if base is None:
                return []
            constant = _check_constant(base)
            if constant:  # a constant is trivially insensitive: the other warnings add nothing
                return [constant]
            found = [_guarded(_check_inputs, task_module, model, device, seed, first, base),
                     _guarded(_check_weights, model, first, base, seed)]
            return [w for w in found if w]
    except Exception:  # noqa: BLE001 - probing is advisory; the trials will report real errors
        return []
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)


def _guarded(check, *args) -> Warning | None:
    # a check that cannot run (inputs fail to draw, the copy runs out of memory) says nothing
    try:
        return check(*args)
    except Exception:  # noqa: BLE001
        return None


def _forward(model: Any, inputs: list) -> list | None:
    """Outputs as detached copies (a forward may return a view of a buffer), or None if any
    output is not a tensor or the forward fails."""
    import torch

    try:
        outs = compare.flatten(model(*judge_inputs.clone_inputs(inputs)))
    except Exception:  # noqa: BLE001
        return None
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        return None
    return [o.detach().clone() for o in outs]


def _as_float64(x: Any) -> Any:
    import torch

    return (torch.view_as_real(x) if x.is_complex() else x).double()


def _check_constant(outs: list) -> Warning | None:
    """Every output's spread is nothing next to its magnitude (all zeros included), or every
    output is NaN/inf. Scalars and empty outputs have no spread to judge, so they never count."""
    import torch

    if any(o.numel() < 2 for o in outs):
        return None
    worst = {"std": 0.0, "mean_abs": 0.0, "ratio": 0.0, "finite_fraction": 0.0}
    for o in outs:
        x = _as_float64(o).flatten()
        finite_mask = torch.isfinite(x)
        finite = x if bool(finite_mask.all()) else x[finite_mask]
        if finite.numel() == 0:
            continue  # all NaN/inf: nothing a kernel must reproduce beyond that
        std, mean_abs = float(finite.std(unbiased=False)), float(finite.abs().mean())
        if std > CONSTANT_RTOL * mean_abs:
            return None
        ratio = std / mean_abs if mean_abs > 0 else 0.0
        if ratio >= worst["ratio"]:
            worst = {"std": std, "mean_abs": mean_abs, "ratio": ratio,
                     "finite_fraction": finite.numel() / x.numel()}
    if worst["finite_fraction"] == 0.0:
        seen = "entirely NaN/inf"
    elif worst["mean_abs"] == 0.0:
        seen = "all zeros"
    else:
        seen = f"constant (std {worst['std']:.2g} against mean magnitude {worst['mean_abs']:.3g})"
    return Warning("constant_output", f"the reference's output is {seen}: a kernel can return it "
                   f"without computing anything and pass, {_MEANINGLESS}", worst)


def _relative_change(a: Any, b: Any) -> float:
    """How much output `b` differs from `a`: relative L2 for floats, the fraction of differing
    elements for integers (compared exactly); 1.0 where shape or NaN/inf placement differs."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return 1.0
    if a.numel() == 0:
        return 0.0
    if not (a.is_floating_point() or a.is_complex()):
        return float((a != b).double().mean())
    x, y = _as_float64(a), _as_float64(b)
    fx, fy = torch.isfinite(x), torch.isfinite(y)
    if not bool(fx.all() & fy.all()):  # masking costs more than the rest: only where needed
        if not torch.equal(fx, fy) or not torch.equal(x[~fx].nan_to_num(), y[~fy].nan_to_num()):
            return 1.0
        x, y = x[fx], y[fy]
    scale = max(float(x.norm()), float(y.norm()))
    return float((x - y).norm()) / scale if scale > 0 else 0.0


def _stored_answer_passes(base: list, other: list | None) -> float | None:
    """The change from `base` to `other` (the largest over outputs: one output that follows is
    work enough) when `base` would pass as the answer for `other`'s inputs; None otherwise.

    Below the threshold the judge's own comparison decides: its centered test still rejects a
    stored answer where a large mean hides variation that does follow (10 + 2e-4 x)."""
    if other is None or len(other) != len(base):
        return None
    change = max(_relative_change(a, b) for a, b in zip(base, other))
    if change >= INSENSITIVE_RTOL or isinstance(compare.compare(base, other), compare.Mismatch):
        return None
    return change


def _same_inputs(a: list, b: list) -> bool:
    import torch

    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
               else x is y for x, y in zip(a, b))


def _check_inputs(task_module: Any, model: Any, device: str, seed: int, first: list,
                  base: list) -> Warning | None:
    draw = judge_inputs.trial_inputs
    second, _ = draw(task_module.get_inputs, 1, seed, device, "as given")
    if _same_inputs(first, second):
        # get_inputs() ignores the seed (fixed inputs); the judge's uniform redraw still varies
        # them, so probe with that rather than with two identical draws
        second, _ = draw(task_module.get_inputs, 1, seed, device, "uniform")
        if _same_inputs(first, second):
            return None
    change = _stored_answer_passes(base, _forward(model, second))
    if change is None:
        return None
    return Warning("input_insensitive", "the reference's output hardly changes when its inputs "
                   f"change (relative difference {change:.1e} between two input draws): a kernel "
                   f"can return a constant and pass, {_MEANINGLESS}",
                   {"relative_difference": change, "threshold": INSENSITIVE_RTOL})


def _check_weights(model: Any, inputs: list, base: list, seed: int) -> Warning | None:
    if not any(p.is_floating_point() for p in model.parameters()):
        return None  # nothing learned to ignore
    try:
        twin = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - some modules hold handles that cannot be copied
        return None
    state = [t for t in (*twin.parameters(), *twin.buffers()) if t.is_floating_point()]
    _redraw(state, seed + _WEIGHT_SEED_OFFSET)
    change = _stored_answer_passes(base, _forward(twin, inputs))
    del twin
    if change is None:
        return None
    return Warning("weight_insensitive", "the reference's output hardly changes when its weights "
                   f"are redrawn (relative difference {change:.1e} after redrawing {len(state)} "
                   f"tensors): a kernel can skip the work the weights enter and pass, {_MEANINGLESS}",
                   {"relative_difference": change, "tensors_redrawn": len(state),
                    "threshold": INSENSITIVE_RTOL})


def _redraw(tensors: list, seed: int) -> None:
    """Replace each tensor with normal draws at its own RMS scale (1 where it is all zeros, as
    biases start); non-negative tensors (variances, gains) stay non-negative, as inputs do."""
    import torch

    for i, t in enumerate(tensors):
        gen = torch.Generator(device=t.device).manual_seed(seed + i)
        rms = float(t.double().square().mean().sqrt()) if t.numel() else 0.0
        fresh = torch.randn(t.shape, generator=gen, device=t.device, dtype=torch.float32)
        fresh = fresh * (rms if math.isfinite(rms) and rms > 0 else 1.0)
        t.copy_(fresh.abs() if bool((t >= 0).all()) else fresh)


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Op groups by aten base name (overload and in-place underscore dropped). Tags on the ops
# (pointwise, reduction, view) cover most of the rest without a list to keep up to date; the
# reduction list repeats tagged ones (sum, mean, ...) for torch versions without that tag.
_CONV = re.compile(r"(^|_)conv(\d|_|olution)")  # conv2d, _convolution, cudnn_convolution; not convert
_GEMM = _names("""mm addmm bmm baddbmm addbmm matmul linear einsum mv addmv dot vdot tensordot bilinear
    _trilinear _int_mm _scaled_mm _addmm_activation _weight_int4pack_mm _weight_int8pack_mm""")
_REDUCTION = _names("""sum mean nansum prod amax amin argmax argmin logsumexp norm linalg_vector_norm var
    std var_mean std_mean all any count_nonzero softmax _softmax _safe_softmax log_softmax _log_softmax
    cumsum cumprod logcumsumexp cummax cummin layer_norm native_layer_norm group_norm native_group_norm
    batch_norm native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training
    _batch_norm_with_update _batch_norm_no_update instance_norm rms_norm _fused_rms_norm median
    nanmedian mode kthvalue topk sort nll_loss_forward nll_loss2d_forward mse_loss l1_loss
    smooth_l1_loss huber_loss binary_cross_entropy kl_div cosine_similarity""")
# Ops that only allocate, fill, copy or rearrange memory: free to fuse into a pointwise kernel.
_MOVEMENT = _names("""copy _to_copy clone contiguous empty empty_like empty_strided new_empty
    new_empty_strided zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full fill
    zero scalar_tensor _unsafe_view reshape cat stack lift_fresh_copy resolve_conj resolve_neg
    _local_scalar_dense constant_pad_nd repeat flip roll bernoulli native_dropout dropout""")
_RANK = {"conv": 0, "gemm": 1, "reduction": 2, "elementwise": 3, "other": 4}


def _op_class(op: Any) -> str:
    import torch

    base = op.name().split("::")[-1].split(".")[0]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]  # in-place variant (add_, copy_, fill_) behaves as its functional form
    tags = set(getattr(op, "tags", ()))
    if _CONV.search(base):
        return "conv"
    if base in _GEMM or "attention" in base:
        return "gemm"
    if getattr(torch.Tag, "reduction", None) in tags:
        return "reduction"
    if torch.Tag.pointwise in tags or getattr(op, "is_view", False):
        return "elementwise"
    if base in _REDUCTION or "pool" in base:  # pooling reduces over windows
        return "reduction"
    return "elementwise" if base in _MOVEMENT or base.endswith("_copy") else "other"


def task_kind(model: Any, inputs: list, device: str) -> tuple[str, list[str]]:
    """(kind, aten op names in first-run order) of one forward under no_grad.

    Ops are seen below autograd through a dispatch mode, so composites appear as what they run
    (linear as t + addmm, softmax as _softmax). Precedence: conv > gemm > reduction >
    elementwise > other; a forward that runs no op at all counts as elementwise (a copy). A
    forward that fails gives ("other", []). The first convolution seen under a dispatch mode
    imports torch._dynamo: about 1 s once per process (6 s on a cold GPU machine).
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict = {}  # op overload -> None: an ordered set (max.dim reduces, max.other does not)

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.setdefault(func)
            return func(*args, **(kwargs or {}))

    try:
        args = judge_inputs.clone_inputs(judge_inputs.to_device(list(inputs), device))
        with torch.no_grad(), _Record():
            model(*args)
    except Exception:  # noqa: BLE001 - the kind is advisory
        return "other", []
    classes = [_op_class(op) for op in seen] or ["elementwise"]
    kind = min(classes, key=_RANK.__getitem__)
    if kind == "elementwise" and "other" in classes:
        kind = "other"  # elementwise means only pointwise and movement ops
    return kind, list(dict.fromkeys(op.name().split(".")[0] for op in seen))
