"""The bounds trial's launcher: a process forked by a judge worker before the worker confines itself,
confined on its own, that runs the memory checkers of the bounds trial (run/bounds.py) for it.

compute-sanitizer's front end talks to the process it checks over a UNIX stream socket: the checked
process listens on an abstract name (@nv_target_process_PID) and the front end connects (H200, CUDA
13.0, 2026-11-28: NV_SANITIZER_INJECTION_TRANSPORT_TYPE=uds). A worker may make no UNIX stream socket:
with one a candidate could reach another program's (an SSH agent's, a container runtime's). A filter
can only narrow what its process's children may do, so the front end cannot be a child of the worker.
The launcher is forked first, and
- its Landlock domain is its own, with the worker's rules: a sibling of the worker's, so code in the
  worker cannot trace it, signal it or read its memory;
- its seccomp filter is the worker's with UNIX stream sockets let through; its listener goes to the
  judging process with the worker's, so the same supervisor answers both (it opens the thread-name
  files the CUDA driver writes, which Landlock alone refuses, and names every refusal);
- the checked process (run/bounds_target.py) refuses connect() on all its threads before it loads
  anything of the job: it listens and the front end connects, so the candidate in it reaches no socket.
It takes one job at a time from the worker over a socket pair and answers with the outcome, which it
first reports to the judging process on the worker's seccomp channel (the worker has closed its end of
that by the time any candidate code runs). The judging process decides by that report (verdict()): a
worker that says every index was in bounds is not taken at its word, and each report names the job it checked
(digest), so that a worker cannot have another candidate checked in its place. It ends when the worker does. Where the kernel has no Landlock there is no launcher, and the worker runs the
trial itself as before (on a GPU it is then skipped: bounds.SANDBOXED).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket
import sys
import traceback
from pathlib import Path

from kernelevo.judge.job import Job
from kernelevo.judge.run import bounds, landlock, seccomp
from kernelevo.judge.verdicts import passed

_worker_end: socket.socket | None = None  # in a worker that forked one: its end of the launcher's socket pair
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
WHERE = "the bounds trial's launcher (the candidate's sandbox, UNIX stream sockets let through for its checker)"


def start(read: list[Path], write: list[Path], write_files: list[Path], version: int, channel: int) -> tuple[int, ...]:
    """In the worker, before its own filter and Landlock (sandbox.confine): fork the launcher. Returns
    its filter's listener, which the worker sends to the judging process with its own (seccomp.install),
    or () where it has none (it then does not serve). `channel`: the worker's socket to the judging
    process, which the worker closes once its filter is set; the launcher keeps it for its reports."""
    global _worker_end
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid:
        theirs.close()
        _, fds, _, _ = socket.recv_fds(ours, 16, 1)
        if not fds:
            ours.close()
            return ()
        _worker_end = ours
        return tuple(fds)
    try:  # the launcher: nothing of the worker's but its log (stdout, stderr), this pair and the channel
        ours.close()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        keep = sorted({theirs.fileno(), channel})
        for low, high in zip([3, *(k + 1 for k in keep)], [*keep, os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low, high)
        listener = seccomp.install_for_launcher()
        if listener < 0:
            theirs.send(b"none")
            return
        socket.send_fds(theirs, [b"fd"], [listener])
        os.close(listener)
        if "files" in landlock.restrict(read, write, write_files, version):
            _serve(theirs, socket.socket(fileno=channel))
    except BaseException:  # noqa: BLE001 - the worker hears that its launcher is gone; the log says why
        traceback.print_exc()
    finally:
        os._exit(0)


def _serve(sock: socket.socket, judging: socket.socket) -> None:
    """One job after another, until the worker's end closes. Each outcome goes to the worker, which goes on
    with it, and to the judging process (`judging`), whose copy decides the verdict (verdict())."""
    lines = sock.makefile("r", encoding="utf-8")
    for line in lines:
        request = json.loads(line)
        device = str(request.get("device"))
        job = Job.from_dict(request["job"])
        if device.startswith("cuda"):  # a worker sees its one GPU as cuda:0 (executor._child_device), as does this
            device = "cuda:0"
        if not _DEVICE.fullmatch(device):
            outcome = bounds.Outcome("", None, f"bounds trial not run: no device named {device[:40]!r}", 0.0)
        else:
            outcome = bounds.run(job, device, launched=True)
        said = dataclasses.asdict(outcome)
        judging.sendall((json.dumps({**said, "job": digest(job, device)}) + "\n").encode())  # which job, where
        sock.sendall((json.dumps(said) + "\n").encode())


def digest(job: Job, device: str) -> str:
    """What names the job a bounds trial checked and where: the sources, the settings its shapes come from
    (not its paths, which the worker moves into its own folder), and the kind of device (a GPU job asked of
    on the CPU would be skipped there; the judging process's cuda:3 is its worker's cuda:0)."""
    named = [job.kind, job.task_source, job.candidate_source, job.seed, job.shapes, job.format, device.split(":")[0]]
    return hashlib.sha256(json.dumps(named).encode()).hexdigest()


def run(job: Job, device: str) -> bounds.Outcome:
    """The bounds trial of `job`: by this worker's launcher where it has one, else here (an unconfined
    worker, or a kernel without Landlock)."""
    if _worker_end is None:
        return dataclasses.replace(bounds.run(job, device), where="the worker's process")
    why = bounds.applies(job, device, launched=True)
    if why:
        return bounds.Outcome("", None, f"bounds trial skipped: {why}", 0.0)
    try:
        _worker_end.sendall((json.dumps({"job": job.to_dict(), "device": device}) + "\n").encode())
        line = _worker_end.makefile("r", encoding="utf-8").readline()
    except OSError:
        line = ""
    if not line:
        print("kernelevo: the bounds trial's launcher is gone (its log says why)", file=sys.stderr)
        return bounds.Outcome("", None, "bounds trial not run: its launcher is gone: indices not checked", 0.0)
    return bounds.outcome_from(json.loads(line), WHERE)


def verdict(result: dict, job: Job, device: str, reports: list[dict] | None) -> dict:
    """The worker's result with the bounds trial as its launcher reported it to the judging process, not as
    the worker says (`reports`: sandbox.Parent.bounds_reports; None where the worker forked no launcher,
    and the worker's word is all there is). An access it saw is `out_of_bounds` whatever the worker
    reported; where it reported nothing, no index was checked, whatever the worker's notes say."""
    if reports is None or not job.bounds or not passed(result) or bounds.applies(job, device, launched=True):
        return result
    notes = [n for n in result.get("notes", []) if not str(n).startswith("bounds trial")]
    evidence = dict(result.get("evidence") or {})
    mine = digest(job, device)
    others = [r for r in reports if r.get("job") != mine]
    if others:  # only code in the worker's process asks the launcher: an honest worker asks of its own job
        return {**result, "verdict": "rejected", "reason": "forged_report", "notes": notes,
                "message": f"the bounds trial's launcher was asked to check {len(others)} job(s) other than the one "
                           "this worker was given: its process sent it another candidate, to be told that one's indices",
                "evidence": {**{k: v for k, v in evidence.items() if k != "bounds"}, "bounds_jobs": len(reports),
                             "verdict_before": "ok"}}
    if not reports:
        evidence.pop("bounds", None)
        note = "bounds trial: its launcher reported no outcome: indices not checked"
        return {**result, "notes": [*notes, note], "evidence": evidence}
    outcome = bounds.outcome_from({k: v for k, v in reports[-1].items() if k != "job"}, WHERE)
    evidence["bounds"] = bounds.evidence(outcome)
    if outcome.access is None:
        return {**result, "notes": [*notes, outcome.note], "evidence": evidence}
    return {**result, "verdict": "rejected", "reason": "out_of_bounds", "message": bounds.message(outcome),
            "notes": notes, "evidence": {**evidence, "verdict_before": "ok"}}
