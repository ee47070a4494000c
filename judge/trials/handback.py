"""What the worker hands back, read and judged by the checker (trials/checker.py): descriptors checked
against the memory they name before anything is read, outputs never written (the poison's bits), a
previous result returned again, and the verdict a worker may report of itself (never `ok`)."""
from __future__ import annotations

from kernelevo.evaluation import Verdict
from kernelevo.judge.trials import arena, compare, guards


# Trials that check the candidate beyond the benchmark's own weights, values and shapes: a
# mismatch there gets its own reason, and a hint on what kind of kernel fails that way.
GENERAL = {
    "weights": ("weight_specific", "correct only with the default-initialised weights"),
    "range": ("value_range", "numerically fragile at magnitudes the reference handles"),
    "spread": ("value_range", "accurate only relative to the largest value of a row or block (a shared scale, a "
               "low-precision split), where a row's small values carry as much as its large ones"),
    "shape": ("shape_specific", "correct only on the task's own shapes"),
    "site": ("site_specific", "wrong at another of the part's call sites in its model"),
}

class Ended(Exception):
    """The worker's answer ends the trials with a verdict that is not `ok` (a crash, a refusal)."""

    def __init__(self, result: dict):
        super().__init__(result.get("message", ""))
        self.result = result


def fits(descs: list, values: list) -> bool:
    import torch

    if len(descs) != len(values):
        return False
    for d, v in zip(descs, values):
        if isinstance(v, torch.Tensor) != (isinstance(d, dict) and d.get("t") == "tensor"):
            return False
        if isinstance(v, torch.Tensor) and (list(v.shape) != d["shape"] or arena._name(v.dtype) != d["dtype"]):
            return False
    return True


def read(region: arena.Region, descs, device: str) -> list:
    """Copies of the values the worker describes, each checked to lie in `region` (what it writes there
    later changes nothing), on the device it says the candidate returned them on. A tensor the worker
    could not place (larger than the room the checker gave) comes back as a meta tensor of its shape,
    which the comparison rejects by its shape."""
    import torch

    if not isinstance(descs, list):
        raise Ended(protocol("no outputs"))
    values = []
    for d in descs:
        try:
            if isinstance(d, dict) and d.get("t") == "tensor" and d.get("offset") is None:
                values.append(torch.empty([int(x) for x in d["shape"]], dtype=arena.dtype_of(d["dtype"]),
                                          device="meta"))
                continue
            value = arena.rebuild(region, d)
        except (KeyError, TypeError, ValueError) as exc:
            raise Ended(protocol(f"a descriptor the checker cannot read ({exc})")) from exc
        if isinstance(value, torch.Tensor):
            claimed = d.get("device") if isinstance(d, dict) else None
            if claimed == "cpu":
                value = value.to("cpu", copy=True)
            elif claimed in (None, device.split(":")[0]):
                value = value.to(device, copy=True)
            else:
                value = torch.empty_like(value, device="meta")
        values.append(value)
    return values


def against(got: list, expected, exact):
    """Outputs read back (`read`) compared with the reference's, shaped as the reference returns them (one
    tensor or a sequence), with its float64 twin's error as the floor: compare.compare's Match or Mismatch."""
    out = got if isinstance(expected, (list, tuple)) else (got[0] if len(got) == 1 else got)
    floor = compare.reference_error(expected, exact) if exact is not None else 0.0
    return compare.compare(out, expected, exact, floor)


def specs(expected) -> list:
    """What the worker's structural checks need to know of each expected output: no values."""
    import torch

    return [{"shape": list(e.shape), "stride": list(e.stride()), "dtype": arena._name(e.dtype)}
            if isinstance(e, torch.Tensor) else None for e in compare.flatten(expected)]


def protocol(what: str) -> dict:
    return {"verdict": "rejected", "reason": "forged_report",
            "message": f"the candidate's process answered the checker with {what}"}


def worker_verdict(answer: dict) -> dict:
    """A verdict the worker reported (a failure or a rejection of its own): never `ok`, so it may stand."""
    data = answer.get("failed") or answer.get("rejected")
    if not isinstance(data, dict):
        return protocol("a verdict it did not spell out")
    verdict = "rejected" if "rejected" in answer else str(data.get("verdict") or "runtime_error")
    if verdict == Verdict.OK:
        return protocol("a failure whose verdict is ok")
    return {"verdict": verdict, "reason": str(data.get("reason", "")), "message": str(data.get("message", "")),
            "excerpt": str(data.get("excerpt", "")), "evidence": data.get("evidence") or {}}


def nbytes(out) -> list[int]:
    import torch

    return [t.untyped_storage().nbytes() for t in compare.flatten(out) if isinstance(t, torch.Tensor)]


def values(out) -> list:
    import torch

    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in compare.flatten(out)]


def check_written(out, expected, label: str) -> None:
    """Elements that still hold the poison's bits (all set: a NaN in every floating dtype) were
    never written by the candidate."""
    import torch

    views = {8: torch.int64, 4: torch.int32, 2: torch.int16}
    for o, e in zip(compare.flatten(out), compare.flatten(expected)):
        if not (isinstance(o, torch.Tensor) and o.is_floating_point() and o.element_size() in views
                and isinstance(e, torch.Tensor) and o.shape == e.shape and o.dtype == e.dtype
                and o.device.type == e.device.type):
            continue
        bits = o.detach().contiguous().view(views[o.element_size()]) == -1
        if not bool(bits.any()):  # the common case, in one pass
            continue
        unwritten = int((bits & ~torch.isnan(e.detach())).sum())
        if unwritten:
            raise guards.Rejected("uninitialized_output", f"{label}: {unwritten} of {o.numel()} output elements were "
                                  "never written (they still hold the bits the judge filled free memory with): "
                                  "an output must be computed, not taken from unused memory",
                                  {"unwritten": unwritten, "numel": o.numel()})


def check_cached(out, expected, state: dict, label: str) -> None:
    """A wrong output equal to the candidate's previous one, where the reference's changed."""
    import torch

    if state["previous_values"] is None:
        return
    before, before_ref = state["previous_values"]
    now = compare.flatten(out)
    same = len(before) == len(now) and all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                                           and a.shape == b.shape and a.device == b.device and torch.equal(a, b)
                                           for a, b in zip(before, now))
    ref_same = all(torch.equal(a, b) for a, b in zip(before_ref, compare.flatten(expected))
                   if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape)
    if not same or ref_same:
        return
    if state.get("same_place_last"):
        raise guards.Rejected("input_cache", f"{label}: the candidate returned its previous result after its "
                              "inputs' memory was rewritten in place (same tensors, same addresses, version "
                              "counters unchanged): a result cached by tensor identity; results must be computed "
                              "on every call", {"same_storage": True, "version_moved": False})
    raise guards.Rejected("cached_result", f"{label}: the candidate returned its previous result for new "
                          "inputs: results must be computed on every call")


def incorrect(m: compare.Mismatch, trial, trials: int) -> dict:
    label = trial.label
    where = f"{label}, index {m.index}" if m.index else label
    reason, hint = GENERAL.get(trial.kind, (m.reason, ""))
    return {"verdict": "incorrect", "reason": reason, "message": f"{label}: {m.message}" + (f" ({hint})" if hint else ""),
            "excerpt": "", "correctness": dict(trials=trials, passed=trials - 1, rel_l2=m.rel_l2,
                                               max_abs=m.max_abs, max_rel=m.max_rel, where=where,
                                               tolerance=m.tolerance)}
