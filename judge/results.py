"""From a worker's result to the Evaluation a caller gets: the second opinions the parent process holds
a result to (the judge's own files untouched, eager beside the candidate against eager alone, an
implausible speedup re-measured in a fresh process), and the figures an Evaluation carries (timing
with its spread, the torch.compile ratio, the host-inclusive loop)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from kernelevo.judge.measure.timing import combined as timing_combined
from kernelevo.judge.measure.timing import load_note
from kernelevo.evaluation import (Confinement, Correctness, Evaluation, GraphTiming, KernelResources, LoopTiming,
                                  ShapeReport, TimingStats, Verdict)
from kernelevo.judge.job_result import JobResult
from kernelevo.tasks import Task


def audit_files(cache_dir: Path, result: JobResult, known: dict[str, str]) -> JobResult:
    """The judge's own files (cached baselines it read or wrote: name -> sha256) must not change
    while a candidate runs. Files of other judges sharing the cache are theirs to check."""
    touched = [name for name, digest in list(known.items()) if _digest(cache_dir / "baselines" / name) != digest]
    if touched:
        return result.refused(Verdict.REJECTED, "tampered_files",
                              f"the judge's file baselines/{touched[0]} changed while the candidate ran",
                              {"files": touched})
    return result


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _median(result: JobResult | None, role: str) -> float | None:
    """A role's median device time in a result's timing ("eager", "candidate", "compiled")."""
    stats = result.figure("timing", {}).get(role) if result else None
    return stats.get("median_ms") if stats else None


def crosscheck_eager(result: JobResult, baseline: JobResult | None, device: str, tolerance: float) -> JobResult:
    """On a GPU, eager timed beside the candidate must match eager timed in a process that never
    saw it: a candidate that slows the reference down (or reports it slower) inflates its speedup."""
    alone, beside = _median(baseline, "eager"), _median(result, "eager")
    # Not on the CPU: there a C candidate's OpenMP threads, still spinning after its call, slowed
    # the eager call timed next to it up to 60-fold in tests; that is interference, not cheating.
    if alone is None or beside is None or alone <= 0 or not device.startswith("cuda"):
        return result
    ratio = beside / alone
    if ratio > tolerance or ratio < 1 / tolerance:
        return result.refused(Verdict.REJECTED, "timing_mismatch",
                              f"eager took {beside:.4f} ms beside the candidate but {alone:.4f} ms in its own "
                              f"process (x{ratio:.2f}): the reference's timing was disturbed",
                              {**result.evidence, "eager_beside_ms": beside, "eager_alone_ms": alone})
    return result


def judge_remeasure(result: JobResult, second: JobResult, kind: str, limit: float, tolerance: float,
                    device: str) -> JobResult:
    """Accept an implausible speedup only if a fresh process with another timer agrees."""
    evidence = {**result.evidence, "implausible_above": limit, "task_kind": kind}
    first, again = result.figure("speedup_eager"), second.figure("speedup")
    if not second.passed or not isinstance(again, (int, float)):
        return result.refused(Verdict.REJECTED, "timing_mismatch",
                              f"a speedup of {first:.1f}x (above {limit:g}x for a {kind} task) could not be "
                              f"re-measured: {second.message}", evidence)
    timer = second.figure("timer")
    evidence.update(remeasured_speedup=again, remeasure_timer=timer, remeasured_ms=second.figure("times_ms"))
    if first > (1 + tolerance) * again:
        if not device.startswith("cuda"):
            # Host clocks on a shared CPU disagree without any cheat (an eager op's worker threads
            # descheduled under load: 16x per call against 2x batched for an honest kernel), and
            # work escaping the call is caught there by the thread checks. So no verdict rests on
            # it: the lower figure is the one reported.
            note = (f"the host clock per call gave {first:.2f}x, {timer} in a fresh process {again:.2f}x: "
                    "the lower is reported")
            return result.noted(note, evidence=evidence, speedup_eager=again,
                                speedup_eager_ci=second.figure("speedup_ci"))
        return result.refused(Verdict.REJECTED, "timing_mismatch",
                              f"CUDA events give a speedup of {first:.2f}x, {timer} in a fresh process "
                              f"{again:.2f}x: the timed calls did not contain all the work", evidence)
    note = f"speedup above {limit:g}x for a {kind} task: re-measured in a fresh process by {timer}, {again:.2f}x"
    return result.noted(note, evidence=evidence)


def _pair(value) -> tuple[float, float] | None:
    return (float(value[0]), float(value[1])) if value else None




def _stats(data: dict | None, scale: float = 1.0) -> TimingStats | None:
    if not data:
        return None
    scaled = ("median_ms", "p10_ms", "p90_ms", "min_ms", "mean_ms")  # device times; host time stays as measured
    return TimingStats(**{k: (v * scale if k in scaled else v) for k, v in data.items()})


def _compile_figures(result: JobResult, baseline: JobResult | None, beside: JobResult | None,
                     notes: list[str]) -> tuple:
    """(compiled TimingStats, speedup over torch.compile, its [low, high]) of a passing result: timed
    beside the candidate where a fresh process did so (`beside`), else the cached baseline's compiled/eager
    ratio times this run's speedup over eager, the two intervals combined (timing.combined)."""
    timing = result.figure("timing", {})
    cand, eager = _stats(timing.get("candidate")), _stats(timing.get("eager"))
    if cand and beside is not None and beside.passed:
        speedup = beside.figure("speedup_compile")
        notes.append(f"torch.compile timed beside the candidate in a fresh process: {speedup:.2f}x "
                     f"(eager there: {beside.figure('speedup_eager'):.2f}x)")
        if loaded := load_note(beside.figure("load")):
            notes.append(f"{loaded} (torch.compile beside)")
        return _stats(beside.figure("timing")["compiled"]), speedup, beside.figure("speedup_compile_ci")
    base = baseline.figure("timing", {}) if baseline else {}
    if not (cand and eager and "compiled" in base):
        if baseline and baseline.figure("compile_error"):
            notes.append(f"torch.compile failed on the reference: {baseline.figure('compile_error')}")
        return None, None, None
    if beside is not None:
        notes.append(f"torch.compile could not be timed beside the candidate ({beside.message}); "
                     "the cached figure is rescaled instead")
    factor = eager.median_ms / base["eager"]["median_ms"]
    compiled = _stats(base["compiled"], factor)
    speedup = compiled.median_ms / cand.median_ms
    notes.append(f"torch.compile measured {baseline.figure('measured_at', 'now')}, "
                 f"rescaled by this run's eager time (x{factor:.3f})")
    ratio = baseline.figure("compiled_over_eager")  # older baselines: each median's own interval
    parts = [tuple(ratio)] if ratio else [_spread(base["compiled"]), _spread(base["eager"])]
    eager_ci = result.figure("speedup_eager_ci")
    if eager_ci:
        parts.append((result.figure("speedup_eager"), *eager_ci))
    return compiled, speedup, timing_combined(speedup, *parts)


