"""A check job: the checker's process (trials/checker.py), as worker.main runs it. It never loads candidate
code; it builds the reference, plans the derived shapes while the candidate builds, and once the judging
process says go (the candidate's worker then holds the device) drives the trials and reports the verdict."""
from __future__ import annotations

import os

from kernelevo.judge.job import Job
from kernelevo.judge.run import triton_jobs
from kernelevo.judge.trials import arena, gate, guards, inputs
from kernelevo.judge.trials.checker import WHERE, Checker, plan_shapes
from kernelevo.judge.verdicts import passed


class Done(Exception):
    """The judging process says the job is over (its worker has reported, or is gone)."""


def serve(job: Job, device: str, channel) -> None:
    """The checker's process, as worker.main starts it with its first check job: one job after another.
    It never loads candidate code, so it is kept from job to job (executor.WorkerPool.checker): its CUDA
    context is made once, not beside every candidate being timed. After each job it waits for `done`,
    says `idle`, and frees what the job's worker could map only then (that worker is gone by its next job)."""
    try:
        _serve(job, device, channel)
    except SystemExit:  # the judging process closed this one's input: no teardown to wait for
        os._exit(0)


def _serve(job: Job, device: str, channel) -> None:
    import torch

    from kernelevo.judge.run import sandbox

    while True:
        try:
            if not _one(job, device, channel):
                _receive(channel)  # only `done` ends a job
        except Done:
            pass
        channel.send("idle")
        job = sandbox.localize(Job.from_dict(channel.receive()))  # the next job; the end of input ends this process
        arena.release()  # the last job's worker is gone by now
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def _receive(channel) -> dict:
    message = channel.receive()
    if isinstance(message, dict) and message.get("done"):
        raise Done
    return message


def _one(job: Job, device: str, channel) -> bool:
    """One check job: build the reference, plan the derived shapes while the candidate builds, and once
    the judging process says go (the candidate's worker then holds the device) drive the trials. The
    worker hears the verdict's outline at the end; the judging process takes this result. Its arenas are
    freed once the job's worker is gone (arena.release). True where `done` came already (the worker died,
    or answered no more, while a trial waited): a second one is not coming."""
    import torch

    from kernelevo.judge.run import sandbox
    from kernelevo.tasks import load_module

    task = load_module(job.task_source, job.task_path, "task")
    inputs.seed_all(job.seed)  # as inputs.build_models builds the reference the worker copies weights from
    model = task.Model(*tuple(task.get_init_inputs())).to(device)
    planned = None
    if job.shapes == "general":
        try:
            planned = plan_shapes(task, device)
        except Exception:  # noqa: BLE001 - the task's own code on meta tensors: the trials plan with real ones
            planned = None
    first = inputs.draw(task.get_inputs, "meta" if device.startswith("cuda") else device)
    memory = arena.checker_memory(device, 4 * arena.nbytes(first) + (1 << 20), sandbox.scratch_folder())
    channel.send("prepared")  # the judging process gives the candidate the device only now
    _receive(channel)  # go: the candidate's worker holds the device

    ended = []

    def ask(message: dict) -> dict:
        channel.send("to_worker", message=message)
        try:
            reply = _receive(channel)
        except Done:
            ended.append(True)
            return {"failed": {"verdict": "rejected", "reason": "forged_report",
                               "message": "the candidate's process reported a result before answering every trial"}}
        return reply.get("answer") if isinstance(reply, dict) else None

    checker = Checker(task, job, device, model, ask, memory, lambda label: channel.send("trial", label=label))
    try:
        with torch.no_grad():
            result = checker.run(planned)
    except Exception as exc:  # noqa: BLE001 - the reference failing on a trial is the run's failure, as before
        from kernelevo.judge import verdicts

        failure = verdicts.classify_run(exc)
        result = {"verdict": failure.verdict, "reason": failure.reason, "message": failure.message,
                  "excerpt": failure.excerpt}
    # where the comparison ran and how the outputs crossed, for the verdict's evidence
    result["checker"] = {"where": WHERE, "memory": "CUDA IPC" if isinstance(checker.memory, arena.CudaMemory) else "file",
                         "trials_s": result.get("trial_s", {})}
    outline = {k: result.get(k) for k in ("verdict", "reason", "message")}
    timed = not ended and passed(result) and not result.get("stateful") \
        and not triton_jobs.interpreted(job, device)
    channel.send("to_worker", message={"check": "end", "ok": passed(result),
                                       "stateful": bool(result.get("stateful")), **outline,
                                       "timed": _room(checker, result) if timed else None})
    channel.send_result(result)
    return _timed(checker, channel) if timed else bool(ended)


def _room(checker: Checker, result: dict) -> dict | None:
    """Where the worker copies its timed outputs on a GPU (Checker.timed_room). Where this process's device
    memory cannot hold them (out of memory: the room is sized from the reference's outputs), None: they come
    through a file on the host, as on the CPU, and the verdict's notes say so. The verdict stands either way."""
    try:
        return checker.timed_room()
    except Exception as exc:  # noqa: BLE001 - torch.OutOfMemoryError above all; the trials' verdict is made
        result["checks"] = [*result.get("checks", []), "the timed outputs came through a file on the host: the "
                            f"checker's device memory could not hold them ({type(exc).__name__}: {str(exc)[:120]})"]
        return None


def _timed(checker: Checker, channel) -> bool:
    """After the timing, the worker hands over the outputs of its last timed calls (correctness.Side.timed);
    they are compared here (Checker.timed) while it still holds the device, and it hears the outcome. True
    where `done` came instead: the worker ended without timing (a later check rejected it, or it died)."""
    import torch

    try:
        message = _receive(channel)
    except Done:
        return True
    try:
        with torch.no_grad():
            verdict = checker.timed(message.get("answer") if isinstance(message, dict) else None)
    except Exception as exc:  # noqa: BLE001 - the reference failing here is the judge's failure, not the candidate's
        verdict = {"verdict": "runtime_error", "reason": "judge_error",
                   "message": f"the checker could not compare the timed outputs: {type(exc).__name__}: {exc}"[:300]}
    if passed(verdict):  # the worker waits for the answer below: none of its threads should be working
        try:
            verdict["threads"] = guards.watch_peer(checker.job.peer_pid, gate.threads_ns)
        except guards.Rejected as r:
            verdict = {"verdict": "rejected", "reason": r.reason, "message": r.message, "evidence": r.evidence}
    channel.send("timed", **verdict)
    channel.send("to_worker", message={"check": "timed_end", "ok": passed(verdict),
                                       **{k: verdict.get(k) for k in ("verdict", "reason", "message")}})
    return False
