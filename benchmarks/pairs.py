"""Shared by the benchmark scripts' child processes: a task and a candidate, built as the judge builds them."""
from __future__ import annotations


def load_pair(task_path: str, candidate_path: str, seed: int = 42):
    """(reference, candidate, inputs) on the GPU: same seed, weights copied, TF32 off, inputs as given."""
    import torch

    from kernelevo.judge.trials.inputs import build_models, trial_inputs
    from kernelevo.tasks import load_module

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    task = load_module(open(task_path).read(), task_path, "task")
    cand = load_module(open(candidate_path).read(), candidate_path, "candidate")
    ref, new, _ = build_models(task.Model, cand.ModelNew, tuple(task.get_init_inputs()), seed, "cuda")
    args, _ = trial_inputs(task.get_inputs, 1000, seed, "cuda", "as given")
    return ref, new, args
