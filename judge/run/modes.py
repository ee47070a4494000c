"""A whole model as its user runs it: the original and the assembled model, and variants of the
assembly (each a drop-in with some of its parts left out), in each compile mode, called back to back
with the host's work included, every (model, mode) interleaved in one loop of one fresh process, each
mode with instances of its own (of the original, which holds no state of its own calls, one for all).

Why one loop: a model timed after other compiles can read 1.5x slower than before them (the
allocator, caches, clocks); blocks that take turns share every such drift, and per-round ratios
cancel it. Every compile happens before the device is held (CPU work that other jobs' timing can
overlap). The worker reports per-block samples and nothing it concludes: the judging process takes
the medians, ratios and intervals (kernelevo.model_modes). A compile or capture that fails is
reported for its (model, mode), and that pair is left out of the loop: the original model may not
compile in every mode; the assembly must (fullgraph=True: a graph break is its error).
"""
from __future__ import annotations

import time

from kernelevo.judge.job import Job
from kernelevo.judge.measure import loop
from kernelevo.judge.run import jobs
from kernelevo.judge.trials import correctness, inputs
from kernelevo.judge.trials.reference import forward
from kernelevo.tasks import first_line


def run_modes(job: Job, device: str, channel) -> dict:
    """Samples, per (model, mode), of milliseconds per call in the user's loop (see the module)."""
    import torch

    built = jobs._rebuilt(job, device, channel, acquire=False)
    if isinstance(built, dict):
        return built
    reference, assembled, sets = built
    try:
        init = tuple(jobs._load_task(job).get_init_inputs())
        classes = {"assembled": type(assembled)}
        del assembled  # each mode builds its own: this one would only hold its memory through the loop
        for i, source in enumerate(job.variants):
            classes[f"variant{i}"] = _variant_class(source, job)
    except Exception as exc:  # noqa: BLE001 - a variant is the assembly's file with fewer parts
        return {"verdict": "runtime_error", "reason": "variant", "message": f"a variant did not build: {first_line(exc)}"}
    fns, errors, compile_s, cached = {}, {}, {}, {}
    with torch.no_grad():
        for mode in job.modes:
            # a model of its own in each mode, as the user's: a kernel's state made on its first call (a workspace
            # it keeps) made in another mode's calls would run here as it never does for them (2026-11-30: an
            # attention kernel's workspace, made in eager, let the same instance run under CUDA graphs; a fresh one
            # failed there)
            for name in ("original", *classes):
                key = f"{name}@{mode}"
                made = (lambda: reference) if name == "original" else \
                    (lambda: _fresh(classes[name], job, init, reference, device))
                fn, error, seconds, hit = _compiled(made, mode, name != "original", sets, device)
                if error:  # said for this pair; the others are timed
                    errors[key] = error
                    continue
                fns[key], compile_s[key] = fn, seconds
                if mode != "eager":
                    cached[key] = hit
    if not fns:
        return {"verdict": "runtime_error", "reason": "no_mode", "message": "nothing ran in any mode", "errors": errors}
    channel.acquire_device()
    with channel.quiet():
        measured, calls = loop.back_to_back(fns, sets, device, seconds=job.timing.max_seconds * len(fns))
    return {"verdict": "ok", "reason": "", "message": "", "calls": calls, "samples": measured.samples,
            "errors": errors, "compile_s": compile_s, "cached": cached}


def run_warm(job: Job, device: str, channel) -> dict:
    """The original model compiled in each of the job's modes as a modes job compiles it, in a process with
    no candidate code, whose compiles last in the task's opponent cache. Why: every modes job compiled the
    original from an empty cache, 78 to 108 s in max-autotune-no-cudagraphs (gpt_stack_bf16, H200,
    2026-12-01/02), and an assembly runs several. Compiles only: the device is not held, nothing is timed."""
    import torch

    task = jobs._load_task(job)
    inputs.seed_all(job.seed)
    reference = task.Model(*task.get_init_inputs()).to(device)
    sets = jobs._input_sets(task, job, device, job.input_sets)
    with torch.no_grad():
        for mode in job.modes:  # a compile that fails here is the modes job's to say, for the original in that mode
            _compiled(lambda: reference, mode, False, sets, device)
    return {"verdict": "ok", "reason": "", "message": ""}


def _compiled(made, mode: str, whole: bool, sets: list, device: str):
    """(the function running `made()` in `mode`, ready to time; the error that stopped it, or ""; the seconds it
    took; whether inductor took every graph it compiled from its cache)."""
    import torch

    started, misses = time.perf_counter(), _misses()
    try:
        fn = _ready(made(), mode, whole=whole, sets=sets, device=device)
    except Exception as exc:  # noqa: BLE001 - the caller says it for this (model, mode)
        torch._dynamo.reset()  # a half-made graph must not serve the next compile
        return None, f"{type(exc).__name__}: {first_line(exc)}", 0.0, False
    return fn, "", round(time.perf_counter() - started, 3), _misses() == misses


def _misses() -> tuple[int, int]:
    """Inductor's counts of graphs compiled anew (not found in its cache, or not cacheable), in this process so
    far: a compile that leaves them as they were took every graph from the cache."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_miss"], counters["inductor"]["fxgraph_cache_bypass"]


def _ready(model, mode: str, whole: bool, sets: list, device: str):
    """A function of one input set running `model` in `mode`, compiled (and its graphs captured) by
    two calls before it is timed."""
    import torch

    if mode != "eager":
        model = torch.compile(model, mode=None if mode == "default" else mode, fullgraph=whole)
    for args in sets[:2]:
        forward(model, args)
    correctness.sync(device)
    return lambda args: forward(model, args)


def _variant_class(source: str, job: Job):
    """The ModelNew of the drop-in `source` (the assembly with fewer parts), loaded once: its custom ops are
    registered under a namespace of its own text, which a second load would register again."""
    from kernelevo.tasks import load_module

    return load_module(source, job.candidate_path or "variant.py", "candidate").ModelNew


def _fresh(cls, job: Job, init: tuple, reference, device: str):
    """A new instance of `cls` built as the candidate was (the task's constructor arguments `init`, the
    job's seed), with the reference's weights."""
    inputs.seed_all(job.seed)
    model = cls(*init)
    inputs.copy_weights(reference, model)
    return model.to(device)
