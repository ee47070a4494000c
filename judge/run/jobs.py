"""What the worker does with a job: check, build, test, time. Runs in the child only.

A candidate job goes: static checks on the source -> import and construct (the build) ->
correctness trials under the dynamic checks (trials/correctness.py) -> the policy (trials/policy.py) ->
timing -> checks of the timings (measure/crosscheck.py) -> threads left working, functions replaced.
The first check that fails ends the job with `rejected` and its reason.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from kernelevo import runtime
from kernelevo.evaluation import Verdict
from kernelevo.judge import static, verdicts
from kernelevo.judge.measure import crosscheck, graphs, loop, resources, timing
from kernelevo.judge.trials import correctness, guards, inputs, policy
from kernelevo.judge.trials.checker import FRESH_FIRST, TIMED_FIRST
from kernelevo.judge.run import bounds, launcher, triton_jobs
from kernelevo.judge.job import Job
from kernelevo.tasks import TaskError, load_module

forward = correctness.forward


def _failure(f: verdicts.Failure, **extra) -> dict:
    return {"verdict": f.verdict, "reason": f.reason, "message": f.message, "excerpt": f.excerpt, **extra}


def _rejected(r: guards.Rejected, **extra) -> dict:
    return {"verdict": "rejected", "reason": r.reason, "message": r.message, "evidence": r.evidence, **extra}


def _timing_config(job: Job) -> timing.TimingConfig:
    return job.timing


def _load_task(job: Job):
    return load_module(job.task_source, job.task_path, "task")


def _load_candidate(job: Job):
    """Import the candidate and return its ModelNew class, or a Failure."""
    try:
        module = load_module(job.candidate_source, job.candidate_path, "candidate")
    except TaskError as exc:
        return verdicts.classify_build(exc.__cause__ or exc)
    cls = getattr(module, "ModelNew", None)
    if cls is None:
        return verdicts.Failure("runtime_error", "missing_model_new",
                                "the candidate defines no ModelNew class")
    return cls


def static_rejection(job: Job, task, noted: list[str] | None = None) -> dict | None:
    """The first static finding that rejects, as a result; the suspicions (static.SUSPICIONS) go to
    `noted` for the verdict's notes: the trials decide those."""
    found = static.check(job.candidate_source, task_source=job.task_source)
    findings = [f for f in found if f.reason not in static.SUSPICIONS]
    if noted is not None:
        noted += [f"static suspicion ({f.reason}), left to the trials: {f.message}" for f in found
                  if f.reason in static.SUSPICIONS]
    if not findings:
        return None
    first = findings[0]
    return {"verdict": "rejected", "reason": first.reason, "message": first.message,
            "excerpt": "\n".join(f.message for f in findings),
            "evidence": {"findings": [dataclasses.asdict(f) for f in findings]}}


def _build(job: Job, task, device: str, integrity: guards.Integrity, threads: guards.ThreadWatch):
    """(reference, candidate) or a result dict saying why there are none."""
    import torch

    started = time.perf_counter()
    cls = _load_candidate(job)
    if isinstance(cls, verdicts.Failure):
        return _failure(cls, build_s=time.perf_counter() - started)
    try:
        with torch.no_grad():
            reference, candidate, note = inputs.build_models(task.Model, cls, tuple(task.get_init_inputs()),
                                                             job.seed, device)
            correctness.sync(device)
    except Exception as exc:  # noqa: BLE001 - any failure of candidate code is a verdict
        return _failure(verdicts.classify_build(exc), build_s=time.perf_counter() - started)
    build_s = time.perf_counter() - started
    try:
        integrity.verify("import and construction")
        threads.verify("import and construction")
        guards.check_not_reference(cls, candidate, task.Model)
    except guards.Rejected as r:
        return _rejected(r, build_s=build_s)
    # a kept binary that was not what its record said was built again (kernelevo.runtime.kept): say so
    return reference, candidate, {"build_s": build_s, "notes": [note, *runtime.REBUILT]}


def run_candidate(job: Job, device: str, channel) -> dict:
    task = _load_task(job)
    integrity, threads = guards.Integrity(), guards.ThreadWatch()  # before any candidate code runs
    suspicions: list[str] = []
    rejected = static_rejection(job, task, suspicions)
    if rejected:
        return rejected
    built = _build(job, task, device, integrity, threads)
    if isinstance(built, dict):
        return built
    reference, candidate, result = built
    result["notes"] += suspicions
    result["resources"] = [dataclasses.asdict(r) for r in resources.collect()]
    channel.send("built", build_s=result["build_s"])
    channel.acquire_device()  # from here on this worker has the device to itself
    acquired = time.perf_counter()
    try:
        if job.format == "triton":
            failed = _first_call(task, candidate, job, device, result)
            if failed:
                return failed
        return _check_and_time(task, reference, candidate, job, device, result, integrity, threads, channel, acquired)
    finally:
        result.setdefault("device_s", time.perf_counter() - acquired)  # set at release when it got that far


