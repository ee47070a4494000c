"""A check job: the checker's process (trials/checker.py), as worker.main runs it. It never loads candidate
code; it builds the reference, plans the derived shapes while the candidate builds, and once the judging
process says go (the candidate's worker then holds the device) drives the trials and reports the verdict."""
from __future__ import annotations

import contextlib
import os

from kernelevo.judge.job import Job
from kernelevo.judge.trials import arena, inputs
from kernelevo.judge.trials.checker import WHERE, Checker, plan_shapes


def run_check(job: Job, device: str, channel) -> dict:
    """A check job (the checker's process, worker.main): build the reference, plan the derived shapes
    while the candidate builds, and once the judging process says go (the candidate's worker holds the
    device), drive the trials. The worker hears the verdict's outline at the end; the judging process
    takes this result."""
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
    channel.receive()  # go: the candidate's worker holds the device

    def ask(message: dict) -> dict:
        channel.send("to_worker", message=message)
        reply = channel.receive()
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
    channel.send("to_worker", message={"check": "end", "ok": result["verdict"] == "ok",
                                       "stateful": bool(result.get("stateful")), **outline})
    channel.send_result(result)
    # Stay until the candidate's worker is done (the judging process then closes this one's input): ending
    # now would tear down this CUDA context, and the memory the worker maps, while the candidate is timed.
    with contextlib.suppress(SystemExit, OSError):
        while True:
            channel.receive()
    os._exit(0)
