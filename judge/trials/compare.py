"""Is a candidate's output the reference's output? Tolerances per dtype, and why not.

Three tests, all of which must pass:
- relative norm: ||out - ref|| / ||ref|| under a per-dtype bound. A bound on the whole tensor
  cannot be met by all-zero output (its error is 1) and is blind to where the reference is 0.
- elementwise: |out - ref| <= rtol * |ref| + atol * rms(ref), catching a few wrong elements that
  the norm would average away; atol scales with the output so scaled inputs are judged alike.
- centered norm: the same as the first after removing each tensor's mean, so that an output that
  is near-constant cannot pass against a reference whose mean dominates its norm.
Bounds never go below what the task-dtype reference itself achieves against float64: the norm bounds are
raised to 8x its own error, and where the reference itself misses the elementwise bound (a float32 sum of
same-signed terms at large values: its rounding, not the inputs', moves near-ties), that test is not
applied on that trial (`elementwise=False`; `reference_misses` says when). Where the caller gives a
per-element slack (how far the exact output moves under input roundings, on an ill-conditioned trial),
only the error beyond it counts.
"""
from __future__ import annotations

from dataclasses import dataclass

# dtype -> (relative-norm bound, elementwise rtol = atol factor). float32 at 5e-5 rejects TF32
# (about 3e-4) and reduced-precision accumulation while leaving room for any summation order.
TOLERANCES = {
    "float64": (1e-10, 1e-7),
    "float32": (5e-5, 1e-3),
    "float16": (2e-3, 1e-2),
    "bfloat16": (1e-2, 5e-2),
}
CENTERED_BOUND = 0.25


@dataclass(frozen=True)
class Mismatch:
    reason: str  # stable id
    message: str
    rel_l2: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    index: tuple = ()
    tolerance: str = ""  # the bounds that were not met, where values were compared


@dataclass(frozen=True)
class Match:
    rel_l2: float
    max_abs: float
    max_rel: float
    index: tuple
    tolerance: str


def flatten(out) -> list:
    """A forward's result as a list of tensors (tuples and lists are unpacked one level)."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


def reference_error(ref, ref64, slack: list | None = None) -> float:
    """Relative-norm error of the task-dtype reference against the float64 one (0 if unknown),
    beyond `slack` where given: a reference that flips a near-tie does not loosen the bounds."""
    worst = 0.0
    slack = slack if slack is not None else []
    for i, (r, r64) in enumerate(zip(flatten(ref), flatten(ref64))):
        if getattr(r, "is_floating_point", lambda: False)():
            d = (r.double() - r64.double()).abs()
            if i < len(slack) and slack[i] is not None and slack[i].shape == d.shape:
                d = (d - slack[i]).clamp_min(0)
            denom = float(r64.double().norm())
            worst = max(worst, float(d.norm()) / denom if denom > 0 else float(d.norm()))
    return worst


def reference_misses(expected, exact, floor: float, slack: list | None = None) -> int:
    """How many elements of the task-dtype reference itself lie outside the elementwise bound against the
    float64 one (beyond `slack`): more than 0 means that test asks of a candidate what the reference cannot do."""
    import torch

    misses = 0
    slack = slack if slack is not None and len(slack) == len(flatten(expected)) else [None] * len(flatten(expected))
    for r, r64, s in zip(flatten(expected), flatten(exact), slack):
        if isinstance(r, torch.Tensor) and r.is_floating_point() and isinstance(r64, torch.Tensor) \
                and r.shape == r64.shape:
            o, want = r.detach().to(torch.float64), r64.detach().to(torch.float64)
            spread = s.detach().to(torch.float64) if s is not None and s.shape == want.shape else 0.0
            if not (bool(torch.isfinite(o).all()) and bool(torch.isfinite(want).all())):  # masked copies only then
                finite = torch.isfinite(o) & torch.isfinite(want)
                spread = spread[finite] if isinstance(spread, torch.Tensor) else spread
                o, want = o[finite], want[finite]
            if want.numel():
                elem_tol = _bounds(r.dtype, floor)[1]
                rms = float(want.norm()) / want.numel() ** 0.5
                misses += int((_beyond(o, want, spread, r.dtype) > elem_tol * want.abs() + elem_tol * rms).sum())
    return misses


def _bounds(dtype, floor: float) -> tuple[float, float]:
    """(relative-norm bound, elementwise factor) of `dtype`, never below 8x the reference's own error."""
    norm_bound, elem_tol = TOLERANCES.get(str(dtype).replace("torch.", ""), TOLERANCES["float32"])
    return max(norm_bound, 8 * floor), max(elem_tol, 8 * floor)


