"""The process the bounds trial checks (judge/run/bounds.py):

    python -s -P -m kernelevo.judge.run.bounds_target JOB_FILE DEVICE

started by a judge worker under a memory checker: compute-sanitizer's memcheck on a GPU (the
caching allocator off, so every tensor is its own allocation with nothing after it to read), or
AddressSanitizer's runtime on the CPU (the candidate's C built with its checks). It builds the
reference and the candidate as the worker did, then calls the candidate once on the task's own
inputs, once on its extra test inputs and once on each shape the judge derives, synchronising after each and writing a marker
before it, so that a report names the shape it came from. Outputs are not compared here: the
worker's trials did that; this process only has to touch every index the kernels touch. An autotuner runs
each of its configs once, untimed (triton_jobs.autotune_by_one_run), so each is checked.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelevo.judge.job import Job


def _say(text: str) -> None:
    print(text, flush=True)
    sys.stderr.flush()


def main() -> None:
    job, device = Job.from_dict(json.loads(Path(sys.argv[1]).read_text())), sys.argv[2]
    import torch

    from kernelevo.judge.run import seccomp, triton_jobs, worker
    from kernelevo.judge.run.bounds import DONE, MARK
    from kernelevo.judge.trials import checker, correctness, inputs, shapes
    from kernelevo.tasks import load_module

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.empty(1, device=device)  # CUDA's start: compute-sanitizer's side of this process connects to its checker
    # Then, before anything of the job loads, this process reaches no socket: where the bounds trial's
    # launcher started it (run/launcher.py) it may make UNIX stream sockets, for that one connection.
    if not seccomp.refuse_connect() and seccomp.arch() is not None:
        _say("kernelevo: could not refuse connect() in the checked process")
        sys.exit(3)
    worker._job_environment(job, device)
    if job.format == "triton":  # each config checked once, not timed under the checker
        triton_jobs.autotune_by_one_run()
    task = load_module(job.task_source, job.task_path, "task")
    cls = load_module(job.candidate_source, job.candidate_path, "candidate").ModelNew
    init = tuple(task.get_init_inputs())
    base = inputs.trial_inputs(task.get_inputs, 0, job.seed, device, "as given")[0]
    roles = checker.plan_shapes(task, device) if job.shapes == "general" else None
    found = shapes.variants(base, roles)[0] if roles is not None else []
    runs = [("the task's own shape", init, base, shapes.describe(base))]
    extra = getattr(task, "get_test_inputs", None)
    for i, test_args in enumerate(extra() if extra is not None else ()):
        args = inputs.to_device(list(test_args), device)
        runs.append((f"test inputs {i + 1}", init, args, shapes.describe(args)))
    runs += [(f"derived shape ({v.label})", v.init or init, v.args, v.shapes) for v in found]
    built: dict[str, object] = {}  # one candidate per construction: most shapes share the task's
    with torch.no_grad():
        for label, args_init, args, shown in runs:
            _say(f"{MARK}{label}: {shown}")
            try:
                key = repr(args_init)
                if key not in built:
                    built[key] = inputs.build_models(task.Model, cls, args_init, job.seed, device)[1]
                candidate = built[key]
                candidate(*args)
                correctness.sync(device)
            except Exception as exc:  # noqa: BLE001 - a shape the candidate refuses: its trials said so
                _say(f"refused: {type(exc).__name__}: {str(exc)[:200]}")
    _say(DONE)


if __name__ == "__main__":
    main()
