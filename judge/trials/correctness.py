"""Correctness trials, with the dynamic checks that watch the candidate while it is checked.

Every trial runs the candidate first, on inputs it has never seen, with the allocator's free
memory poisoned; the reference runs afterwards on copies taken before the call. So while the
candidate runs, no reference output for those inputs exists anywhere in the process (nothing
to scavenge, nothing left in freed memory), and its inputs are compared with their copies
afterwards. The second trial writes new values into the first trial's input tensors, through
`.data` so that their version counters do not move: a result cached by input address, by tensor
object or by (address, version) comes out stale, and is `input_cache`; an honest cache keyed by
placement (a CUDA graph replayed every call) computes from the new values.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from kernelevo.judge import verdicts
from kernelevo.judge.job import Job
from kernelevo.judge.trials import compare, generality, guards, inputs, reference, shapes
from kernelevo.judge.trials.reference import Rebuilt, Reference, Skip
from kernelevo.judge.trials.shapes import describe


forward = reference.forward


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


@dataclass(frozen=True)
class Trial:
    args: list
    label: str  # says what was drawn: "trial 3 (scaled x1/8)", "derived shape (...)"
    kind: str = "draw"  # draw, test, or one of GENERAL's keys
    init: tuple | None = None  # constructor arguments both models are rebuilt with (a derived shape)
    shown: str = ""  # what the shape report lists for it; else its inputs' shapes

    @property
    def shapes(self) -> str:
        return self.shown or describe(self.args)


# Trials that check the candidate beyond the benchmark's own weights, values and shapes: a
# mismatch there gets its own reason, and a hint on what kind of kernel fails that way.
GENERAL = {
    "weights": ("weight_specific", "correct only with the default-initialised weights"),
    "range": ("value_range", "numerically fragile at magnitudes the reference handles"),
    "shape": ("shape_specific", "correct only on the task's own shapes"),
}


def _draws(task, job: Job, device: str, ref: Reference) -> Iterator[Trial]:
    """Fresh draws in the task's domain, each reshaped by one of inputs.TRANSFORMS."""
    for t in range(job.trials):
        args, kind = inputs.trial_inputs(task.get_inputs, t, job.seed, device)
        if kind != "as given" and not ref.finite_on(args):
            # This transform left the task's domain (log of a negative...): redraw plainly.
            args, kind = inputs.trial_inputs(task.get_inputs, t, job.seed, device, "as given")
        yield Trial(args, f"trial {t + 1} ({kind})")


def _trials(task, job: Job, device: str, ref: Reference, candidate, twins: dict, report: dict,
            checks: list, planned) -> Iterator[Trial]:
    """Every trial in order: draws with the built weights, then with redrawn weights (kept from
    there on): as given, at large values, the task's extra shapes, and the shapes the judge derives."""
    yield from _draws(task, job, device, ref)
    n, seed = job.trials, job.seed

    def plain(k: int) -> list:
        return inputs.trial_inputs(task.get_inputs, k, seed, device, "as given")[0]

    args = plain(n)
    saved, said = generality.redraw(ref.model, candidate, twins, seed)
    ref.sync()
    if saved and ref.finite_on(args):
        checks.extend(said)
        yield Trial(args, f"trial {n + 1} (redrawn weights)", "weights")
    elif saved:
        generality.restore(ref.model, candidate, twins, saved)
        ref.sync()
        checks.append("weights not redrawn: the reference's output was not finite with redrawn weights")
    found = generality.large_values(plain(n + 1), ref.finite_on)
    if found:
        yield Trial(found[0], f"trial {n + 2} ({found[1]})", "range")
    else:
        checks.append("no large-value trial: the reference's output is not finite on inputs scaled x16")
    extra = getattr(task, "get_test_inputs", None)
    for i, test_args in enumerate(extra() if extra is not None else ()):
        yield Trial(inputs.to_device(list(test_args), device), f"test inputs {i + 1}", "test")
    if report["mode"] == "general":
        base = plain(n + 2)
        roles = planned or shapes.plan(base, tuple(task.get_init_inputs()), reference.acceptor(task.Model, device),
                                       reference.parameter_names(task.Model))
        found, said = shapes.variants(base, roles)
        report["notes"].extend([*roles.notes, *said])
        for v in found:
            yield Trial(v.args, f"derived shape ({v.label}: {v.shapes})", "shape", v.init, v.shapes)


