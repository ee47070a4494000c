"""Inputs and weights for correctness trials.

Every trial draws fresh inputs from the task's own `get_inputs()` under a new seed, then reshapes
their distribution (scaled up, scaled down, shifted, uniform) so that a kernel must compute the
same function on any valid input, not just on unit normals. Non-negative inputs stay
non-negative (logs, square roots and probabilities keep their domain); integer inputs are only
redrawn. Inputs with a structure the task promises (a fixed pattern of zeros, as in a triangular
matrix, or symmetry) are only scaled: a shift or a uniform redraw would break what a kernel may
rightly rely on (a triangular product skips the zero half).
"""
from __future__ import annotations

from typing import Any

TRANSFORMS = ("as given", "scaled x8", "scaled x1/8", "shifted", "uniform")


def seed_all(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass


def to_device(inputs: list, device) -> list:
    """Move tensors to the judged device (KernelBench tasks create them on the CPU)."""
    import torch

    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _transform(x, kind: str, generator):
    import torch

    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0 or kind == "as given":
        return x
    lo, hi = float(x.min()), float(x.max())
    if kind == "scaled x8":
        return x * 8
    if kind == "scaled x1/8":
        return x / 8
    if kind == "shifted":
        std = float(x.float().std()) if x.numel() > 1 else 1.0
        return x + (0.5 if lo >= 0 else 2.0) * (std or 1.0)
    if kind == "uniform":
        u = torch.rand(x.shape, generator=generator, dtype=torch.float32, device=x.device)
        return (lo + (hi - lo) * u).to(x.dtype)
    raise ValueError(kind)


def draw(get_inputs, device) -> list:
    """get_inputs() with torch's factories defaulting to `device`: drawing 16M random numbers
    on the CPU and copying them took ~0.1 s a trial; on the GPU it is free. Tasks that insist
    on the CPU (numpy, explicit devices) still work: their tensors are moved afterwards."""
    import torch

    try:
        with torch.device(device):
            raw = get_inputs()
    except Exception:  # noqa: BLE001 - a task written for CPU factories only
        raw = get_inputs()
    return to_device(list(raw), device)


def structured(x) -> bool:
    """A floating tensor whose zeros form a pattern (over 1 % exact zeros: triangular, masked) or a
    symmetric matrix: only a transform that keeps the structure may be applied."""
    import torch

    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() < 2:
        return False
    if x.numel() - int(torch.count_nonzero(x)) > 0.01 * x.numel():  # one pass, no temporary copy
        return True
    # a square matrix: a single off-diagonal pair settles most asymmetric ones without a full pass
    return x.dim() >= 2 and x.shape[-1] == x.shape[-2] > 1 and bool((x[..., 0, 1] == x[..., 1, 0]).all()) \
        and torch.equal(x, x.transpose(-1, -2))


def trial_inputs(get_inputs, trial: int, seed: int, device, transform: str | None = None) -> tuple[list, str]:
    """Fresh inputs for one trial, and the name of the transform applied."""
    import torch

    seed_all(seed + 7919 * trial)
    raw = draw(get_inputs, device)
    kind = transform or TRANSFORMS[trial % len(TRANSFORMS)]
    if kind in ("shifted", "uniform") and any(structured(x) for x in raw):
        kind = "as given"  # a structure the task promises: scale it, never shift or redraw it
    generator = torch.Generator(device=device).manual_seed(seed + trial)
    return [_transform(x, kind, generator) for x in raw], kind


def shuffled(args: list) -> list:
    """Copies of `args`, each floating tensor's values moved one place along (structured ones as they
    are): what the reference is probed on before a trial (does it run, is its output finite?). Its
    output for the trial's very inputs must not exist before the candidate runs: left in freed
    memory, it could give an output the candidate never writes the right values. A roll costs one
    copy on the tensor's own device, where a random permutation of a large input would not."""
    import torch

    return [a.reshape(-1).roll(1).reshape(a.shape)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 1 and not structured(a)
            else a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def refill(work: list, sources: list[list], k: int) -> None:
    """New values in the same tensors: the k-th source set, scaled by a k-dependent factor (k = 0:
    the first set as it is, the same values every time). The fresh-values check's inputs (measure/crosscheck.py),
    drawn again by the checker from the same sources to compare its last output."""
    import torch

    for w, s in zip(work, sources[k % len(sources)]):
        if isinstance(w, torch.Tensor) and w.shape == s.shape:
            w.copy_(s)
            if w.is_floating_point():
                w.mul_(1 + 0.01 * k)


def clone_inputs(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def to_float64(inputs: list) -> list:
    import torch

    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


def build_models(model_cls, candidate_cls, init_args: tuple, seed: int, device) -> tuple[Any, Any, str]:
    """Construct reference and candidate under the same seed, then copy matching weights.

    Returns (reference, candidate, note). Seeding both constructions alike is KernelBench's
    convention; copying by name and shape makes weights identical even where the candidate
    creates its layers in another order.
    """
    seed_all(seed)
    reference = model_cls(*init_args)
    seed_all(seed)
    candidate = candidate_cls(*init_args)
    note = copy_weights(reference, candidate)
    return reference.to(device), candidate.to(device), note


def copy_weights(reference, candidate) -> str:
    import torch

    ref_state = reference.state_dict()
    cand_state = candidate.state_dict()
    matched = {k: v for k, v in ref_state.items() if k in cand_state and cand_state[k].shape == v.shape}
    with torch.no_grad():
        candidate.load_state_dict(matched, strict=False)
    missing = len(ref_state) - len(matched)
    if not ref_state:
        return "reference has no weights"
    if missing:
        return (f"copied {len(matched)} of {len(ref_state)} reference weights by name; "
                f"the other {missing} rely on the shared seed")
    return f"copied all {len(ref_state)} reference weights by name"