def _loop_figures(result: JobResult, baseline: JobResult | None, beside: JobResult | None,
                  device_ms: float | None) -> LoopTiming | None:
    """The host-inclusive twin of a passing result: its calls back to back against eager, and against
    torch.compile timed beside it (a fresh process's) or else the cached baseline's compiled/eager
    ratio back to back, rescaled as the device figure is."""
    looped = result.figure("loop")
    if not looped:
        return None
    ms = looped["ms"]
    point, low, high = looped["eager/candidate"]
    compiled_ms = speedup = ci = None
    beside_loop = beside.figure("loop", {}) if beside is not None else {}
    if "compiled/candidate" in beside_loop:
        speedup, *ci = beside_loop["compiled/candidate"]
        compiled_ms = ms["candidate"] * speedup
    elif baseline and "compiled/eager" in baseline.figure("loop", {}):
        ratio = baseline.figure("loop")["compiled/eager"]
        speedup = point * ratio[0]
        ci = timing_combined(speedup, tuple(ratio), (point, low, high))
        compiled_ms = ms["eager"] * ratio[0]
    return LoopTiming(calls=looped["calls"], candidate_ms=ms["candidate"], eager_ms=ms["eager"],
                      speedup_eager=point, speedup_eager_ci=(low, high), compiled_ms=compiled_ms,
                      speedup_compile=speedup, speedup_compile_ci=_pair(ci), device_ms=device_ms)


