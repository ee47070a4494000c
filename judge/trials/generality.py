"""Weights and value ranges beyond the benchmark's own, so that "verified" means drop-in.

Redrawn weights: a module built under a seed has default-initialised parameters, and many of
them are trivial (a norm's weight 1 and bias 0). A kernel that drops an affine stage passes
on them and breaks as soon as trained weights are loaded. So one trial draws new values for
every floating parameter and buffer of the reference, copies them into the candidate, and
keeps them for the trials after it.

Large values: a kernel that is numerically fragile (a softmax without max subtraction, a
variance as E[x^2] - E[x]^2 of large numbers) passes on unit normals and fails on inputs the
reference handles. So one trial scales and shifts the inputs by the largest factor for which
the reference's own output stays finite.

Opposed scales: a float32 product done in lower precision with a shared scale per row (the fp16 three-product
split of the KernelBench sample's 1_Square reply, 3.9x torch.compile on an H200) is as accurate as float32 wherever
each row's large elements carry its products, which every independent draw gives. Where a column of A and the row of
B it meets are scaled by opposite powers of two (outlier channels, and the weights that compensate them), a row's
small elements carry as much as its large ones, and such a kernel loses them (benchmarks/split_gemm_range.py:
4.5e-2 against float32's 1.2e-7). The products, and so a matrix product's exact answer, do not change, and a float32
kernel in any order of summation meets them as the reference does. So where two inputs share a contracted
dimension (A's last and B's second to last, or both last), one trial scales them so.

At those magnitudes some problems are ill-conditioned: attention scores of 1e7 make softmax an
argmax among near-ties, and an honest kernel that sums in another order picks another key. The
answer there is not defined to float32 precision, so that trial allows each output element the
change that moving every input by a few float32 roundings makes in the exact output.
"""
from __future__ import annotations

from typing import Any, Callable

SCALES = (1024.0, 256.0, 64.0, 16.0)  # tried largest first: inputs become scale * (x + std(x))
_WEIGHT_SEED = 15485863  # redrawn weights are drawn from a generator of their own
# An honest float32 kernel computes the exact answer of inputs moved by a few roundings each
# (backward error): 16 eps covers the reduction orders of kernels of a few hundred terms. The
# largest change over two draws, times 4, is what an element may differ by beyond the tolerance.
SPREAD_EPS, SPREAD_DRAWS, SPREAD_FACTOR = 16, 2, 4.0
OPPOSED_EXPONENTS = (20, 8)  # tried widest first: 2^k and 2^-k along the shared dimension, k uniform in [-w, w]
_OPPOSED_SEED = 49979687
_SPREAD_SEED = 32452843


def _state(model) -> dict[str, Any]:
    return model.state_dict(keep_vars=True) if model is not None else {}


def value_twins(reference, candidate) -> dict[str, str]:
    """Candidate tensors that are not named like a reference tensor but hold exactly its values,
    as built under the shared seed (candidate name -> reference name); taken before anything
    runs, so that redrawn weights reach a candidate that renamed its parameters."""
    import torch

    ref = {k: v for k, v in _state(reference).items() if isinstance(v, torch.Tensor)}
    cand = _state(candidate)
    taken: set[str] = set()
    twins = {}
    for name, tensor in cand.items():
        if name in ref or not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            continue
        for ref_name, ref_tensor in ref.items():
            if ref_name not in taken and ref_name not in cand and ref_tensor.shape == tensor.shape \
                    and ref_tensor.dtype == tensor.dtype and ref_tensor.device == tensor.device \
                    and torch.equal(ref_tensor.detach(), tensor.detach()):
                twins[name] = ref_name
                taken.add(ref_name)
                break
    return twins


def _is_mask(tensor) -> bool:
    """A buffer of only 0s and 1s, both present (a causal mask): structure, not a weight. Kernels
    that implement the structure directly are right, so it is never redrawn."""
    return bool(((tensor == 0) | (tensor == 1)).all()) and bool((tensor == 0).any()) and bool((tensor == 1).any())