def _first_call(task, candidate, job: Job, device: str, result: dict) -> dict | None:
    """A Triton candidate's kernels compile (and autotune) at their first launch: that call is made
    here, on the task's inputs, and counted as build time; a failure is the candidate's verdict."""
    args = _input_sets(task, job, device, 1)[0]
    try:
        seconds = triton_jobs.first_call(lambda a: forward(candidate, a), args, device)
    except Exception as exc:  # noqa: BLE001 - a kernel that does not compile or launch is a verdict
        failure = verdicts.classify_run(exc)
        return {**result, **_failure(failure), "build_s": result["build_s"]}
    result["notes"] = [*result.get("notes", []), f"build: import and construction {result['build_s']:.2f} s, "
                       f"first call (Triton's compile{', autotuning' if triton_jobs.autotuned(type(candidate)) else ''}) "
                       f"{seconds:.2f} s"]
    result["build_s"] += seconds
    return None


def _check_and_time(task, reference, candidate, job: Job, device: str, result: dict,
                    integrity: guards.Integrity, threads: guards.ThreadWatch, channel, acquired: float) -> dict:
    evidence: dict[str, Any] = {}
    phases = evidence["phases_s"] = {}
    result.update(policy=job.policy, evidence=evidence)
    phase = _phase_clock(phases)
    try:
        # The checker (trials/checker.py) sends each trial's inputs and compares what comes back; its
        # verdict, not anything this process says, is the one the judging process takes.
        side = correctness.Side(task, reference, candidate, job, device, threads)
        checked = side.follow(channel.receive, lambda message: channel.send("to_checker", message=message))
        phase("correctness")
        if not checked.get("ok"):
            return _refused_by_checker(result, checked)
        checked = {"stateful": bool(checked.get("stateful"))}
        result.update(verdict="ok", reason="", message="")  # as far as this process can tell: the checker decides
        integrity.verify("the correctness trials")
        _bounds(job, device, result, evidence, channel)
        phase("bounds")
        sets = _input_sets(task, job, device, job.input_sets)
        evidence["policy"] = policy.check(result["policy"], lambda a: forward(candidate, a), sets[0], device,
                                          job.candidate_source)
        phase("policy")
        if job.format == "triton":  # the configs its autotuners chose, derived shapes' included
            result["notes"] = [*result.get("notes", []), *triton_jobs.autotuned(type(candidate))]
        if triton_jobs.interpreted(job, device):
            return _untimed(result, integrity, threads, channel, acquired, phase)
        with channel.quiet():
            measured, kept = _time_and_crosscheck(reference, candidate, sets, task, job, device, evidence, phase,
                                                  checked["stateful"])
            result["loop"] = _loop({"candidate": lambda a: forward(candidate, a),
                                    "eager": lambda a: forward(reference, a)}, sets, device, job.timing.max_seconds,
                                   ("eager", "candidate"))
            phase("loop")
        threads.verify("timing")
        if not checked["stateful"]:  # compared by the checker, while this worker still holds the device
            said = side.timed(kept["timed"], sets, kept["fresh"], lambda message: channel.send("to_checker", message=message),
                              channel.receive)
            if not said.get("ok"):
                return _refused_by_checker(result, said)
            phase("timed_outputs")
        result["device_s"] = time.perf_counter() - acquired
        channel.release_device()  # the idle check needs no GPU: let the next candidate start
        if checked["stateful"]:  # else the checker watched this process's threads while it waited (check._timed)
            evidence["threads"] = threads.verify_idle()
        integrity.verify("timing")
        phase("idle_threads")
    except guards.Rejected as r:
        result.update(_rejected(r))
        result["evidence"] = {**evidence, **r.evidence}
        return result
    except Exception as exc:  # noqa: BLE001
        result.update(_failure(verdicts.classify_run(exc)))
        return result
    return _with_figures(result, measured, device)


def _phase_clock(phases: dict) -> Callable[[str], None]:
    """phase(name): the seconds since the last phase ended (or since now) kept as `phases[name]`."""
    last = [time.perf_counter()]

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases[name], last[0] = round(now - last[0], 4), now
    return phase


def _refused_by_checker(result: dict, said: dict) -> dict:
    """The checker's verdict on a candidate it did not pass; a refusal without one is the checker's failure."""
    result.update({k: said.get(k) or "" for k in ("verdict", "reason", "message")})
    if result["verdict"] in ("", Verdict.OK):
        result.update(verdict="runtime_error", reason="checker", message="the checker gave no verdict")
    return result


