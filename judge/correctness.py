"""Correctness trials, with the dynamic checks that watch the candidate while it is checked.

Every trial runs the candidate first, on inputs it has never seen, with the allocator's free
memory poisoned; the reference runs afterwards on copies taken before the call. So while the
candidate runs, no reference output for those inputs exists anywhere in the process (nothing
to scavenge, nothing left in freed memory), and its inputs are compared with their copies
afterwards. The second trial writes new values into the first trial's input tensors, so a
result cached by input address comes out stale.
"""
from __future__ import annotations

import copy
import time

from kernelevo.judge import compare, guards, inputs


def forward(model, args: list):
    return model(*args)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Reference:
    """The task's model in its own dtype (TF32 off) and, where it runs, in float64."""

    def __init__(self, model):
        self.model = model
        try:
            self.model64 = copy.deepcopy(model).double()
        except Exception:  # noqa: BLE001 - float64 is a refinement, not a requirement
            self.model64 = None

    def plain(self, args: list):
        return forward(self.model, args)

    def __call__(self, args: list):
        """(outputs, float64 outputs or None, all finite) on `args` (which may be mutated)."""

        exact = None
        if self.model64 is not None:
            try:
                exact = forward(self.model64, inputs.to_float64(args))
            except (RuntimeError, TypeError, NotImplementedError):
                self.model64 = None
        out = forward(self.model, args)
        return out, exact, all_finite(out)


def all_finite(out) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in compare.flatten(out)
               if isinstance(t, torch.Tensor) and t.is_floating_point())


def _trial_sets(task, job: dict, device: str, ref: Reference):
    """(inputs, label) per trial: fresh draws in the task's domain, then the task's extra shapes."""
    for t in range(job["trials"]):
        args, kind = inputs.trial_inputs(task.get_inputs, t, job["seed"], device)
        if kind != "as given" and not all_finite(ref.plain(inputs.clone_inputs(args))):
            # This transform left the task's domain (log of a negative...): redraw plainly.
            args, kind = inputs.trial_inputs(task.get_inputs, t, job["seed"], device, "as given")
        yield args, f"trial {t + 1} ({kind})"
    extra = getattr(task, "get_test_inputs", None)
    if extra is not None:
        for i, args in enumerate(extra()):
            yield inputs.to_device(list(args), device), f"test inputs {i + 1}"


def _same_place(old: list | None, new: list) -> list | None:
    """`new`'s values written into `old`'s tensors, where every tensor matches in shape and dtype."""
    import torch

    if old is None or len(old) != len(new):
        return None
    for o, n in zip(old, new):
        if isinstance(n, torch.Tensor) and not (isinstance(o, torch.Tensor) and o.shape == n.shape
                                                and o.dtype == n.dtype and o.device == n.device):
            return None
    for o, n in zip(old, new):
        if isinstance(n, torch.Tensor):
            o.copy_(n)
    return old


def check(task, reference, candidate, job: dict, device: str, threads: guards.ThreadWatch) -> dict:
    """All trials; returns the result fields, or raises guards.Rejected."""
    import torch

    ref = Reference(reference)
    watch = guards.ReferenceWatch(ref.model, ref.model64)
    state = {"previous_args": None, "previous_out": [], "previous_values": None, "sizes": []}
    trials, worst = 0, None
    try:
        with torch.no_grad():
            for t, (args, label) in enumerate(_trial_sets(task, job, device, ref)):
                result = _trial(t, args, label, ref, candidate, watch, threads, device, state)
                trials += 1
                if isinstance(result, compare.Mismatch):
                    return _incorrect(result, label, trials)
                if worst is None or result.rel_l2 >= worst[0].rel_l2:
                    worst = (result, label)
    finally:
        watch.remove()
    match, label = worst
    where = f"{label}, index {match.index}" if match.index else label
    return {"verdict": "ok", "reason": "", "message": "", "correctness": dict(
        trials=trials, passed=trials, rel_l2=match.rel_l2, max_abs=match.max_abs,
        max_rel=match.max_rel, where=where, tolerance=match.tolerance)}