def _beyond(o, r, spread, dtype):
    """Each element's error beyond `spread`. Nothing below the dtype's smallest normal number can be asked of
    it: a float32 product of 256 values near 0.1 is 1e-256 in float64 and 0 in float32, the reference's own
    answer included."""
    import torch

    return ((o - r).abs() - torch.finfo(dtype).tiny - spread).clamp_min(0)


def compare(outs, expected, exact=None, floor: float = 0.0, slack: list | None = None,
            elementwise: bool = True) -> Match | Mismatch:
    """Compare a candidate's outputs with the reference's.

    `expected` (the reference in the task's dtype) fixes shapes, dtypes and devices; values are
    compared with `exact` (the float64 reference) where given. `floor` is the task-dtype
    reference's own relative error against float64; bounds are raised to 8x it. `slack` (per
    output, a tensor of `exact`'s shape or None) is subtracted from each element's error. `elementwise=False`
    leaves out the elementwise test (where the reference itself misses it: `reference_misses`).
    """
    import torch

    outs, expected = flatten(outs), flatten(expected)
    exact = flatten(exact) if exact is not None else expected
    if len(outs) != len(expected):
        return Mismatch("output_count", f"forward returned {len(outs)} outputs, expected {len(expected)}")
    worst: Match | None = None
    slack = slack if slack is not None and len(slack) == len(expected) else [None] * len(expected)
    for i, (out, want, ref) in enumerate(zip(outs, expected, exact)):
        label = f"output {i}" if len(expected) > 1 else "output"
        if not isinstance(out, torch.Tensor):
            return Mismatch("output_type", f"{label} is a {type(out).__name__}, expected a tensor")
        result = _compare_tensor(out, want, ref, floor, label, slack[i], elementwise)
        if isinstance(result, Mismatch):
            return result
        if worst is None or result.rel_l2 > worst.rel_l2:
            worst = result
    return worst


def _compare_tensor(out, want, ref, floor: float, label: str, slack=None, elementwise: bool = True) -> Match | Mismatch:
    if tuple(out.shape) != tuple(want.shape):
        return Mismatch("shape_mismatch", f"{label} has shape {list(out.shape)}, expected {list(want.shape)}")
    if out.device.type != want.device.type:
        return Mismatch("device_mismatch", f"{label} is on {out.device}, expected {want.device.type}")
    if out.dtype != want.dtype:
        return Mismatch("dtype_mismatch", f"{label} has dtype {out.dtype}, expected {want.dtype}")
    if not out.is_floating_point():
        bad = (out != ref).nonzero()
        if len(bad):
            idx = tuple(int(v) for v in bad[0])
            return Mismatch("value_mismatch", f"{label}: {len(bad)} elements differ, first at {idx}", index=idx)
        return Match(0.0, 0.0, 0.0, (), "exact")
    return _compare_float(out, ref, floor, label, slack, elementwise)


