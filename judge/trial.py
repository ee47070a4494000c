"""What the worker does with a job: build, check correctness, time. Runs in the child only."""
from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

from kernelevo.judge import compare, inputs, timing, verdicts
from kernelevo.tasks import TaskError, load_module


def _failure(f: verdicts.Failure, **extra) -> dict:
    return {"verdict": f.verdict, "reason": f.reason, "message": f.message, "excerpt": f.excerpt, **extra}


def _timing_config(job: dict) -> timing.TimingConfig:
    return timing.TimingConfig(**job.get("timing", {}))


def _load_task(job: dict):
    return load_module(job["task_source"], job["task_path"], "task")


def _load_candidate(job: dict):
    """Import the candidate and return its ModelNew class, or a Failure."""
    try:
        module = load_module(job["candidate_source"], job["candidate_path"], "candidate")
    except TaskError as exc:
        return verdicts.classify_build(exc.__cause__ or exc)
    cls = getattr(module, "ModelNew", None)
    if cls is None:
        return verdicts.Failure("runtime_error", "missing_model_new",
                                "the candidate defines no ModelNew class")
    return cls


def run_candidate(job: dict, device: str, channel) -> dict:
    import torch

    task = _load_task(job)
    started = time.perf_counter()
    cls = _load_candidate(job)
    if isinstance(cls, verdicts.Failure):
        return _failure(cls, build_s=time.perf_counter() - started)
    init_args = tuple(task.get_init_inputs())
    try:
        with torch.no_grad():
            reference, candidate, note = inputs.build_models(task.Model, cls, init_args, job["seed"], device)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any failure of candidate code is a verdict
        return _failure(verdicts.classify_build(exc), build_s=time.perf_counter() - started)
    build_s = time.perf_counter() - started
    channel.send("built", build_s=build_s)
    channel.acquire_device()  # from here on this worker has the device to itself
    acquired = time.perf_counter()
    result: dict[str, Any] = {"build_s": build_s, "notes": [note]}
    try:
        return _check_and_time(task, reference, candidate, job, device, result)
    finally:
        result["device_s"] = time.perf_counter() - acquired


def _check_and_time(task, reference, candidate, job: dict, device: str, result: dict) -> dict:
    try:
        checked = check_correctness(task, reference, candidate, job, device)
        result.update(checked)
        if checked["verdict"] != "ok":
            return result
        measured = time_candidate(task, reference, candidate, job, device)
    except Exception as exc:  # noqa: BLE001
        result.update(_failure(verdicts.classify_run(exc)))
        return result
    result["timing"] = {name: dataclasses.asdict(s) for name, s in measured.stats.items()}
    result["speedup_eager"], result["speedup_eager_ci"] = measured.ratio("eager", "candidate")
    return result


def _forward(model, args: list):
    return model(*args)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _poison(expected: list, device: str) -> None:
    """Fill freed allocator blocks with NaN so that outputs a kernel never writes show up."""
    import torch

    # Two blocks of each output's size: the candidate's outputs and any scratch of that size.
    blocks = [torch.full_like(t, float("nan")) if t.is_floating_point() else torch.full_like(t, -1)
              for t in expected * 2 if isinstance(t, torch.Tensor)]
    del blocks
    _sync(device)


class _Reference:
    """The task's model in its own dtype (TF32 off) and, where it runs, in float64."""

    def __init__(self, model):
        self.model = model
        try:
            self.model64 = copy.deepcopy(model).double()
        except Exception:  # noqa: BLE001 - float64 is a refinement, not a requirement
            self.model64 = None

    def __call__(self, args: list):
        import torch

        out = _forward(self.model, inputs.clone_inputs(args))
        exact = None
        if self.model64 is not None:
            try:
                exact = _forward(self.model64, inputs.to_float64(args))
            except (RuntimeError, TypeError, NotImplementedError):
                self.model64 = None
        finite = all(bool(torch.isfinite(t).all()) for t in compare.flatten(out)
                     if isinstance(t, torch.Tensor) and t.is_floating_point())
        return out, exact, finite