def _graph_figures(beside: JobResult | None) -> GraphTiming | None:
    """Each replayed in a CUDA graph, as timed beside the candidate in a fresh process (a final on a GPU);
    None where that process did not run or measured none."""
    graph = beside.figure("graph") if beside is not None else None
    if not graph:
        return None
    if graph.get("why"):
        return GraphTiming(why=graph["why"])
    ms = graph["ms"]
    compiled, eager = graph.get("compiled/candidate"), graph.get("eager/candidate")
    return GraphTiming(candidate_ms=ms.get("candidate"), eager_ms=ms.get("eager"), compiled_ms=ms.get("compiled"),
                       speedup_compile=compiled[0] if compiled else None,
                       speedup_compile_ci=_pair(compiled[1:]) if compiled else None,
                       speedup_eager=eager[0] if eager else None, speedup_eager_ci=_pair(eager[1:]) if eager else None)


def _spread(stats: dict) -> tuple[float, float, float]:
    m, r = stats["median_ms"], stats.get("rel_ci") or 0.0
    return m, m * (1 - r), m * (1 + r)


def to_evaluation(task: Task, digest: str, fmt: str, device: str, result: JobResult, baseline: JobResult | None,
                  wall_s: float, beside: JobResult | None = None) -> Evaluation:
    """Combine a worker's result (the cached baseline's, and torch.compile's timed `beside` it in a fresh
    process where a final asked for it) into the Evaluation record."""
    timing = result.figure("timing", {})
    cand, eager = _stats(timing.get("candidate")), _stats(timing.get("eager"))
    notes = list(result.notes)
    timed = result.passed  # a rejected candidate's timings are evidence, not speedups
    compiled = speedup_compile = compile_ci = None
    if timed:
        compiled, speedup_compile, compile_ci = _compile_figures(result, baseline, beside, notes)
    elif baseline and baseline.figure("compile_error"):
        notes.append(f"torch.compile failed on the reference: {baseline.figure('compile_error')}")
    correctness, shapes, confinement = (result.figure(k) for k in ("correctness", "shapes", "confinement"))
    warnings = tuple(w["message"] for w in baseline.figure("warnings", ())) if baseline else ()
    return Evaluation(
        verdict=result.verdict, reason=result.reason, message=result.message, excerpt=result.excerpt,
        task=task.name, task_hash=task.source_hash, candidate_hash=digest, format=fmt, device=device,
        device_name=result.device_name, torch_version=result.torch_version, node=result.node,
        node_id=result.node_id, build_s=result.build_s, device_s=result.device_s, wall_s=wall_s,
        correctness=Correctness(**correctness) if correctness else None, candidate=cand, eager=eager,
        compiled=compiled, speedup_eager=result.figure("speedup_eager") if timed else None,
        speedup_eager_ci=_pair(result.figure("speedup_eager_ci")) if timed else None,
        speedup_compile=speedup_compile, speedup_compile_ci=_pair(compile_ci), notes=tuple(notes),
        policy=result.figure("policy", ""), evidence=dict(result.evidence), warnings=warnings,
        resources=tuple(KernelResources(**r) for r in result.figure("resources", ())),
        shapes=ShapeReport.from_dict(shapes) if timed and shapes else None,
        confinement=Confinement(**confinement) if confinement else None,
        loop=_loop_figures(result, baseline, beside, cand.median_ms if cand and device.startswith("cuda") else None)
        if timed else None,  # on the CPU the timed figure is host time too: no host share to tell apart
        graph=_graph_figures(beside) if timed else None)