def _compare_float(out, ref, floor: float, label: str, slack=None, elementwise: bool = True) -> Match | Mismatch:
    import torch

    norm_bound, elem_tol = _bounds(out.dtype, floor)
    o, r = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    spread = slack.detach().to(torch.float64) if slack is not None and slack.shape == r.shape else 0.0
    # Where both are finite everywhere (nearly always), no masked copies: each is a gather and a sync.
    if not (bool(torch.isfinite(o).all()) and bool(torch.isfinite(r).all())):
        o_finite, r_finite = torch.isfinite(o), torch.isfinite(r)
        if not torch.equal(o_finite, r_finite) or not torch.equal(o[~o_finite].nan_to_num(), r[~r_finite].nan_to_num()):
            bad = (o_finite != r_finite).nonzero()
            idx = tuple(int(v) for v in bad[0]) if len(bad) else ()
            return Mismatch("non_finite", f"{label} has NaN/inf where the reference does not (first at {idx})",
                            index=idx)
        spread = spread[r_finite] if isinstance(spread, torch.Tensor) else spread
        o, r = o[r_finite], r[r_finite]
        if o.numel() == 0:
            return Match(0.0, 0.0, 0.0, (), "all non-finite, identical")
    diff = _beyond(o, r, spread, out.dtype)
    denom = float(r.norm())
    rel_l2 = float(diff.norm()) / denom if denom > 0 else float(diff.norm())
    magnitude = r.abs()
    rms = denom / max(1, r.numel()) ** 0.5
    excess = diff - elem_tol * magnitude - elem_tol * rms  # > 0: outside the elementwise bound
    flat = int(excess.argmax())
    index = _unravel(flat, out.shape, ref)
    max_abs = float(diff.max())
    max_rel = float((diff / magnitude.clamp_min_(rms * 1e-3 if rms > 0 else 1e-30)).max())
    tol = f"rel_l2 <= {norm_bound:.1e}, |d| <= {elem_tol:.0e}*(|ref| + rms(ref))"
    if slack is not None:
        tol += " beyond what input roundings move the exact output"
    if not elementwise:
        tol = f"rel_l2 <= {norm_bound:.1e} (no elementwise bound: the reference itself misses it on these inputs)"
    where = dict(rel_l2=rel_l2, max_abs=max_abs, max_rel=max_rel, index=index, tolerance=tol)
    if rel_l2 > norm_bound:
        return Mismatch("value_mismatch", f"{label}: relative L2 error {rel_l2:.2e} exceeds {norm_bound:.1e}; "
                        f"max abs error {max_abs:.3g} at {index}", **where)
    n_bad = int((excess > 0).sum()) if elementwise else 0
    if n_bad:
        return Mismatch("value_mismatch", f"{label}: {n_bad} elements outside |d| <= {elem_tol:.0e}*(|ref| + rms); "
                        f"worst at {index}: got {float(out.flatten()[flat]):.6g}, "
                        f"expected {float(ref.flatten()[flat]):.6g}", **where)
    centered = _centered_error(o, r, out.dtype, floor)
    if centered is not None and centered > CENTERED_BOUND:
        return Mismatch("near_constant", f"{label}: output does not follow the reference's variation "
                        f"(centered relative error {centered:.2f} > {CENTERED_BOUND})", **where)
    return Match(**where)


def _centered_error(o, r, dtype, floor: float) -> float | None:
    """Relative error after removing means; None where the reference barely varies at all.

    An honest output's error is near the dtype's resolution (or the reference's own error), so
    where the variation is 100 times that, its centered error stays far under the bound while a
    constant output scores 1.
    """
    import torch

    rc = r - r.mean()
    spread, size = float(rc.norm()), float(r.norm())
    if spread <= 100 * max(torch.finfo(dtype).eps, floor) * size:
        return None  # variation below what this dtype resolves: a degenerate output, not a test
    return float(((o - o.mean()) - rc).norm()) / spread


def _unravel(flat: int, shape, ref) -> tuple:
    # Indices count finite elements only; where everything is finite they are the true indices.
    import torch

    if not bool(torch.isfinite(ref).all()):
        return (flat,)
    out = []
    for dim in reversed(tuple(shape)):
        out.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(out))