def _with_figures(result: dict, measured, device: str) -> dict:
    """A passing result with its timed figures: the stats, the speedup over eager with its interval, what the
    machine's load and the L2 reset say of them."""
    result["timing"] = {name: dataclasses.asdict(s) for name, s in measured.stats.items()}
    result["speedup_eager"], ci = measured.speedup("eager", "candidate")
    result["speedup_eager_ci"] = timing.reported(result["speedup_eager"], ci, measured.load, not device.startswith("cuda"))
    if measured.load:
        result["evidence"]["load"] = measured.load
        if note := timing.load_note(measured.load):
            result["notes"] = [*result.get("notes", []), note]
    if measured.l2:
        result["evidence"]["l2_reset"] = dataclasses.asdict(measured.l2)
        result["notes"] = [*result.get("notes", []), measured.l2.note()]
    result["samples_ms"] = {name: sum(xs) for name, xs in measured.samples.items()}
    return result


def _bounds(job: Job, device: str, result: dict, evidence: dict, channel) -> None:
    """The bounds trial (run/bounds.py), for a candidate whose trials passed: raises Rejected where its
    checker saw an invalid access in the candidate's code; its note joins the verdict's either way.
    The judging process hears that it starts: its time under the checker is not the run's (drive.py)."""
    if not job.bounds:
        return
    channel.send("bounds")
    outcome = launcher.run(job, device)
    evidence["bounds"] = bounds.evidence(outcome)
    if outcome.access is not None:
        raise guards.Rejected("out_of_bounds", bounds.message(outcome), {"bounds": evidence["bounds"]})
    result["notes"] = [*result.get("notes", []), outcome.note]


def _untimed(result: dict, integrity: guards.Integrity, threads: guards.ThreadWatch, channel, acquired: float,
             phase) -> dict:
    """A verdict without a speedup (Triton's interpreter): the checks after timing still run."""
    result["device_s"] = time.perf_counter() - acquired
    channel.release_device()
    result["evidence"]["threads"] = threads.verify_idle()
    integrity.verify("the policy check")
    phase("idle_threads")
    result["untimed"] = triton_jobs.UNTIMED
    result["notes"] = [*result.get("notes", []), triton_jobs.UNTIMED]
    return result


def _time_and_crosscheck(reference, candidate, sets: list, task, job: Job, device: str,
                         evidence: dict, phase, stateful: bool) -> tuple[timing.Measurement, dict[str, list]]:
    import torch

    recorder = crosscheck.Recorder(lambda a: forward(candidate, a), keep=len(sets))
    fns = {"candidate": recorder, "eager": lambda a: forward(reference, a)}
    config = _timing_config(job)
    measured = timing.measure(fns, sets, device, config, ratios=(("eager", "candidate"),))
    phase("timing")
    with torch.no_grad():
        # The reference ran here only now, timed beside the candidate (the checker computes it for the
        # trials): a candidate that caught it there, and calls it instead of computing, does so here.
        watch = guards.ReferenceWatch(reference)
        try:
            with watch.candidate_running():
                forward(candidate, sets[0])
        finally:
            watch.remove()
        if device.startswith("cuda"):  # first: escaped work also corrupts what the other checks see
            plain = {"candidate": lambda a: forward(candidate, a), "eager": fns["eager"]}
            evidence["host_clock"] = crosscheck.host_clock(plain, sets[0])
        # for the checker (correctness.Side.timed): the last timed outputs, then the last fresh-values output
        kept: dict[str, list] = {"timed": list(recorder.last), "fresh": []}
        if not stateful:  # the policy check called the candidate alone: no longer in lockstep with it
            crosscheck.timed_outputs(recorder, lambda a: forward(reference, a))
        fresh = _input_sets(task, job, device, 2, first=FRESH_FIRST)
        clock = timing.Clock(device, config.flush)
        if clock.cuda:  # the same head start as the timed calls, or host launch time counts here alone
            clock.set_head_start(max(s.host_ms or 0.0 for s in measured.stats.values()))
        evidence["fresh_values"] = crosscheck.fresh_values(
            lambda a: forward(candidate, a), lambda a: forward(reference, a), clock, fresh,
            measured.stats["candidate"].median_ms, repeats=measured.stats["candidate"].n // len(sets),
            lockstep=not stateful, handed=kept["fresh"])
    phase("crosschecks")
    return measured, kept


def torch_device_name(device: str) -> str:
    import platform

    import torch

    from kernelevo.host import cpu_name

    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") \
        else cpu_name() or platform.processor() or "cpu"


