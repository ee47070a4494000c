"""Driving one job through its worker (and, for a candidate, its checker): send the job, follow the
events, relay the trials between the two, enforce the limits, and make the result.

A candidate job has two processes: the worker, which runs the candidate, and the checker
(trials/checker.py), which holds the reference, hands over each trial's inputs and compares what
comes back. They never talk directly: the checker's `to_worker` events are written to the worker's
input here, the worker's `to_checker` events to the checker's. Only the checker's verdict on
correctness counts; the worker's result gives the rest (build, timing, its own checks), and where it
is not `ok` it stands, since a worker can only make its own verdict worse.
"""
from __future__ import annotations

import contextlib
import math
import secrets
import select
import subprocess
import time

from pathlib import Path

from kernelevo.judge import verdicts
from kernelevo.judge.run import bounds, inline, launcher, sandbox
from kernelevo.judge.trials import clock
from kernelevo.judge.job import Job
from kernelevo.judge.job_result import finite

COMPARED = "in a checker process that never loaded candidate code"
BUILDS = ("in a folder of the candidate's own, named by a secret the judging process keeps; a kept library or "
          "cubin that is not what its record says is built again")
SETTLE_S = 30.0  # how long a checker may take to end a job it was told is over
# The bounds trial's time is added to the run's, once: its checker has a limit of its own (bounds.LIMIT_S), and
# past it the verdict says "indices not checked". Charged to the run, a Triton conv whose autotuner ran under
# memcheck on five shapes used the whole 120 s, and two kernels that had passed every trial were refused
# `run_timeout` in a run's final judgement (issue 52, H200, 2026-11-30). The slack covers killing the checker.
BOUNDS_SLACK_S = 30.0


class WorkerDied(Exception):
    def __init__(self, worker=None):
        super().__init__()
        self.worker = worker


def audit(result: dict, token: str | None, expected: str, granted: float | None,
          released: float | None = None) -> dict:
    """Check a worker's result against what this process saw, with its own clock.

    The candidate's code runs inside the worker, so in principle it can write to the event pipe
    too. A passing result must repeat the token sent with `go` (which code that ran before it
    cannot know), and cannot claim more device time than elapsed here between `go` and the
    result. The device time on record is this process's measurement (from `go` to the worker's
    `release`, or to its result), not the worker's.
    """
    claims_time = verdicts.passed(result) or "timing" in result
    if granted is None:
        if claims_time:
            return _forged("a passing result arrived before the worker was given the device")
        return result
    if token != expected:
        return _forged("a result line without the token the judge sent with the device")
    elapsed = time.monotonic() - granted
    claimed = _claimed_s(result)
    if claimed is None:
        return _forged("the worker reported device time that is not a finite number",
                       {"device_s": repr(result.get("device_s"))[:80], "samples_ms": repr(result.get("samples_ms"))[:200]})
    if claimed > 1.05 * elapsed + 0.05:
        return _forged(f"the worker reported {claimed:.3f} s of device time, but only {elapsed:.3f} s passed",
                       {"reported_s": claimed, "elapsed_s": elapsed})
    result.pop("samples_ms", None)
    return {**result, "device_s": (released or time.monotonic()) - granted}


def _claimed_s(result: dict) -> float | None:
    """The device time a worker's own figures claim, in seconds; None where any is not a finite number. Read
    before JobResult checks the rest, so a forged type must not raise, and a NaN must not pass unweighed
    (max(0.5, nan) is 0.5)."""
    samples = result.get("samples_ms") or {}
    device_s = result.get("device_s")
    if not isinstance(samples, dict):
        return None
    figures = [finite(ms) for ms in samples.values()]
    seconds = 0.0 if device_s is None else finite(device_s)
    if seconds is None or None in figures:
        return None
    total = sum(figures) / 1000
    return max(seconds, total) if math.isfinite(total) else None


def _forged(message: str, evidence: dict | None = None) -> dict:
    return {"verdict": "rejected", "reason": "forged_report", "message": message, "evidence": evidence or {}}


def drive(worker, job: Job, limits, hold_device, hold_machine=None, checker=None) -> dict:
    """Send the job, follow its events, enforce the limits; always return a result dict, with what
    held the worker (`confinement`) and what its sandbox refused (a candidate's `io_access`).
    `hold_device()` is the context that gives this worker the device for its run phase;
    `hold_machine()`, where given, the one that pauses every other worker while it times on the CPU.
    `checker`: the checker's process for a candidate job (executor.WorkerPool.checker)."""
    job = worker.sandbox.assign(job)  # its build folder, lent to this worker until it is killed
    if job.format == "inline":  # the derived headers its build reads, which no worker may write
        inline.prepare_for(Path(job.cache_dir), worker.info or {})
    follow = _Follow(worker, job, limits, checker)
    result = follow.run(hold_device, hold_machine)
    if checker is not None:
        checker.reusable = follow.settle()  # the executor keeps it for the next job only then
        result = merge(result, follow.checked, follow.timed)
    if worker.info and worker.info.get("confinement"):
        result["confinement"] = worker.info["confinement"]  # said before any candidate code ran
        if checker is not None:
            result["confinement"] = {**result["confinement"], "comparison": COMPARED, "builds": BUILDS}
    if job.bounds:  # the bounds trial as its launcher reported it (reading the reports may wait for one)
        result = launcher.verdict(result, job, worker.device, worker.sandbox.bounds_reports())
    return sandbox.judged(result, worker.sandbox.refusals(), candidate=job.runs_candidate)


