"""The checker: correctness trials decided in a process that never loads candidate code.

Native code in the candidate's process can reach the interpreter there and change anything in it:
a tolerance table, the comparison's code, the verdict it reports. So the checker holds the
reference, the seeds, the trial plan and the tolerances, and compares; the candidate's worker only
runs the candidate on the inputs the checker hands it (trials/arena.py) and hands back what it
returned (trials/correctness.py). The judging process relays their messages and takes the
checker's verdict on correctness; a worker can only make its own verdict worse.

Every trial draws fresh inputs, computes the reference's output here (in the task's dtype and in
float64), hands the inputs over, and compares what comes back. The checker's memory is its own: the
reference's outputs are never where the candidate can read them. Trial 2 writes new values into the
memory of trial 1's inputs (the same tensors in the worker, version counters unmoved): a result
cached by address or tensor identity comes out stale there, and is `input_cache`.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from kernelevo.judge.job import Job
from kernelevo.judge.trials import arena, clock, compare, generality, guards, handback, inputs, reference, shapes, sites
from kernelevo.judge.trials.correctness import sync
from kernelevo.judge.trials.reference import Reference, Skip
from kernelevo.judge.trials.shapes import describe

WHERE = "a checker process that never loaded candidate code"
# Triton's interpreter (a Triton candidate on the CPU) runs each program of a grid in Python: an honest
# RMSNorm-gate at 2048x2048 ran out of 120 s. Its verdict is untimed, so the checker's clock is not run (its
# block was 8 calls more, confirming no figure), and it takes this many random draws, not --trials.
INTERPRETER_DRAWS = 2
TIMED_FIRST = 1000  # the timed input sets are drawn as trials TIMED_FIRST, TIMED_FIRST + 1, ... (run/jobs.py)
FRESH_FIRST = 2000  # and the two sources of the fresh-values check's inputs (measure/crosscheck.py)


@dataclass(frozen=True)
class Trial:
    args: list
    label: str  # says what was drawn: "trial 3 (scaled x1/8)", "derived shape (...)"
    kind: str = "draw"  # draw, test, or one of handback.GENERAL's keys
    init: tuple | None = None  # constructor arguments both models are rebuilt with (a derived shape)
    shown: str = ""  # what the shape report lists for it; else its inputs' shapes

    @property
    def shapes(self) -> str:
        return self.shown or describe(self.args)


class Refused(Exception):
    """The candidate refused a derived shape cleanly: it is specialized, not wrong."""


def plan_shapes(task, device: str):
    """The derived shapes, planned on shapes alone: on the meta device for a GPU (an invalid shape
    cannot leave a CUDA error behind, and no memory is used), with real tensors on the CPU (meta's
    first use imports for over a second there). None where the reference does not run on meta: the
    trials then plan on the device, with real tensors."""
    where = "meta" if device.startswith("cuda") else "cpu"
    init = tuple(task.get_init_inputs())
    accepts = reference.acceptor(task.Model, where)
    args = inputs.draw(task.get_inputs, where)
    if not accepts(init, args):
        return None
    return shapes.plan(args, init, accepts, reference.parameter_names(task.Model))


class Checker:
    """One candidate's trials, driven from here: `ask` hands a message to the worker (through the
    judging process) and returns its answer."""

    def __init__(self, task, job: Job, device: str, model, ask, memory, on_trial=lambda label: None):
        self.task, self.job, self.device, self.ask = task, job, device, ask
        self.ref = Reference(model)
        self.memory, self.region = memory, arena.Region(memory.flat)
        self.on_trial = on_trial
        self.report = {"mode": job.shapes, "supported": [], "refused": [], "notes": []}
        self.checks: list[str] = []
        self.state = {"previous_values": None, "sizes": [], "places": None, "stateful": False}
        self.sent_arena = False
        self.timed_at: dict | None = None  # on a GPU, the room the worker copies its timed outputs into
        self.interpreted = job.format == "triton" and not device.startswith("cuda")  # its verdict is untimed

    def run(self, planned=None) -> dict:
        """All trials; the result fields of a correctness verdict, `ok` or not."""
        first = inputs.trial_inputs(self.task.get_inputs, 0, self.job.seed, self.device, "as given")[0]
        stateful = self.state["stateful"] = self.ref.keeps_state(first)
        trials, worst, spent, mark = 0, None, {}, time.perf_counter()
        for t, trial in enumerate(self._trials(planned)):
            self.on_trial(trial.label)
            try:
                result = self._trial(t, trial)
            except Skip as skip:
                self.report["notes"].append(f"{trial.label}: not judged, {skip.why}")
                continue
            except Refused as refused:
                self.report["refused"].append(f"{trial.shapes}: {refused}")
                continue
            except handback.Ended as ended:
                return ended.result
            except guards.Rejected as r:
                if trial.kind in ("shape", "site") and r.reason in ("uninitialized_output", "inputs_modified"):
                    # the same kernel passed these checks on the task's own shapes: a wrong answer here
                    mismatch = compare.Mismatch(r.reason, r.message.removeprefix(f"{trial.label}: "))
                    return handback.incorrect(mismatch, trial, trials + 1)
                return {"verdict": "rejected", "reason": r.reason, "message": r.message, "evidence": r.evidence}
            trials += 1
            if isinstance(result, compare.Mismatch):
                return handback.incorrect(result, trial, trials)
            if trial.kind in ("draw", "test", "shape", "site") and trial.shapes not in self.report["supported"]:
                self.report["supported"].append(trial.shapes)
            if worst is None or result.rel_l2 >= worst[0].rel_l2:
                worst = (result, trial.label)
            now = time.perf_counter()
            spent[trial.kind] = round(spent.get(trial.kind, 0.0) + now - mark, 4)
            mark = now
        match, label = worst
        where = f"{label}, index {match.index}" if match.index else label
        if stateful:
            self.checks.append("the reference keeps state across calls: outputs are compared only in lockstep with it")
        clocked = self._clock()
        if "verdict" in clocked:
            return clocked["verdict"]
        spent["clock"] = round(time.perf_counter() - mark, 4)
        return {"verdict": "ok", "reason": "", "message": "", "shapes": self.report, "checks": self.checks,
                "stateful": stateful, "trial_s": spent, "clock": clocked, "correctness": dict(
            trials=trials, passed=trials, rel_l2=match.rel_l2, max_abs=match.max_abs,
            max_rel=match.max_rel, where=where, tolerance=match.tolerance)}

    def timed(self, answer) -> dict:
        """The outputs of the worker's last timed calls, one per input set it timed on, and of its last
        fresh-values call, compared with the reference's on the same inputs, drawn here from the same seeds
        (run/jobs.py `_input_sets`, inputs.refill). Right while checked and wrong while timed is
        `inconsistent_output`; wrong on new values in the same tensors is `cached_result`. The worker's own
        comparisons of them run where native code of the candidate can change them."""
        if isinstance(answer, dict) and ("failed" in answer or "rejected" in answer):
            return handback.worker_verdict(answer)
        timed = answer.get("timed") if isinstance(answer, dict) else None
        sets = timed.get("sets") if isinstance(timed, dict) else None
        outputs = timed.get("outputs") if isinstance(timed, dict) else None
        fresh = timed.get("fresh") if isinstance(timed, dict) else None
        want = list(range(self.job.input_sets))
        if not isinstance(sets, list) or sorted(sets) != want or not isinstance(outputs, list) \
                or len(outputs) != len(sets) or not isinstance(fresh, dict) or not isinstance(fresh.get("k"), int) \
                or fresh["k"] < 1:
            return handback.protocol(f"timed outputs for input sets {str(sets)[:40]} (not one for each of {want}), "
                                     "or no last fresh-values output")
        try:
            region = self.region.room(self.timed_at) if self.timed_at else self._peer_file(timed.get("file"))
            for i, descs in zip(sets, outputs):
                args = self._plain(TIMED_FIRST + i)
                if (found := self._against(args, handback.read(region, descs, self.device))) is not None:
                    return _rejected("inconsistent_output", f"an output of the timed calls (input set {i + 1}) "
                                     f"differs from the reference ({found.message}); it passed when checked", found)
            sources = [self._plain(FRESH_FIRST + i) for i in range(2)]
            work = inputs.clone_inputs(sources[0])
            inputs.refill(work, sources, fresh["k"])
            if (found := self._against(work, handback.read(region, fresh.get("outputs"), self.device))) is not None:
                return _rejected("cached_result", "with new values in the same input tensors the output is wrong "
                                 f"({found.message}): results must not be cached by address", found)
        except handback.Ended as ended:
            return ended.result
        return {"verdict": "ok", "reason": "", "message": "", "compared": len(sets) + 1}

    def timed_room(self) -> dict | None:
        """On a GPU, where the worker copies its timed outputs after the timing (correctness.Side.timed): a
        room of this process's memory sized from the reference's outputs, one for each input set and one for
        the fresh-values call, and the memory's handle (the worker closes it while it is timed). A copy on the
        device: through a file on the host, 4 outputs of device_copy's 128 MiB took most of a second a job."""
        import torch

        if not self.device.startswith("cuda"):
            return None
        with torch.no_grad():
            expected, _, _ = self.ref(inputs.clone_inputs(self._plain(TIMED_FIRST)))
        outs = list(compare.flatten(expected))
        size = arena._aligned((self.job.input_sets + 1) * (arena.nbytes(outs) + arena.ALIGN * (len(outs) + 1)))
        self._ensure(size)
        self.memory.flat[:size].fill_(255)  # nothing of the trials left where an output is expected
        self.state["places"], self.sent_arena = None, False
        self.timed_at = {"offset": 0, "size": size}
        return {"room": self.timed_at, "arena": self.memory.info()}

    def _against(self, args: list, outs: list) -> compare.Mismatch | None:
        """The reference's output on `args` against outputs the worker handed back; the mismatch, if any."""
        import torch

        with torch.no_grad():
            expected, exact, _ = self.ref(inputs.clone_inputs(args))
        result = handback.against(outs, expected, exact)
        return result if isinstance(result, compare.Mismatch) else None

    def _clock(self) -> dict:
        """The checker's own clock on a block of the candidate's calls (trials/clock.py); a wrong output
        there, or the worker's failure, as {"verdict": ...}."""
        if self.interpreted:
            return {"confirmed": False, "why": "not timed: Triton's interpreter (the verdict has no speedup to confirm)"}
        try:
            return clock.confirm(self)
        except handback.Ended as ended:
            return {"verdict": ended.result}
        except Exception as exc:  # noqa: BLE001 - the judge's own failure costs the confirmation, not the verdict
            return {"confirmed": False, "why": f"the checker's clock failed: {type(exc).__name__}: {exc}"[:300]}

    # ---- the plan ----------------------------------------------------------------------------

    def _plain(self, k: int) -> list:
        return inputs.trial_inputs(self.task.get_inputs, k, self.job.seed, self.device, "as given")[0]

    def _trials(self, planned) -> Iterator[Trial]:
        """Every trial in order: draws with the built weights, then with redrawn weights (kept from
        there on): as given, at large values, with opposed scales, the task's extra shapes, and the shapes the judge derives."""
        ref, job = self.ref, self.job
        draws = min(job.trials, INTERPRETER_DRAWS) if self.interpreted else job.trials
        if draws < job.trials:
            self.checks.append(f"{draws} random draws, not {job.trials}: Triton's interpreter runs every program of the "
                               "grid in Python (the derived shapes and the other trials as always)")
        for t in range(draws):
            args, kind = inputs.trial_inputs(self.task.get_inputs, t, job.seed, self.device)
            if kind != "as given" and not ref.finite_on(args):
                # This transform left the task's domain (log of a negative...): redraw plainly.
                args, kind = inputs.trial_inputs(self.task.get_inputs, t, job.seed, self.device, "as given")
            yield Trial(args, f"trial {t + 1} ({kind})")
        n = draws
        args = self._plain(n)
        saved, said = generality.redraw(ref.model, None, {}, job.seed)
        ref.sync()
        if saved and ref.finite_on(args):
            self._tell({"check": "redraw"})  # the worker redraws its copy alike, into the candidate
            self.checks.extend(said)
            yield Trial(args, f"trial {n + 1} (redrawn weights)", "weights")
        elif saved:
            generality.restore(ref.model, None, {}, saved)
            ref.sync()
            self.checks.append("weights not redrawn: the reference's output was not finite with redrawn weights")
        found = generality.large_values(self._plain(n + 1), ref.finite_on)
        if found:
            yield Trial(found[0], f"trial {n + 2} ({found[1]})", "range")
        else:
            self.checks.append("no large-value trial: the reference's output is not finite on inputs scaled x16")
        found = generality.opposed_scales(self._plain(n + 1), ref.finite_on)
        if found:
            yield Trial(found[0], f"trial {n + 3} ({found[1]})", "spread")
        extra = getattr(self.task, "get_test_inputs", None)
        for i, test_args in enumerate(extra() if extra is not None else ()):
            yield Trial(inputs.to_device(list(test_args), self.device), f"test inputs {i + 1}", "test")
        yield from self._site_trials(n + 3)
        if self.report["mode"] == "general":
            base = self._plain(n + 2)
            roles = planned or shapes.plan(base, tuple(self.task.get_init_inputs()),
                                           reference.acceptor(self.task.Model, self.device),
                                           reference.parameter_names(self.task.Model))
            found, said = shapes.variants(base, roles)
            self.report["notes"].extend([*roles.notes, *said])
            for v in found:
                yield Trial(v.args, f"derived shape ({v.label}: {v.shapes})", "shape", v.init, v.shapes)

    def _site_trials(self, k: int) -> Iterator[Trial]:
        """The task's other call sites in its model (get_call_sites()), each a trial with both models
        built for it, in every shapes mode: they are the task's own sizes, not derived ones."""
        listed = getattr(self.task, "get_call_sites", None)
        if listed is None:
            return
        base = self._plain(k)
        plans, notes = sites.site_plans(base, tuple(self.task.get_init_inputs()), list(listed()),
                                        reference.parameter_names(self.task.Model))
        found, said = shapes.variants(base, shapes.Roles(plans))
        self.report["notes"].extend([*notes, *said])
        for v in found:
            yield Trial(v.args, f"call site ({v.label}: {v.shapes})", "site", v.init, v.shapes)

    def _tell(self, message: dict) -> dict:
        answer = self.ask(message)
        if not isinstance(answer, dict):
            raise handback.Ended(handback.protocol("an answer that is not a message"))
        if "failed" in answer or "rejected" in answer:
            raise handback.Ended(handback.worker_verdict(answer))
        return answer

    # ---- one trial ---------------------------------------------------------------------------

    def _trial(self, t: int, trial: Trial):
        """One trial, on a reference rebuilt for it where its constructor arguments differ from the task's."""
        if trial.init is None:
            return self._compare(t, trial, self.ref)
        rebuilt = _rebuilt_reference(self.task, trial.init, self.job.seed, self.device)
        return self._compare(t, trial, rebuilt)

    def _compare(self, t: int, trial: Trial, ref: Reference):
        import torch

        originals = inputs.clone_inputs(trial.args)
        ref_args = inputs.clone_inputs(originals)
        with torch.no_grad():
            expected, exact, finite = ref(ref_args)
        if trial.kind in ("shape", "site") and not finite:
            raise Skip
        answer, outs, after = self._hand_over(t, trial, originals, expected, ref_args)
        if answer.get("refused") is not None:
            if trial.kind != "shape":  # only a derived shape may be refused
                raise handback.Ended(handback.worker_verdict({"failed": {"verdict": "runtime_error", "reason": "exception",
                                                        "message": str(answer["refused"])}}))
            raise Refused(str(answer["refused"])[:300])
        changed = guards.changed_inputs(originals, after)
        allowed = guards.changed_inputs(originals, ref_args)  # the reference's own in-place updates
        if set(changed) - set(allowed):
            raise guards.Rejected("inputs_modified", f"{trial.label}: the candidate changed input {changed[0]} in "
                                  "place; inputs must be left as they were", {"inputs": changed})
        out = outs if isinstance(expected, (list, tuple)) else (outs[0] if len(outs) == 1 else outs)
        try:
            handback.check_written(out, expected, trial.label)
            unwritten = None
        except guards.Rejected as r:
            unwritten = r
        slack = ref.slack(originals, exact) if trial.kind in ("range", "spread") and not self.state["stateful"] else None
        floor = compare.reference_error(expected, exact, slack) if exact is not None else 0.0
        result = compare.compare(out, expected, exact, floor, slack)
        # only a refusal asks what the reference itself meets: no cost on a pass, every trial's hot path
        misses = compare.reference_misses(expected, exact, floor, slack) \
            if isinstance(result, compare.Mismatch) and exact is not None else 0
        if misses:
            self.checks.append(f"{trial.label}: the reference itself (float32 against float64) misses the elementwise "
                               f"bound at {misses} elements, so only the norm bounds apply there")
            result = compare.compare(out, expected, exact, floor, slack, elementwise=False)
        if isinstance(result, compare.Mismatch) and trial.kind == "range" and exact is not None:
            result = self._other_path(trial, originals, out, (expected, exact, floor, slack), not misses, result)
        if unwritten or isinstance(result, compare.Mismatch):
            if self._tell({"check": "again"}).get("changed"):
                raise guards.Rejected("background_work", f"{trial.label}: the output was incomplete when forward "
                                      "returned and changed afterwards: its work runs outside the call")
            if unwritten:
                raise unwritten
            handback.check_cached(out, expected, self.state, trial.label)
        self.state.update(previous_values=(handback.values(out), handback.values(expected)), sizes=handback.nbytes(expected))
        return result

    def _other_path(self, trial: Trial, originals: list, out, bounds: tuple, elementwise: bool, result):
        """A mismatch on the large-value trial, compared again with the larger floor of torch's other float32
        implementations of the task (Reference.other_path) where that one misses float64 by more: a kernel as
        accurate as one of torch's own float32 paths is not refused for it."""
        expected, exact, floor, slack = bounds
        other = self.ref.other_path(inputs.clone_inputs(originals))
        wider = compare.reference_error(other, exact, slack) if other is not None else 0.0
        if wider <= floor:
            return result
        self.checks.append(f"{trial.label}: torch's other float32 path (SDPA's math backend, convolutions without cuDNN) "
                           f"misses float64 by {wider:.2g}, the reference by {floor:.2g}: the bounds allow that")
        return compare.compare(out, expected, exact, wider, slack, elementwise=elementwise)

    def _hand_over(self, t: int, trial: Trial, originals: list, expected, ref_args: list):
        """Place the inputs, have the worker run the candidate on them, and read back (clones of) its
        outputs and the inputs as the call left them."""
        import torch

        same_place = t == 1 and self.state["places"] is not None and handback.fits(self.state["places"], originals)
        need = arena.nbytes(originals) + arena.nbytes(list(compare.flatten(expected))) * 2 + 4 * arena.ALIGN
        self._ensure(need)
        descs = self.state["places"] if same_place else None
        if descs is not None:
            for d, value in zip(descs, originals):  # new values where the last trial's were
                if isinstance(value, torch.Tensor):
                    arena.rebuild(self.region, d).copy_(value)
        else:
            descs = arena.describe(self.region, originals)
        out_start = arena._aligned(max(self.region.used, arena.nbytes(originals)))
        out = arena.Region(self.region.flat[out_start:], out_start)
        if isinstance(self.memory, arena.CudaMemory):
            out.flat.fill_(255)  # poison: bytes the worker never wrote read as NaN
        sync(self.device)
        message = {"check": "trial", "index": t, "label": trial.label, "kind": trial.kind,
                   "args": descs, "same_place": same_place, "init": arena.encode(trial.init) if trial.init else None,
                   "expect": handback.specs(expected), "single": not isinstance(expected, (list, tuple)), "aliases": guards.aliased_inputs(expected, ref_args),
                   "sizes": self.state["sizes"] + handback.nbytes(originals),
                   "out": {"offset": out_start, "size": out.flat.numel()}}
        if not self.sent_arena:
            message["arena"], self.sent_arena = self.memory.info(), True
        self.state.update(places=descs, same_place_last=same_place)
        answer = self._tell(message)
        if answer.get("refused") is not None:
            return answer, [], originals
        if isinstance(self.memory, arena.HostFile):  # the worker's own file holds what it hands back
            out = self._peer_file(answer.get("file"))
            after = handback.read(out, answer.get("inputs_after"), self.device)
        else:  # in place, in the checker's memory
            after = inputs.clone_inputs([arena.rebuild(self.region, d) for d in descs])
        return answer, handback.read(out, answer.get("outputs"), self.device), after

    def _peer_file(self, file) -> arena.Region:
        """The worker's file of outputs: a name of its folder, not a path it chooses."""
        import os

        if not isinstance(file, dict) or not isinstance(file.get("number"), int) or not self.job.peer:
            raise handback.Ended(handback.protocol("no file of outputs"))
        path = arena.Path(self.job.peer) / f"arena-out-{file['number']}"
        try:
            size = min(int(file.get("size", 0)), os.stat(path).st_size)
            memory = arena.HostFile(path, size, create=False, writable=False)
        except (OSError, ValueError) as exc:
            raise handback.Ended(handback.protocol(f"a file of outputs the checker cannot read ({exc})")) from exc
        return arena.Region(memory.flat)  # read into copies at once (handback.read): the mapping may go

    def _ensure(self, need: int) -> None:
        """An arena of at least `need` bytes; a bigger one replaces it (the old one stays mapped by the
        worker until its process ends, and is never reused for anything of the checker's)."""
        if self.memory.flat.numel() >= need:
            return
        self.memory = self.memory.grown(max(need, 2 * self.memory.flat.numel()))
        self.region = arena.Region(self.memory.flat)
        self.state["places"], self.sent_arena = None, False


def _rejected(reason: str, message: str, found: compare.Mismatch) -> dict:
    return {"verdict": "rejected", "reason": reason, "message": message,
            "evidence": {"mismatch": found.message, "compared": WHERE}}


def _rebuilt_reference(task, init: tuple, seed: int, device: str) -> Reference:
    """The reference built again with a derived shape's constructor arguments, under the same seed and
    with the same redrawn weights the worker gives its candidate (reference.Rebuilt's other half)."""
    import torch

    ref = Reference(reference.build(task, init, seed, device), probes=False)
    with torch.no_grad():
        generality.redraw(ref.model, None, {}, seed)
    ref.sync()
    return ref