def _redrawn(tensor, generator):
    """New values in the tensor's own character: a signed tensor gets a fresh normal draw with its
    mean and spread; a non-negative one (variances, scales) is scaled elementwise by 0.5..1.5; a
    constant one (a norm's ones, a zero bias) is perturbed around its value."""
    import torch

    x = tensor.detach().double()
    gen = generator(x.device)
    noise = torch.randn(x.shape, generator=gen, dtype=torch.float64, device=x.device)
    factor = torch.rand(x.shape, generator=gen, dtype=torch.float64, device=x.device) + 0.5
    std = float(x.std()) if x.numel() > 1 else 0.0
    if std == 0.0:
        value = float(x.flatten()[0])
        new = value * factor if value != 0.0 else 0.5 * noise
    elif float(x.min()) >= 0:
        new = x * factor
    else:
        new = float(x.mean()) + std * noise
    return new.to(tensor.dtype)


def redraw(reference, candidate, twins: dict[str, str], seed: int) -> tuple[dict[str, Any], list[str]]:
    """Draw new values for the reference's floating parameters and buffers and copy them into the
    candidate (by name, else by `twins`). Returns the values before (to undo) and a note."""
    import torch

    # Drawn on the weights' own device: a 4096x4096 weight drawn on the host in float64 and copied
    # over cost 0.1 s of held GPU time (H100).
    gens: dict = {}

    def generator(device):
        return gens.get(device) or gens.setdefault(device, torch.Generator(device=device).manual_seed(seed + _WEIGHT_SEED))

    ref_state, cand_state = _state(reference), _state(candidate)
    by_ref = {ref_name: name for name, ref_name in twins.items()}
    params = {name for name, _ in reference.named_parameters()}
    saved, skipped = {}, []
    with torch.no_grad():
        for name, tensor in ref_state.items():
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point() or not tensor.numel():
                continue
            if name not in params and _is_mask(tensor):
                skipped.append(name)
                continue
            saved[name] = tensor.detach().clone()
            tensor.copy_(_redrawn(tensor, generator))
            _copy_into(cand_state.get(name) if name in cand_state else cand_state.get(by_ref.get(name, "")), tensor)
    note = f"redrew {len(saved)} floating parameters and buffers of the reference"
    if skipped:
        note += f" (kept {len(skipped)} 0/1 mask buffers: {', '.join(skipped[:3])})"
    return saved, [note]


def restore(reference, candidate, twins: dict[str, str], saved: dict[str, Any]) -> None:
    """Put the weights `redraw` replaced back, in both models."""
    import torch

    ref_state, cand_state = _state(reference), _state(candidate)
    by_ref = {ref_name: name for name, ref_name in twins.items()}
    with torch.no_grad():
        for name, value in saved.items():
            ref_state[name].copy_(value)
            _copy_into(cand_state.get(name) if name in cand_state else cand_state.get(by_ref.get(name, "")), value)


def _copy_into(target, value) -> None:
    """`value` into the candidate's tensor of the same name, reshaped where only the layout differs
    (a Conv1d weight kept as the batched-matmul weight it is: same elements, same order)."""
    import torch

    if isinstance(target, torch.Tensor) and target.numel() == value.numel():
        target.copy_(value.reshape(target.shape))


def large_values(args: list, finite: Callable[[list], bool]) -> tuple[list, str] | None:
    """`args` scaled and shifted by the largest of SCALES for which `finite` (the reference's
    output on them is finite) holds, with a label saying the range; None if none does. Inputs
    with a structure the task promises (inputs.structured) are scaled, not shifted."""
    import torch

    from kernelevo.judge.trials.inputs import structured

    for scale in SCALES:
        moved = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
                std = float(a.float().std()) if a.numel() > 1 and not structured(a) else 0.0
                a = (a * scale + scale * std).to(a.dtype)
            moved.append(a)
        floats = [a for a in moved if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()]
        if not floats or not all(bool(torch.isfinite(a).all()) for a in floats):
            continue
        if finite(moved):
            top = max(float(a.abs().max()) for a in floats)
            return moved, f"large values: inputs x{scale:g} shifted by {scale:g} std, |x| up to {top:.3g}"
    return None