def merge(result: dict, checked: dict | None, timed: dict | None = None) -> dict:
    """The worker's result with the checker's verdicts, on the trials and on the outputs of the timed calls:
    the checker's where one is not `ok`; the worker's own where that is not `ok` (no better than it says);
    else both together. A timed result whose timed outputs the checker did not compare is not taken."""
    if checked is None:
        if not verdicts.passed(result):
            return result
        return _forged("a passing result arrived before the checker had compared the candidate's outputs "
                       "(the trials it sent were not all answered)", {"worker_claimed": result.get("verdict")})
    for verdict in (checked, timed):
        if verdict is not None and not verdicts.passed(verdict):
            kept = {k: result[k] for k in ("build_s", "resources", "device_s", "worker_s", "policy") if k in result}
            notes = [n for n in result.get("notes", []) if n]
            return {**kept, **verdict, "notes": notes}
    if not verdicts.passed(result):
        return result
    if timed is None and "timing" in result and not checked.get("stateful"):
        return _forged("a timed result arrived without the outputs of its timed calls, which the checker compares",
                       {"worker_claimed": result.get("verdict")})
    clocked = checked.get("clock")
    if (disbelieved := clock.judge(result, clocked)) is not None:
        return disbelieved
    evidence = {**(result.get("evidence") or {}), "trial_s": checked.get("trial_s", {}),
                "checker": {**checked.get("checker", {}), "timed_outputs": (timed or {}).get("compared", 0)},
                "clock": clocked or {}, **({"threads": timed["threads"]} if timed and "threads" in timed else {})}
    notes = [*result.get("notes", []), *checked.get("checks", [])]
    if clocked and not clocked.get("confirmed") and "timing" in result:
        notes.append(f"times not confirmed by the checker's clock: {clocked.get('why', '')}")
    return {**result, "correctness": checked["correctness"], "shapes": checked.get("shapes"),
            "notes": notes, "evidence": evidence}