def _trial_sets(task, job: dict, device: str):
    """(inputs, label) for every correctness trial: fresh draws, then the task's extra shapes."""
    for t in range(job["trials"]):
        args, kind = inputs.trial_inputs(task.get_inputs, t, job["seed"], device)
        yield args, f"trial {t + 1} ({kind})", t
    extra = getattr(task, "get_test_inputs", None)
    if extra is not None:
        for i, args in enumerate(extra()):
            yield inputs.to_device(list(args), device), f"test inputs {i + 1}", job["trials"] + i


def check_correctness(task, reference, candidate, job: dict, device: str) -> dict:
    import torch

    ref = _Reference(reference)
    trials, worst = 0, None
    with torch.no_grad():
        for args, label, t in _trial_sets(task, job, device):
            expected, exact, finite = ref(args)
            if not finite and "as given" not in label and "test" not in label:
                # This transform left the task's domain (log of a negative...): redraw plainly.
                args, _ = inputs.trial_inputs(task.get_inputs, t, job["seed"], device, "as given")
                label = f"trial {t + 1} (as given)"
                expected, exact, finite = ref(args)
            args = inputs.clone_inputs(args)  # cloned before poisoning, so clones cannot take the poison
            _poison(compare.flatten(expected), device)
            out = _forward(candidate, args)
            _sync(device)
            floor = compare.reference_error(expected, exact) if exact is not None else 0.0
            result = compare.compare(out, expected, exact, floor)
            trials += 1
            if isinstance(result, compare.Mismatch):
                return _incorrect(result, label, trials)
            if worst is None or result.rel_l2 >= worst[0].rel_l2:
                worst = (result, label)
    match, label = worst
    where = f"{label}, index {match.index}" if match.index else label
    return {"verdict": "ok", "reason": "", "message": "", "correctness": dict(
        trials=trials, passed=trials, rel_l2=match.rel_l2, max_abs=match.max_abs,
        max_rel=match.max_rel, where=where, tolerance=match.tolerance)}


def _incorrect(m: compare.Mismatch, label: str, trials: int) -> dict:
    where = f"{label}, index {m.index}" if m.index else label
    return {"verdict": "incorrect", "reason": m.reason, "message": f"{label}: {m.message}",
            "excerpt": "", "correctness": dict(trials=trials, passed=trials - 1, rel_l2=m.rel_l2,
                                               max_abs=m.max_abs, max_rel=m.max_rel, where=where)}


def _input_sets(task, job: dict, device: str, count: int) -> list[list]:
    return [inputs.trial_inputs(task.get_inputs, 1000 + i, job["seed"], device, "as given")[0]
            for i in range(count)]


def time_candidate(task, reference, candidate, job: dict, device: str) -> timing.Measurement:
    sets = _input_sets(task, job, device, job.get("input_sets", 3))
    fns = {"candidate": lambda a: _forward(candidate, a), "eager": lambda a: _forward(reference, a)}
    return timing.measure(fns, sets, device, _timing_config(job), ratios=(("eager", "candidate"),))


def run_baseline(job: dict, device: str, channel) -> dict:
    """Eager and torch.compile timings of the reference, interleaved, for the baseline cache."""
    import torch

    task = _load_task(job)
    inputs.seed_all(job["seed"])
    model = task.Model(*task.get_init_inputs()).to(device)
    channel.acquire_device()
    sets = _input_sets(task, job, device, job.get("input_sets", 3))
    fns: dict = {"eager": lambda a: _forward(model, a)}
    result: dict[str, Any] = {"verdict": "ok", "reason": "", "message": ""}
    started = time.perf_counter()
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*sets[0])
            _sync(device)
        fns["compiled"] = lambda a: _forward(compiled, a)
    except Exception as exc:  # noqa: BLE001 - torch.compile failing is a fact to record
        result["compile_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    result["compile_s"] = time.perf_counter() - started
    result["measured_at"] = time.strftime("%Y-%m-%d %H:%M")
    stats = timing.measure(fns, sets, device, _timing_config(job)).stats
    result["timing"] = {name: dataclasses.asdict(s) for name, s in stats.items()}
    return result
