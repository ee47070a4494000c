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
from collections.abc import Iterator
from dataclasses import dataclass

from kernelevo.judge import compare, generality, guards, inputs, shapes, verdicts
from kernelevo.judge.shapes import describe


def forward(model, args: list):
    return model(*args)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


@dataclass(frozen=True)
class Trial:
    args: list
    label: str  # says what was drawn: "trial 3 (scaled x1/8)", "derived shape (...)"
    kind: str = "draw"  # draw, test, or one of GENERAL's keys


# Trials that check the candidate beyond the benchmark's own weights, values and shapes: a
# mismatch there gets its own reason, and a hint on what kind of kernel fails that way.
GENERAL = {
    "weights": ("weight_specific", "correct only with the default-initialised weights"),
    "range": ("value_range", "numerically fragile at magnitudes the reference handles"),
    "shape": ("shape_specific", "correct only on the task's own shapes"),
}


class Reference:
    """The task's model in its own dtype (TF32 off), in float64 where it runs, and a twin that
    probes inputs (is the output finite?) without advancing the reference's own state: a
    recurrent task keeps its hidden state across calls, and so must an honest candidate."""

    def __init__(self, model):
        self.model = model
        self.model64 = _copy(model, double=True)  # float64 is a refinement, not a requirement
        self.twin = _copy(model)

    def plain(self, args: list):
        return forward(self.model, args)

    def finite_on(self, args: list) -> bool:
        """Whether the reference runs on `args` with a finite output, probed on the twin with the values
        shuffled (inputs.shuffled: no output for the trial's own inputs exists before the candidate's)."""
        try:
            return all_finite(forward(self.twin or self.model, inputs.shuffled(args)))
        except Exception:  # noqa: BLE001 - the reference rejects these inputs
            return False

    def keeps_state(self, args: list) -> bool:
        """Whether two calls on the same inputs disagree: the reference carries state from call
        to call (an RNN's hidden state). Then only calls made in lockstep with it compare."""
        if self.twin is None:
            return False
        try:
            first = [t.clone() if hasattr(t, "clone") else t
                     for t in compare.flatten(forward(self.twin, inputs.shuffled(args)))]
            second = compare.flatten(forward(self.twin, inputs.shuffled(args)))
            return not all(_close(a, b) for a, b in zip(first, second)) or len(first) != len(second)
        except Exception:  # noqa: BLE001 - a probe (out of memory on a huge output...): the trials decide
            return False


    def slack(self, args: list, exact) -> list | None:
        """What each output element may differ by on these inputs because the problem is
        ill-conditioned there (generality.conditioning_slack), from the float64 model where it
        runs; its buffers (running statistics) are put back, so later trials see no extra calls."""
        model = self.model64 if exact is not None else self.twin
        if model is None:
            return None
        saved = {name: b.clone() for name, b in model.named_buffers()}
        try:
            if exact is None:
                exact = forward(model, inputs.clone_inputs(args))
            return generality.conditioning_slack(lambda moved: forward(model, moved),
                                                 inputs.to_float64(args) if model is self.model64 else args, exact)
        except Exception:  # noqa: BLE001 - the reference refuses moved inputs: no slack, the plain tolerance
            return None
        finally:
            with_names = dict(model.named_buffers())
            for name, value in saved.items():
                with_names[name].copy_(value)

    def sync(self) -> None:
        """Give the float64 model and the twin the reference's current weights (after a redraw)."""
        state = self.model.state_dict()
        for other in (self.model64, self.twin):
            if other is not None:
                for name, tensor in other.state_dict().items():
                    if name in state and tensor.is_floating_point():
                        tensor.copy_(state[name])

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


def _close(a, b) -> bool:
    """Equal, or within float32 noise (a nondeterministic reduction): without float64 copies, since an
    output can be gigabytes."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype or torch.equal(a, b):
        return a.shape == b.shape and a.dtype == b.dtype
    if not a.is_floating_point():
        return False
    scale = float(b.float().norm())
    return float((a.float() - b.float()).norm()) <= 1e-5 * scale if scale > 0 else False


def _copy(model, double: bool = False):
    try:
        twin = copy.deepcopy(model)
        return twin.double() if double else twin
    except Exception:  # noqa: BLE001 - some modules hold handles that cannot be copied
        return None


def all_finite(out) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in compare.flatten(out)
               if isinstance(t, torch.Tensor) and t.is_floating_point())


def _draws(task, job: dict, device: str, ref: Reference) -> Iterator[Trial]:
    """Fresh draws in the task's domain, each reshaped by one of inputs.TRANSFORMS."""
    for t in range(job["trials"]):
        args, kind = inputs.trial_inputs(task.get_inputs, t, job["seed"], device)
        if kind != "as given" and not ref.finite_on(args):
            # This transform left the task's domain (log of a negative...): redraw plainly.
            args, kind = inputs.trial_inputs(task.get_inputs, t, job["seed"], device, "as given")
        yield Trial(args, f"trial {t + 1} ({kind})")


