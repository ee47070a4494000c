"""The process Nsight Compute profiles (judge/measure/ncu.py):

    python -s -P -m kernelevo.judge.run.ncu_target JOB_FILE DEVICE

It builds the reference and the candidate exactly as the judge's worker does (same seed, same
build and extension folders, so nothing is compiled again), calls the candidate twice to warm
up, then once inside the NVTX range that ncu is told to profile.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelevo.judge.job import Job


def main() -> None:
    job, device = Job.from_dict(json.loads(Path(sys.argv[1]).read_text())), sys.argv[2]
    import torch

    from kernelevo.judge.run import worker

    # As the worker prepares its device, without starting the torch profiler: ncu owns CUPTI here.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.cuda.set_device(torch.device(device))
    worker._job_environment(job, device)

    from kernelevo.judge.trials import inputs
    from kernelevo.judge.measure.ncu import RANGE
    from kernelevo.tasks import load_module

    task = load_module(job.task_source, job.task_path, "task")
    candidate = load_module(job.candidate_source, job.candidate_path, "candidate")
    with torch.no_grad():
        _, model, _ = inputs.build_models(task.Model, candidate.ModelNew, tuple(task.get_init_inputs()),
                                          job.seed, device)
    args, _ = inputs.trial_inputs(task.get_inputs, 1000, job.seed, device, "as given")
    with torch.no_grad():
        for _ in range(2):
            model(*args)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        model(*args)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