def _shared_dimension(args: list) -> tuple[int, int, int] | None:
    """(i, j, dim of j) for the first two floating inputs that can meet in a matrix product: input i's last
    dimension against input j's second to last (A @ B), else against its last (A @ B.T, as attention's q and k)."""
    import torch

    from kernelevo.judge.trials.inputs import structured

    usable = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()
              and a.dim() >= 2 and a.numel() and not structured(a)]
    for dim in (-2, -1):
        for i in usable:
            for j in usable:
                if i != j and args[i].shape[-1] == args[j].shape[dim] > 1:
                    return i, j, dim
    return None


def opposed_scales(args: list, finite: Callable[[list], bool]) -> tuple[list, str] | None:
    """`args` with input i's last dimension scaled by 2^k and input j's matching dimension by 2^-k (k one integer
    per index, uniform in [-w, w], for the widest w of OPPOSED_EXPONENTS on which `finite` holds), with a label;
    None where no two inputs share such a dimension or the reference's output is not finite."""
    import torch

    found = _shared_dimension(args)
    if found is None:
        return None
    i, j, dim = found
    gen = torch.Generator(device=args[i].device).manual_seed(_OPPOSED_SEED)
    for w in OPPOSED_EXPONENTS:
        k = torch.randint(-w, w + 1, (args[i].shape[-1],), generator=gen, device=args[i].device)
        moved = list(args)
        moved[i] = torch.ldexp(args[i], k.to(args[i].dtype)).to(args[i].dtype)  # exact: powers of two
        against = (-k).to(args[j].device, args[j].dtype)
        moved[j] = torch.ldexp(args[j], against if dim == -1 else against[:, None]).to(args[j].dtype)
        if all(bool(torch.isfinite(moved[x]).all()) for x in (i, j)) and finite(moved):
            return moved, (f"opposed scales: input {i + 1}'s last dimension x2^k, input {j + 1}'s matching one x2^-k, "
                           f"k in [-{w}, {w}]")
    return None


def conditioning_slack(forward: Callable[[list], Any], args: list, exact) -> list | None:
    """Per output tensor, how far `exact` (forward's output on `args`) moves when every floating
    input element is moved by up to SPREAD_EPS float32 roundings (SPREAD_FACTOR times the largest
    change over SPREAD_DRAWS draws); None where forward's outputs do not line up with `exact`."""
    import torch

    from kernelevo.judge.trials.compare import flatten

    want = flatten(exact)
    slack = [torch.zeros_like(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else None for t in want]
    # Drawn where the inputs are: 16M float64 draws on the host and their copy cost 0.2 s a trial (H100).
    gens: dict = {}
    u = SPREAD_EPS * torch.finfo(torch.float32).eps
    for _ in range(SPREAD_DRAWS):
        moved = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
                gen = gens.get(a.device) or gens.setdefault(
                    a.device, torch.Generator(device=a.device).manual_seed(_SPREAD_SEED))
                noise = torch.rand(a.shape, generator=gen, dtype=torch.float64, device=a.device)
                a = (a.double() * (1 + u * (2 * noise - 1))).to(a.dtype)
            moved.append(a)
        got = flatten(forward(moved))
        if len(got) != len(want):
            return None
        for i, (g, w) in enumerate(zip(got, want)):
            if slack[i] is not None and isinstance(g, torch.Tensor) and g.shape == w.shape:
                change = (g.to(w.dtype) - w).abs().nan_to_num(0.0, 0.0, 0.0)
                slack[i] = torch.maximum(slack[i], change)
    return [s * SPREAD_FACTOR if s is not None else None for s in slack]