def _trials(task, job: dict, device: str, ref: Reference, candidate, twins: dict, report: dict,
            checks: list) -> Iterator[Trial]:
    """Every trial in order: draws with the built weights, then with redrawn weights (kept from
    there on): as given, at large values, the task's extra shapes, and the shapes the judge derives."""
    yield from _draws(task, job, device, ref)
    n, seed = job["trials"], job["seed"]

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
        # On a GPU an invalid shape could leave a sticky CUDA error behind: check it on the meta
        # device. On the CPU nothing sticks, and a real run on the twin costs less than meta's imports.
        runs = shapes.meta_check(lambda: task.Model(*task.get_init_inputs())) if device.startswith("cuda") else None
        if runs is None or not runs(base):  # meta cannot run this reference: probe on the twin
            runs = ref.finite_on
        fixed = frozenset(a for a in task.get_init_inputs() if isinstance(a, int) and not isinstance(a, bool))
        variants, said = shapes.derive(lambda: base, runs, fixed)
        report["notes"].extend(said)
        for v in variants:
            yield Trial(v.args, f"derived shape ({v.label}: {v.shapes})", "shape")


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


class _Skip(Exception):
    """A derived shape on which the reference's own output is not finite: not a test of anything."""


def check(task, reference, candidate, job: dict, device: str, threads: guards.ThreadWatch,
          on_trial=lambda label: None) -> dict:
    """All trials; returns the result fields, or raises guards.Rejected. `on_trial` hears each
    trial's label before it runs (the parent names it if the process dies there)."""
    import torch

    ref = Reference(reference)
    twins = generality.value_twins(ref.model, candidate)  # before anything runs: values still equal
    stateful = ref.keeps_state(inputs.trial_inputs(task.get_inputs, 0, job["seed"], device, "as given")[0])
    watch = guards.ReferenceWatch(ref.model, ref.model64)
    state = {"previous_args": None, "previous_out": [], "previous_values": None, "sizes": [], "stateful": stateful}
    checks: list[str] = []  # what the weights and value-range trials did, for the verdict's notes
    report = {"mode": job.get("shapes", "general"), "supported": [], "refused": [], "notes": []}
    trials, worst = 0, None
    try:
        with torch.no_grad():
            for t, trial in enumerate(_trials(task, job, device, ref, candidate, twins, report, checks)):
                on_trial(trial.label)
                try:
                    result = _trial(t, trial, ref, candidate, watch, threads, device, state)
                except _Skip:
                    report["notes"].append(f"{trial.label}: not judged, the reference's output is not finite there")
                    continue
                except Exception as exc:  # noqa: BLE001 - a refusal of a derived shape, or a failure
                    failed = _shape_failure(exc, trial, device, report, trials)
                    if failed is None:
                        continue
                    return failed
                trials += 1
                if isinstance(result, compare.Mismatch):
                    return _incorrect(result, trial, trials)
                if trial.kind in ("draw", "test", "shape") and describe(trial.args) not in report["supported"]:
                    report["supported"].append(describe(trial.args))
                if worst is None or result.rel_l2 >= worst[0].rel_l2:
                    worst = (result, trial.label)
    finally:
        watch.remove()
    match, label = worst
    where = f"{label}, index {match.index}" if match.index else label
    if stateful:
        checks.append("the reference keeps state across calls: outputs are compared only in lockstep with it")
    return {"verdict": "ok", "reason": "", "message": "", "shapes": report, "checks": checks,
            "stateful": stateful, "correctness": dict(
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
            report["refused"].append(f"{describe(trial.args)}: {failure.message}")
            return None
    return {"verdict": failure.verdict, "reason": failure.reason, "message": f"{trial.label}: {failure.message}",
            "excerpt": failure.excerpt}


def _trial(t: int, trial: Trial, ref: Reference, candidate, watch, threads, device: str, state: dict):
    args, label = trial.args, trial.label
    if t == 1:  # the same addresses as the first trial, holding new values
        moved = _same_place(state["previous_args"], args)
        args = moved if moved is not None else args
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
        raise _Skip
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


def _incorrect(m: compare.Mismatch, trial: Trial, trials: int) -> dict:
    label = trial.label
    where = f"{label}, index {m.index}" if m.index else label
    reason, hint = GENERAL.get(trial.kind, (m.reason, ""))
    return {"verdict": "incorrect", "reason": reason, "message": f"{label}: {m.message}" + (f" ({hint})" if hint else ""),
            "excerpt": "", "correctness": dict(trials=trials, passed=trials - 1, rel_l2=m.rel_l2,
                                               max_abs=m.max_abs, max_rel=m.max_rel, where=where)}