class _Follow:
    """One job's events, from its worker and its checker, until the worker's result."""

    def __init__(self, worker, job: Job, limits, checker=None):
        self.worker, self.job, self.limits, self.checker = worker, job, limits, checker
        self.checked: dict | None = None
        self.timed: dict | None = None  # the checker's verdict on the outputs of the timed calls
        self.phase, self.deadline = "build", worker.clock() + limits.build
        self.token, self.granted, self.released = secrets.token_hex(16), None, None
        self.trial = ""  # the correctness trial under way: a crash or hang there names its shape
        self.answered = False  # the worker's result is in: its end of the pipe closing is expected
        # The device is given only once the checker is prepared too, so that its start (a CUDA context,
        # the reference, the shape plan) is not paid from held device time.
        self.prepared = checker is None
        self.asked = False  # the worker asked for the device
        self.ending = False  # the checker has ended the trials
        self.bounds = False  # the worker said its bounds trial starts (honoured once, where the job asks for one)

    def run(self, hold_device, hold_machine) -> dict:
        with contextlib.ExitStack() as held, contextlib.ExitStack() as machine:
            try:
                self.worker.send(self.job.to_dict())
                if self.checker is not None:
                    self._tell_checker(self._check_job().to_dict())
                while True:
                    who, event = self._next()
                    if who is self.checker:
                        self._from_checker(event)
                        event = {"event": "checker"}  # the grant may have waited for it
                    done = self._from_worker(event, held, machine, hold_device, hold_machine)
                    if done is not None:
                        return self._finish(done)
            except TimeoutError:
                limit = self.limits.build if self.phase == "build" else self.limits.run
                if self.bounds:
                    limit += bounds.LIMIT_S + BOUNDS_SLACK_S
                return {"verdict": "timeout", "reason": f"{self.phase}_timeout",
                        "message": f"no verdict within {limit:.0f} s of {self.phase}{self.trial}; the process was killed",
                        "excerpt": verdicts.tail(self.worker.log_text())}
            except (WorkerDied, BrokenPipeError) as exc:
                return self._died(getattr(exc, "worker", None))

    def _tell_checker(self, message: dict) -> None:
        try:
            self.checker.send(message)
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied(self.checker) from exc

    def _check_job(self) -> Job:
        import dataclasses

        # the checker never sees the candidate's source; it learns where the worker writes its outputs
        return dataclasses.replace(self.job, kind="check", candidate_source=None, candidate_path=None,
                                   candidate_hash=None, build_dir="", peer=self.worker.sandbox.plan.scratch,
                                   peer_pid=int(getattr(getattr(self.worker, "proc", None), "pid", 0) or 0))

    def _next(self):
        """(who, event): the next event of the worker or the checker, the checker's first."""
        while True:
            for who in (self.checker, self.worker):
                if who is not None and (event := who.buffered()) is not None:
                    return who, event
            left = self.deadline - self.worker.clock()
            if left <= 0:
                raise TimeoutError
            live = [w for w in (self.worker, self.checker) if w is not None and not getattr(w, "ended", False)]
            ready, _, _ = select.select([w._fd for w in live], [], [], left)
            for w in live:
                if w._fd in ready:
                    try:
                        w.read_some()
                    except WorkerDied:
                        expected = self.answered if w is self.worker else self.checked is not None
                        if not expected or not [x for x in live if x is not w]:
                            raise
                        w.ended = True  # each exits once it has said its last

    def _from_checker(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "ready":
            self.checker.info = event
        elif kind == "prepared":  # its reference built and its shapes planned: it is ready for the trials
            self.prepared = True
        elif kind == "trial":
            self.trial = f" ({event.get('label', '')})"
        elif kind == "to_worker":
            message = event.get("message")
            if isinstance(message, dict) and message.get("check") == "end":
                self.ending = True  # its verdict follows: the worker may answer before it is read
            self.worker.send(message)
        elif kind == "result":
            self.checked = {k: v for k, v in event.items() if k not in ("event", "token")}
        elif kind == "timed":
            self.timed = {k: v for k, v in event.items() if k not in ("event", "token")}

    def _from_worker(self, event: dict, held, machine, hold_device, hold_machine) -> dict | None:
        kind = event.get("event")
        if kind == "gpu" and self.granted is None:
            self.asked = True
        if self.asked and self.prepared and self.granted is None:
            held.enter_context(hold_device())
            self.phase, self.deadline = "run", self.worker.clock() + self.limits.run
            # before `go`: descheduled between the two (64 ms once, loaded), this process would
            # count less device time than the worker, whose clock starts at `go` (audit)
            self.granted = time.monotonic()
            self.worker.send({"go": True, "token": self.token})
            if self.checker is not None:
                self._tell_checker({"go": True})
        elif kind == "to_checker" and self.checker is not None:
            self._tell_checker({"answer": event.get("message")})
        elif kind == "quiet" and self.granted is not None and self.released is None:
            machine.close()
            waited = machine.enter_context(hold_machine()) if hold_machine else 0.0
            self.worker.send({"quiet": True, "waited_s": waited})
        elif kind == "loud":
            machine.close()
        elif kind == "release" and self.granted is not None and self.released is None:
            machine.close()
            held.close()  # the worker finishes on the CPU; the device may go to the next
            self.released = time.monotonic()
        elif kind == "trial":
            self.trial = f" ({event.get('label', '')})"
        elif kind == "bounds" and self.job.bounds and self.granted is not None and not self.bounds:
            self.bounds = True
            self.deadline += bounds.LIMIT_S + BOUNDS_SLACK_S
            self.trial = " (after the bounds trial began)"
        elif kind == "result":
            result = {k: v for k, v in event.items() if k not in ("event", "token")}
            return audit(result, event.get("token"), self.token, self.granted, self.released)
        return None

    def _finish(self, result: dict) -> dict:
        """The worker's result; where it passed, the checker's verdict too. An honest worker answers every
        trial before it goes on, so by now the checker has given it; one still waiting for an answer
        hears that the job is over (settle) and ends it without an `ok`."""
        self.answered = True
        deadline = time.monotonic() + SETTLE_S
        while self.checker is not None and self.checked is None and self.ending and time.monotonic() < deadline:
            try:
                who, event = self._next()
            except (WorkerDied, TimeoutError):
                break
            if who is self.checker:
                self._from_checker(event)
        return result

    def settle(self) -> bool:
        """Tell the checker the job is over and read what it still says, up to its `idle`: it is then
        ready for the next job (True). One that does not get there soon is not kept."""
        if self.checker is None:
            return False
        deadline = time.monotonic() + SETTLE_S
        try:
            self.checker.send({"done": True})
            while True:
                while (event := self.checker.buffered()) is None:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([self.checker._fd], [], [], left)[0]:
                        return False
                    self.checker.read_some()
                if event.get("event") == "idle":  # what came before (a verdict on a job already over) is moot
                    return True
        except (WorkerDied, OSError):
            return False

    def _died(self, who) -> dict:
        if who is not None and who is self.checker:
            return {"verdict": "runtime_error", "reason": "checker",
                    "message": f"the checker's process ended before its verdict{self.trial}",
                    "excerpt": verdicts.tail(self.checker.log_text())}
        try:
            self.worker.proc.wait(timeout=SETTLE_S)
        except subprocess.TimeoutExpired:  # its pipe is closed but it lives on (paused by a CPU hold): ended here
            self.worker.kill()
        code = self.worker.proc.returncode
        failure = verdicts.classify_exit(-9 if code is None else code, self.worker.log_text(), self.phase + self.trial)
        return {"verdict": failure.verdict, "reason": failure.reason,
                "message": failure.message, "excerpt": failure.excerpt}
