"""From a worker's result to the Evaluation a caller gets: the second opinions the parent process holds
a result to (the judge's own files untouched, eager beside the candidate against eager alone, an
implausible speedup re-measured in a fresh process), and the figures an Evaluation carries (timing
with its spread, the torch.compile ratio, the host-inclusive loop)."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from kernelevo.judge.measure.timing import combined as timing_combined
from kernelevo.judge.measure.timing import load_note
from kernelevo.evaluation import (Confinement, Correctness, Evaluation, GraphTiming, KernelResources, LoopTiming,
                                  ShapeReport, TimingStats, Verdict)
from kernelevo.judge.job_result import JobResult, as_pair
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


def _median(timing: dict[str, TimingStats], role: str) -> float | None:
    """A role's median device time in a job's timing ("eager", "candidate", "compiled")."""
    stats = timing.get(role)
    return stats.median_ms if stats else None


def crosscheck_eager(result: JobResult, baseline: JobResult | None, device: str, tolerance: float) -> JobResult:
    """On a GPU, eager timed beside the candidate must match eager timed in a process that never
    saw it: a candidate that slows the reference down (or reports it slower) inflates its speedup."""
    alone = _median(baseline.opponent.timing, "eager") if baseline else None
    beside = _median(result.measured.timing, "eager")
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
    first, again = result.measured.speedup_eager, second.remeasured.speedup
    if not second.passed or again is None:
        return result.refused(Verdict.REJECTED, "timing_mismatch",
                              f"a speedup of {first:.1f}x (above {limit:g}x for a {kind} task) could not be "
                              f"re-measured: {second.message}", evidence)
    timer = second.remeasured.timer
    evidence.update(remeasured_speedup=again, remeasure_timer=timer, remeasured_ms=second.remeasured.times_ms)
    if first > (1 + tolerance) * again:
        if not device.startswith("cuda"):
            # Host clocks on a shared CPU disagree without any cheat (an eager op's worker threads
            # descheduled under load: 16x per call against 2x batched for an honest kernel), and
            # work escaping the call is caught there by the thread checks. So no verdict rests on
            # it: the lower figure is the one reported.
            note = (f"the host clock per call gave {first:.2f}x, {timer} in a fresh process {again:.2f}x: "
                    "the lower is reported")
            return result.noted(note, evidence=evidence, speedup=(again, second.remeasured.speedup_ci))
        return result.refused(Verdict.REJECTED, "timing_mismatch",
                              f"CUDA events give a speedup of {first:.2f}x, {timer} in a fresh process "
                              f"{again:.2f}x: the timed calls did not contain all the work", evidence)
    note = f"speedup above {limit:g}x for a {kind} task: re-measured in a fresh process by {timer}, {again:.2f}x"
    return result.noted(note, evidence=evidence)


def _scaled(stats: TimingStats, scale: float) -> TimingStats:
    """Device times scaled (a cached figure rescaled by this run's eager time); host time stays as measured."""
    return dataclasses.replace(stats, **{k: getattr(stats, k) * scale
                                         for k in ("median_ms", "p10_ms", "p90_ms", "min_ms", "mean_ms")})


def _compile_figures(result: JobResult, baseline: JobResult | None, beside: JobResult | None,
                     notes: list[str]) -> tuple:
    """(compiled TimingStats, speedup over torch.compile, its [low, high]) of a passing result: timed
    beside the candidate where a fresh process did so (`beside`), else the cached baseline's compiled/eager
    ratio times this run's speedup over eager, the two intervals combined (timing.combined)."""
    measured = result.measured
    cand, eager = measured.timing.get("candidate"), measured.timing.get("eager")
    if cand and beside is not None and beside.passed:
        there = beside.beside
        notes.append(f"torch.compile timed beside the candidate in a fresh process: {there.speedup_compile:.2f}x "
                     f"(eager there: {there.speedup_eager:.2f}x)")
        if loaded := load_note(there.load):
            notes.append(f"{loaded} (torch.compile beside)")
        return there.timing["compiled"], there.speedup_compile, there.speedup_compile_ci
    opponent = baseline.opponent if baseline else None
    base = opponent.timing if opponent else {}
    if not (cand and eager and "compiled" in base):
        if opponent and opponent.compile_error:
            notes.append(f"torch.compile failed on the reference: {opponent.compile_error}")
        return None, None, None
    if beside is not None:
        notes.append(f"torch.compile could not be timed beside the candidate ({beside.message}); "
                     "the cached figure is rescaled instead")
    factor = eager.median_ms / base["eager"].median_ms
    compiled = _scaled(base["compiled"], factor)
    speedup = compiled.median_ms / cand.median_ms
    notes.append(f"torch.compile measured {opponent.measured_at}, rescaled by this run's eager time (x{factor:.3f})")
    ratio = opponent.compiled_over_eager  # older baselines: each median's own interval
    parts = [ratio] if ratio else [_spread(base["compiled"]), _spread(base["eager"])]
    if measured.speedup_eager_ci:
        parts.append((measured.speedup_eager, *measured.speedup_eager_ci))
    return compiled, speedup, timing_combined(speedup, *parts)


def _loop_figures(result: JobResult, baseline: JobResult | None, beside: JobResult | None,
                  device_ms: float | None) -> LoopTiming | None:
    """The host-inclusive twin of a passing result: its calls back to back against eager, and against
    torch.compile timed beside it (a fresh process's) or else the cached baseline's compiled/eager
    ratio back to back, rescaled as the device figure is."""
    looped = result.measured.loop
    if not looped:
        return None
    ms = looped["ms"]
    point, low, high = looped["eager/candidate"]
    compiled_ms = speedup = ci = None
    beside_loop = beside.beside.loop if beside is not None else {}
    opponent_loop = (baseline.opponent.loop or {}) if baseline else {}
    if "compiled/candidate" in beside_loop:
        speedup, *ci = beside_loop["compiled/candidate"]
        compiled_ms = ms["candidate"] * speedup
    elif "compiled/eager" in opponent_loop:
        ratio = opponent_loop["compiled/eager"]
        speedup = point * ratio[0]
        ci = timing_combined(speedup, tuple(ratio), (point, low, high))
        compiled_ms = ms["eager"] * ratio[0]
    return LoopTiming(calls=looped["calls"], candidate_ms=ms["candidate"], eager_ms=ms["eager"],
                      speedup_eager=point, speedup_eager_ci=(low, high), compiled_ms=compiled_ms,
                      speedup_compile=speedup, speedup_compile_ci=as_pair(ci), device_ms=device_ms)


def _graph_figures(beside: JobResult | None) -> GraphTiming | None:
    """Each replayed in a CUDA graph, as timed beside the candidate in a fresh process (a final on a GPU);
    None where that process did not run or measured none."""
    graph = beside.beside.graph if beside is not None else None
    if not graph:
        return None
    if graph.get("why"):
        return GraphTiming(why=graph["why"])
    ms = graph["ms"]
    compiled, eager = graph.get("compiled/candidate"), graph.get("eager/candidate")
    return GraphTiming(candidate_ms=ms.get("candidate"), eager_ms=ms.get("eager"), compiled_ms=ms.get("compiled"),
                       speedup_compile=compiled[0] if compiled else None,
                       speedup_compile_ci=as_pair(compiled[1:]) if compiled else None,
                       speedup_eager=eager[0] if eager else None,
                       speedup_eager_ci=as_pair(eager[1:]) if eager else None)


def _spread(stats: TimingStats) -> tuple[float, float, float]:
    m, r = stats.median_ms, stats.rel_ci or 0.0
    return m, m * (1 - r), m * (1 + r)


def to_evaluation(task: Task, digest: str, fmt: str, device: str, result: JobResult, baseline: JobResult | None,
                  wall_s: float, beside: JobResult | None = None) -> Evaluation:
    """Combine a worker's result (the cached baseline's, and torch.compile's timed `beside` it in a fresh
    process where a final asked for it) into the Evaluation record."""
    measured = result.measured
    cand, eager = measured.timing.get("candidate"), measured.timing.get("eager")
    notes = list(result.notes)
    timed = result.passed  # a rejected candidate's timings are evidence, not speedups
    opponent = baseline.opponent if baseline else None
    compiled = speedup_compile = compile_ci = None
    if timed:
        compiled, speedup_compile, compile_ci = _compile_figures(result, baseline, beside, notes)
    elif opponent and opponent.compile_error:
        notes.append(f"torch.compile failed on the reference: {opponent.compile_error}")
    correctness, shapes, confinement = measured.correctness, measured.shapes, measured.confinement
    return Evaluation(
        verdict=result.verdict, reason=result.reason, message=result.message, excerpt=result.excerpt,
        task=task.name, task_hash=task.source_hash, candidate_hash=digest, format=fmt, device=device,
        device_name=result.device_name, torch_version=result.torch_version, node=result.node,
        node_id=result.node_id, build_s=result.build_s, device_s=result.device_s, wall_s=wall_s,
        correctness=Correctness(**correctness) if correctness else None, candidate=cand, eager=eager,
        compiled=compiled, speedup_eager=measured.speedup_eager if timed else None,
        speedup_eager_ci=measured.speedup_eager_ci if timed else None,
        speedup_compile=speedup_compile, speedup_compile_ci=as_pair(compile_ci), notes=tuple(notes),
        policy=measured.policy, evidence=dict(result.evidence), warnings=opponent.warnings if opponent else (),
        resources=tuple(KernelResources(**r) for r in measured.resources),
        shapes=ShapeReport.from_dict(shapes) if timed and shapes else None,
        confinement=Confinement(**confinement) if confinement else None,
        loop=_loop_figures(result, baseline, beside, cand.median_ms if cand and device.startswith("cuda") else None)
        if timed else None,  # on the CPU the timed figure is host time too: no host share to tell apart
        graph=_graph_figures(beside) if timed else None)