def plan_shapes(task, device: str):
    """The derived shapes, planned on shapes alone before the candidate holds the device: on the meta
    device for a GPU (an invalid shape cannot leave a CUDA error behind, and no memory is used), with
    real tensors on the CPU (meta's first use imports for over a second there). None where the
    reference does not run on meta: the trials then plan on the device, with real tensors."""
    where = "meta" if device.startswith("cuda") else "cpu"
    init = tuple(task.get_init_inputs())
    accepts = reference.acceptor(task.Model, where)
    args = inputs.draw(task.get_inputs, where)
    if not accepts(init, args):
        return None
    return shapes.plan(args, init, accepts, reference.parameter_names(task.Model))


def _same_place(old: list | None, new: list) -> list | None:
    """`new`'s values written into `old`'s tensors, where every tensor matches in shape and dtype; written
    through `.data`, which leaves each tensor's version counter where it was (as a write by another
    library into the same memory would), so a memo keyed by (address, version) cannot tell either."""
    import torch

    if old is None or len(old) != len(new):
        return None
    for o, n in zip(old, new):
        if isinstance(n, torch.Tensor) and not (isinstance(o, torch.Tensor) and o.shape == n.shape
                                                and o.dtype == n.dtype and o.device == n.device):
            return None
    for o, n in zip(old, new):
        if isinstance(n, torch.Tensor):
            o.data.copy_(n)
    return old


def check(task, reference, candidate, job: Job, device: str, threads: guards.ThreadWatch,
          on_trial=lambda label: None, planned=None) -> dict:
    """All trials; returns the result fields, or raises guards.Rejected. `on_trial` hears each
    trial's label before it runs (the parent names it if the process dies there); `planned`: the
    derived shapes from plan_shapes, else they are planned here."""
    import torch

    ref = Reference(reference)
    twins = generality.value_twins(ref.model, candidate)  # before anything runs: values still equal
    stateful = ref.keeps_state(inputs.trial_inputs(task.get_inputs, 0, job.seed, device, "as given")[0])
    watch = guards.ReferenceWatch(ref.model, ref.model64)
    state = {"previous_args": None, "previous_out": [], "previous_values": None, "sizes": [], "stateful": stateful}
    checks: list[str] = []  # what the weights and value-range trials did, for the verdict's notes
    report = {"mode": job.shapes, "supported": [], "refused": [], "notes": []}
    trials, worst = 0, None
    spent: dict[str, float] = {}  # seconds per kind of trial, drawing its inputs included
    clock = time.perf_counter()
    try:
        with torch.no_grad():
            for t, trial in enumerate(_trials(task, job, device, ref, candidate, twins, report, checks, planned)):
                on_trial(trial.label)
                try:
                    result = _run_trial(t, trial, task, job, ref, candidate, watch, threads, device, state)
                except Skip as skip:
                    report["notes"].append(f"{trial.label}: not judged, {skip.why}")
                    continue
                except Exception as exc:  # noqa: BLE001 - a refusal of a derived shape, or a failure
                    failed = _shape_failure(exc, trial, device, report, trials)
                    if failed is None:
                        continue
                    return failed
                trials += 1
                if isinstance(result, compare.Mismatch):
                    return _incorrect(result, trial, trials)
                if trial.kind in ("draw", "test", "shape") and trial.shapes not in report["supported"]:
                    report["supported"].append(trial.shapes)
                if worst is None or result.rel_l2 >= worst[0].rel_l2:
                    worst = (result, trial.label)
                now = time.perf_counter()
                spent[trial.kind] = round(spent.get(trial.kind, 0.0) + now - clock, 4)
                clock = now
    finally:
        watch.remove()
    match, label = worst
    where = f"{label}, index {match.index}" if match.index else label
    if stateful:
        checks.append("the reference keeps state across calls: outputs are compared only in lockstep with it")
    return {"verdict": "ok", "reason": "", "message": "", "shapes": report, "checks": checks,
            "stateful": stateful, "trial_s": spent, "correctness": dict(
        trials=trials, passed=trials, rel_l2=match.rel_l2, max_abs=match.max_abs,
        max_rel=match.max_rel, where=where, tolerance=match.tolerance)}