def _loop(fns: dict, sets: list, device: str, seconds: float, *over: tuple[str, str]) -> dict:
    """The host-inclusive twin of the timed figures: the functions called back to back (loop.py) for at most
    the timer's own budget (`seconds`, never above loop.SECONDS), each ratio of `over` with its interval as
    reported (on the CPU, at least the spread of a repeat)."""
    measured, calls = loop.back_to_back(fns, sets, device, seconds=min(seconds, loop.SECONDS), ratios=over)
    out = loop.figures(measured, calls, over)
    for a, b in over:
        point, low, high = out[f"{a}/{b}"]
        out[f"{a}/{b}"] = [point, *timing.reported(point, [low, high], None, not device.startswith("cuda"))]
    return out


def _input_sets(task, job: Job, device: str, count: int, first: int = TIMED_FIRST) -> list[list]:
    return [inputs.trial_inputs(task.get_inputs, first + i, job.seed, device, "as given")[0]
            for i in range(count)]


def _rebuilt(job: Job, device: str, channel, acquire: bool = True):
    """(reference, candidate, input sets) of a candidate already judged, built again in this
    fresh process for a second measurement (holding the device unless `acquire` is False); or a
    result dict saying why there are none."""
    task = _load_task(job)
    built = _build(job, task, device, guards.Integrity(), guards.ThreadWatch())
    if isinstance(built, dict):
        return built
    reference, candidate, _ = built
    if acquire:
        channel.acquire_device()
    return reference, candidate, _input_sets(task, job, device, job.input_sets)


def _compiled(model, sets: list, device: str):
    """torch.compile of `model`, compiled by its first call: seconds to minutes of CPU work, done
    before the device is held, so that compiles of several tasks overlap while others are timed."""
    import torch

    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*sets[0])
        correctness.sync(device)
    return compiled


def run_remeasure(job: Job, device: str, channel) -> dict:
    """The speedup by another timer, in this fresh process: CUPTI kernel spans across all streams
    on a GPU, batched wall time on the CPU. For speedups too good to believe at first sight."""
    built = _rebuilt(job, device, channel)
    if isinstance(built, dict):
        return built
    reference, candidate, sets = built
    fns = {"candidate": lambda a: forward(candidate, a), "eager": lambda a: forward(reference, a)}
    interval = None
    try:
        if device.startswith("cuda"):
            times, timer = crosscheck.spans(fns, sets), "CUPTI kernel spans"
            speedup = times["eager"] / times["candidate"]
        else:
            with channel.quiet():
                batches, timer = crosscheck.batched_wall(fns, sets), "batched host clock"
            times = {name: timing.interval(xs)[0] for name, xs in batches.items()}
            speedup, *interval = timing.interval([e / c for e, c in zip(batches["eager"], batches["candidate"])
                                                  if c > 0])  # per batch pair, as the timed figure is per round
    except Exception as exc:  # noqa: BLE001
        return _failure(verdicts.classify_run(exc))
    return {"verdict": "ok", "reason": "", "message": "", "timer": timer, "times_ms": times,
            "speedup": speedup, "speedup_ci": timing.reported(speedup, interval, None, True) if interval else None}


def run_compile_beside(job: Job, device: str, channel) -> dict:
    """torch.compile of the reference timed alternately with the candidate (and eager), in a fresh
    process: where the clock is noisy (the CPU), a cached compile/eager ratio rescaled by another
    process's eager time was off by 1.7x against an independent timing."""
    built = _rebuilt(job, device, channel, acquire=False)
    if isinstance(built, dict):
        return built
    reference, candidate, sets = built
    started = time.perf_counter()
    try:
        compiled = _compiled(reference, sets, device)
        compile_s = time.perf_counter() - started
        channel.acquire_device()
        fns = {"candidate": lambda a: forward(candidate, a), "eager": lambda a: forward(reference, a),
               "compiled": lambda a: forward(compiled, a)}
        ratios = (("eager", "candidate"), ("compiled", "candidate"))
        with channel.quiet():
            measured = timing.measure(fns, sets, device, _timing_config(job), ratios=ratios)
            looped = _loop(fns, sets, device, job.timing.max_seconds, *ratios)
            # on a GPU, each one as a model's CUDA graph replays it: no launch gaps (measure/graphs.py)
            graphed = graphs.figures(fns, sets, device, _timing_config(job), ratios) if device.startswith("cuda") \
                else None
    except Exception as exc:  # noqa: BLE001 - a failed compile or run is reported, the search figure stays
        return _failure(verdicts.classify_run(exc))
    point, ci = measured.speedup("compiled", "candidate")
    return {"verdict": "ok", "reason": "", "message": "", "compile_s": compile_s, "loop": looped, "graph": graphed,
            "timing": {name: dataclasses.asdict(s) for name, s in measured.stats.items()},
            "load": measured.load, "speedup_compile": point,
            "speedup_compile_ci": timing.reported(point, ci, measured.load, not device.startswith("cuda")),
            "speedup_eager": measured.speedup("eager", "candidate")[0]}