def _trial(t: int, args: list, label: str, ref: Reference, candidate, watch, threads, device: str, state: dict):
    if t == 1:  # the same addresses as the first trial, holding new values
        moved = _same_place(state["previous_args"], args)
        args = moved if moved is not None else args
    originals = inputs.clone_inputs(args)
    guards.poison_free_memory(device, state["sizes"] or _nbytes(args))
    with watch.candidate_running():
        out = forward(candidate, args)
        sync(device)
    returned = _values(out)  # what forward returned, before anything else runs
    threads.verify("a correctness trial")
    changed = guards.changed_inputs(originals, args)
    ref_args = inputs.clone_inputs(originals)
    expected, exact, _ = ref(ref_args)
    if not _same(returned, compare.flatten(out)):
        raise guards.Rejected("background_work", f"{label}: the output kept changing after forward returned "
                              "(and the device was synchronised): its work runs outside the call")
    guards.check_outputs(out, expected, args, guards.aliased_inputs(expected, ref_args), state["previous_out"])
    state["current_out"] = compare.flatten(out)
    allowed = guards.changed_inputs(originals, ref_args)  # the reference's own in-place updates
    if set(changed) - set(allowed):
        raise guards.Rejected("inputs_modified", f"{label}: the candidate changed input {changed[0]} in place; "
                              "inputs must be left as they were", {"inputs": changed})
    produced, out = out, returned if isinstance(out, (list, tuple)) else returned[0]
    try:
        _check_written(out, expected, label)
        unwritten = None
    except guards.Rejected as r:
        unwritten = r
    floor = compare.reference_error(expected, exact) if exact is not None else 0.0
    result = compare.compare(out, expected, exact, floor)
    if unwritten or isinstance(result, compare.Mismatch):
        time.sleep(0.05)  # a thread still writing the output (on a busy machine) shows by now
        if not _same(returned, compare.flatten(produced)):
            raise guards.Rejected("background_work", f"{label}: the output was incomplete when forward returned "
                                  "and changed afterwards: its work runs outside the call")
        if unwritten:
            raise unwritten
        _check_cached(out, expected, state, label)
    state.update(previous_args=args, previous_out=state["current_out"], sizes=_nbytes(expected),
                 previous_values=(_values(out), _values(expected)))
    return result


def _nbytes(out) -> list[int]:
    import torch

    return [t.untyped_storage().nbytes() for t in compare.flatten(out) if isinstance(t, torch.Tensor)]


def _values(out) -> list:
    import torch

    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in compare.flatten(out)]


def _same(a: list, b: list) -> bool:
    import torch

    return len(a) == len(b) and all(not isinstance(x, torch.Tensor) or (isinstance(y, torch.Tensor)
                                                                         and guards.same_values(x, y))
                                    for x, y in zip(a, b))


def _check_written(out, expected, label: str) -> None:
    """Elements that still hold the poison's bits (all set: a NaN in every floating dtype) were
    never written by the candidate."""
    import torch

    views = {8: torch.int64, 4: torch.int32, 2: torch.int16}
    for o, e in zip(compare.flatten(out), compare.flatten(expected)):
        if not (isinstance(o, torch.Tensor) and o.is_floating_point() and o.element_size() in views
                and isinstance(e, torch.Tensor) and o.shape == e.shape and o.dtype == e.dtype):
            continue
        bits = o.detach().contiguous().view(views[o.element_size()])
        unwritten = int(((bits == -1) & ~torch.isnan(e.detach())).sum())
        if unwritten:
            raise guards.Rejected("uninitialized_output", f"{label}: {unwritten} of {o.numel()} output elements were "
                                  "never written (they still hold the bits the judge filled free memory with): "
                                  "an output must be computed, not taken from unused memory",
                                  {"unwritten": unwritten, "numel": o.numel()})


def _check_cached(out, expected, state: dict, label: str) -> None:
    """A wrong output equal to the candidate's previous one, where the reference's changed."""
    import torch

    if state["previous_values"] is None:
        return
    before, before_ref = state["previous_values"]
    now = compare.flatten(out)
    same = len(before) == len(now) and all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                                           and a.shape == b.shape and torch.equal(a, b) for a, b in zip(before, now))
    ref_same = all(torch.equal(a, b) for a, b in zip(before_ref, compare.flatten(expected))
                   if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape)
    if same and not ref_same:
        raise guards.Rejected("cached_result", f"{label}: the candidate returned its previous result for new "
                              "inputs: results must be computed on every call")


def _incorrect(m: compare.Mismatch, label: str, trials: int) -> dict:
    where = f"{label}, index {m.index}" if m.index else label
    return {"verdict": "incorrect", "reason": m.reason, "message": f"{label}: {m.message}",
            "excerpt": "", "correctness": dict(trials=trials, passed=trials - 1, rel_l2=m.rel_l2,
                                               max_abs=m.max_abs, max_rel=m.max_rel, where=where)}