def _shape_failure(exc: Exception, trial: Trial, device: str, report: dict, trials: int) -> dict | None:
    """What an exception in a trial means. On a derived shape, a clean refusal (a Python-level
    exception, the device still healthy) marks the candidate specialized and the trials go on
    (None). Unwritten output, or an input overwritten (an out-of-bounds write), is a wrong answer
    there, not a cheat: the same kernel passed those checks on the task's own shapes. Anything
    else propagates or is a failure."""
    if trial.kind != "shape":
        raise exc
    if isinstance(exc, guards.Rejected):
        if exc.reason not in ("uninitialized_output", "inputs_modified"):
            raise exc
        return _incorrect(compare.Mismatch(exc.reason, exc.message.removeprefix(f"{trial.label}: ")), trial, trials + 1)
    failure = verdicts.classify_run(exc)
    if failure.reason == "exception":
        try:
            sync(device)
        except Exception:  # noqa: BLE001 - the refusal left the device broken: a crash after all
            pass
        else:
            report["refused"].append(f"{trial.shapes}: {failure.message}")
            return None
    return {"verdict": failure.verdict, "reason": failure.reason, "message": f"{trial.label}: {failure.message}",
            "excerpt": failure.excerpt}


def _run_trial(t: int, trial: Trial, task, job: Job, ref: Reference, candidate, watch, threads, device: str,
               state: dict):
    """One trial, on models rebuilt for it where its constructor arguments differ from the task's."""
    if trial.init is None:
        return _trial(t, trial, ref, candidate, watch, threads, device, state)
    rebuilt = Rebuilt(task, candidate, trial.init, job.seed, device)
    try:
        return _trial(t, trial, rebuilt.ref, rebuilt.candidate, rebuilt.watch, threads, device, state)
    finally:
        rebuilt.watch.remove()


def _trial(t: int, trial: Trial, ref: Reference, candidate, watch, threads, device: str, state: dict):
    args, label = trial.args, trial.label
    state["same_place"] = False
    if t == 1:  # the same addresses as the first trial, holding new values
        moved = _same_place(state["previous_args"], args)
        args, state["same_place"] = (moved, True) if moved is not None else (args, False)
    originals = inputs.clone_inputs(args)
    # Blocks of the last outputs' sizes and of this trial's input sizes: on a new shape the output is
    # often input-sized, and the reference's own output for these very inputs (a shape probe's) may be free.
    guards.poison_free_memory(device, state["sizes"] + _nbytes(args))
    with watch.candidate_running():
        out = forward(candidate, args)
        sync(device)
    returned = _values(out)  # what forward returned, before anything else runs
    threads.verify("a correctness trial")
    changed = guards.changed_inputs(originals, args)
    ref_args = inputs.clone_inputs(originals)
    expected, exact, finite = ref(ref_args)
    if trial.kind == "shape" and not finite:
        raise Skip
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
    slack = ref.slack(originals, exact) if trial.kind == "range" and not state["stateful"] else None
    floor = compare.reference_error(expected, exact, slack) if exact is not None else 0.0
    result = compare.compare(out, expected, exact, floor, slack)
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
        bits = o.detach().contiguous().view(views[o.element_size()]) == -1
        if not bool(bits.any()):  # the common case, in one pass
            continue
        unwritten = int((bits & ~torch.isnan(e.detach())).sum())
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
    if not same or ref_same:
        return
    if state.get("same_place"):
        raise guards.Rejected("input_cache", f"{label}: the candidate returned its previous result after its "
                              "inputs' memory was rewritten in place (same tensors, same addresses, version "
                              "counters unchanged): a result cached by tensor identity; results must be computed "
                              "on every call", {"same_storage": True, "version_moved": False})
    raise guards.Rejected("cached_result", f"{label}: the candidate returned its previous result for new "
                          "inputs: results must be computed on every call")


def _incorrect(m: compare.Mismatch, trial: Trial, trials: int) -> dict:
    label = trial.label
    where = f"{label}, index {m.index}" if m.index else label
    reason, hint = GENERAL.get(trial.kind, (m.reason, ""))
    return {"verdict": "incorrect", "reason": reason, "message": f"{label}: {m.message}" + (f" ({hint})" if hint else ""),
            "excerpt": "", "correctness": dict(trials=trials, passed=trials - 1, rel_l2=m.rel_l2,
                                               max_abs=m.max_abs, max_rel=m.max_rel, where=where,
                                               tolerance=m.tolerance)}
