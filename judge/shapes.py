"""Other valid shapes for a task, derived by the judge itself, so that "verified" means drop-in.

A kernel written against `get_inputs()` alone often works only there: full tiles and no tail
handling, sizes baked in as constants, grids computed for one size. So besides the task's own
shapes the candidate is checked on inputs whose leading dimension and one or two inner
dimensions are changed to odd primes (never a multiple of 2, 8, 16, 32 or 64): 16 -> 13,
4096 -> 4093, 16384 -> 16381, 2 -> 3.

A dimension is changed as a symbol: every input dimension of the same size changes with it (a
matmul's shared K in both operands), falling back to fewer places when the reference rejects
that. A variant is kept only where the reference runs on it: checked first on the meta device
(shapes only: no memory, no kernels, so an invalid variant cannot leave a CUDA error behind),
else on a copy of the reference. Integer inputs that could index a shrunk dimension veto it, and so
does a size that is also a constructor argument: the module was built for it (RMSNorm(64) takes
inputs of 64 features even where its forward would run on 61), so changing it alone is not a valid
input for that module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

MAX_VARIANTS = 3  # the leading dimension and up to two inner ones
MAX_INNER_TRIES = 4  # inner sizes tried before giving up
MIN_BYTES_BOUND = 64 << 20  # a variant may always use this much input memory
GROWTH_BOUND = 1.25  # ... or this factor of the task's own inputs


@dataclass(frozen=True)
class Variant:
    label: str  # e.g. "leading dimension 16 -> 13"
    args: list  # inputs on the device, drawn fresh
    shapes: str  # e.g. "float32[13, 16384]"


def other_size(n: int) -> int | None:
    """The size a dimension of size `n` is changed to: the largest odd prime below it, or the next
    one above for tiny sizes; None for size 1 (a broadcast or keepdim axis, not a size to vary)."""
    if n <= 1:
        return None
    if n <= 4:
        return {2: 3, 3: 5, 4: 3}[n]
    p = n - 1
    while not _is_prime(p):
        p -= 1
    return p


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def describe(args: list) -> str:
    """'float32[13, 16384], int64[13]': the tensor inputs' dtypes and shapes."""
    import torch

    return ", ".join(f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}" for a in args
                     if isinstance(a, torch.Tensor))


def _plans(args: list, fixed: frozenset[int]) -> list[tuple[str, list[dict[tuple[int, int], int]]]]:
    """(label, placements to try in order) per change: placements map (input, dim) -> new size.
    Sizes in `fixed` (constructor arguments) are never changed."""
    import torch

    dims = [(i, d, n) for i, a in enumerate(args) if isinstance(a, torch.Tensor) for d, n in enumerate(a.shape)
            if n not in fixed]
    if not dims:
        return []
    plans = []
    first = next(i for i, _, _ in dims)
    lead = args[first].shape[0] if args[first].dim() else 1
    if lead not in fixed and (new := other_size(lead) if lead > 1 else 3) is not None:
        at = {(i, 0): new for i, d, n in dims if d == 0 and n == lead}
        plans.append((f"leading dimension {lead} -> {new}", [at]))
    inner = [n for i, d, n in dims if d > 0 and n > 1]
    last = args[first].shape[-1] if args[first].dim() > 1 else None
    order = ([last] if last and last > 1 else []) + sorted(set(inner) - {last}, reverse=True)
    for n in order[:MAX_INNER_TRIES]:
        new = other_size(n)
        everywhere = {(i, d): new for i, d, m in dims if m == n}
        inner_only = {(i, d): new for i, d, m in dims if m == n and d > 0}
        own = {(first, d): new for d, m in enumerate(args[first].shape) if m == n and d > 0}
        tries: list[dict] = []
        for placement in (everywhere, inner_only, own):  # the widest change first
            if placement and placement not in tries:
                tries.append(placement)
        plans.append((f"inner dimension {n} -> {new}", tries))
    return plans


def _resized(args: list, placement: dict[tuple[int, int], int]) -> list:
    """`args` with the placed dimensions cut (or repeated, then cut) to their new sizes, contiguous."""
    import torch

    out = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            for (j, d), new in placement.items():
                if j == i:
                    if new > a.shape[d]:
                        a = torch.cat([a] * -(-new // a.shape[d]), dim=d)
                    a = a.narrow(d, 0, new)
            a = a.contiguous().clone()
        out.append(a)
    return out


def _indexes_into(args: list, placement: dict[tuple[int, int], int]) -> bool:
    """Whether an integer input could index a dimension this placement shrinks: its values reach
    the new size but stay below the old one. The reference would then fail on the device."""
    import torch

    shrunk = [(args[i].shape[d], new) for (i, d), new in placement.items() if new < args[i].shape[d]]
    for a in args:
        if isinstance(a, torch.Tensor) and not a.is_floating_point() and a.dtype != torch.bool and a.numel():
            top = int(a.max())
            if any(new <= top < old for old, new in shrunk):
                return True
    return False


def _nbytes(args: list) -> int:
    import torch

    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def derive(draw: Callable[[], list], runs: Callable[[list], bool], fixed: frozenset[int] = frozenset()
           ) -> tuple[list[Variant], list[str]]:
    """Up to MAX_VARIANTS variants of freshly drawn inputs on which `runs` (the reference check)
    succeeds, never changing a size in `fixed` (the constructor's integer arguments); and notes on
    what could not be derived."""
    import torch

    args = draw()
    bound = max(MIN_BYTES_BOUND, GROWTH_BOUND * _nbytes(args))
    variants, refused = [], []
    kept = sorted({n for a in args if isinstance(a, torch.Tensor) for n in a.shape if n in fixed and n > 1})
    for label, tries in _plans(args, fixed):
        if len(variants) >= MAX_VARIANTS:
            break
        for placement in tries:
            resized = None if _indexes_into(args, placement) else _resized(args, placement)
            if resized is not None and _nbytes(resized) <= bound and runs(resized):
                variants.append(Variant(label, resized, describe(resized)))
                break
        else:
            refused.append(label)
    notes = [f"not checked on another {kind} dimension: the reference runs on none of "
             + ", ".join(r.removeprefix(f"{kind} dimension ") for r in refused if r.startswith(kind))
             for kind in ("leading", "inner")
             if not any(v.label.startswith(kind) for v in variants) and any(r.startswith(kind) for r in refused)]
    if kept:
        notes.append(f"not varied: {', '.join(map(str, kept))}, also a constructor argument")
    return variants, notes


def meta_check(model_factory: Callable[[], Any]) -> Callable[[list], bool] | None:
    """A check that the reference accepts inputs of these shapes, run on the meta device; None
    where the reference cannot be built or run there (data-dependent code, explicit devices)."""
    import torch

    try:
        with torch.device("meta"):
            model = model_factory()
    except Exception:  # noqa: BLE001 - meta is an optimisation; the caller falls back to a real run
        return None

    def runs(args: list) -> bool:
        metas = [torch.empty_like(a, device="meta") if isinstance(a, torch.Tensor) else a for a in args]
        try:
            with torch.no_grad():
                out = model(*metas)
        except Exception:  # noqa: BLE001 - the reference rejects these shapes
            return False
        outs = out if isinstance(out, (list, tuple)) else [out]
        return all(not isinstance(o, torch.Tensor) or o.numel() > 0 for o in outs)

    return runs
