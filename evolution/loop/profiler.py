"""The search's profiles: which kernels are profiled and when, the profiles in flight, and what comes of them.

A new island best is profiled, at most profile_per_generation a generation: those are the kernels mutate and
reflect most often start from. Profiling holds the device (H100, starter suite: 0.1-0.7 s; judging every child's
profile cut throughput from 41 to 28 per minute), and Nsight Compute takes 7-9 s more, so it runs only for a new
best of the whole run, once a generation at most. A kernel a prompt shows is profiled then if it never was
(`on_demand`): the prompt shows where its time goes, and a kernel need not have been profiled by chance to be
chosen."""
from __future__ import annotations

import concurrent.futures
import dataclasses
from collections import Counter

from kernelevo.evaluation import Evaluation, Profile, Variant, Verdict

from .flight import Profiling


class Profiler:
    """Profiles of one search: started through the judge, stored in the run's state and archive once done.
    `device_load` is the search's count of work on each device, shared with its judging; `progress` its display's
    figures (the generation)."""

    def __init__(self, state, judge, settings, device_load: Counter, progress):
        self.state, self.judge, self.settings, self.device_load = state, judge, settings, device_load
        self.progress = progress
        self.futures: dict[concurrent.futures.Future, Profiling] = {}
        self.started: Counter = Counter()  # generation -> profiles started
        self.ncu_generations: set[int] = set()  # generations that ran Nsight Compute

    def island_best(self, member: Variant, evaluation: Evaluation, evaluation_id: int) -> None:
        """Profile a new island best, within the generation's share; with Nsight Compute where it is the run's
        best and no profile of this generation had it yet."""
        generation, run_best = self.progress.generation, self.state.population.best()
        if self.started[generation] >= self.settings.profile_per_generation:
            return
        self.started[generation] += 1
        ncu = self.settings.ncu and run_best is not None and run_best.kernel_id == member.kernel_id \
            and generation not in self.ncu_generations
        if ncu:
            self.ncu_generations.add(generation)
        self._start(member.kernel_id, evaluation, evaluation_id, ncu)

    def on_demand(self, member: Variant) -> None:
        """Profile a kernel a prompt shows now if it never was (without Nsight Compute: a tenth of a second to a
        second of device time); not one the Triton interpreter ran, whose profile would be the interpreter's."""
        pending = any(meta.kernel_id == member.kernel_id for meta in self.futures.values())
        if not self.settings.profile_per_generation or pending or member.kernel_id in self.state.profiles:
            return
        if member.figures.speedup_eager is None:
            return
        judged = [e for e in self.state.archive.kernel(member.kernel_id).evaluations if e.verdict == Verdict.OK]
        if judged:
            self._start(member.kernel_id, judged[-1].evaluation(), judged[-1].id, False)

    def pending(self, kernel_ids: set[int]) -> dict[int, concurrent.futures.Future]:
        """The profiles in flight of these kernels, by kernel id."""
        return {meta.kernel_id: f for f, meta in self.futures.items() if meta.kernel_id in kernel_ids}

    def done(self, future: concurrent.futures.Future) -> None:
        """A profile is in: kept with its kernel (a failed one as its note: a profile is advice)."""
        meta = self.futures.pop(future)
        self.device_load[meta.device] -= 1
        try:
            profile = future.result()
        except Exception as exc:  # noqa: BLE001 - a profile is advice: the search goes on without it
            profile = Profile(device_name="", notes=(f"profiling failed: {type(exc).__name__}: {exc}"[:300],))
        self.state.set_profile(meta.kernel_id, meta.evaluation_id, profile)
        self.state.archive.add_event(self.state.run_id, "profile", {
            "kernel": meta.kernel_id, "cost_s": profile.cost_s, "notes": list(profile.notes),
            "sol_pct": profile.sol.candidate_pct if profile.sol else None})

    def _start(self, kernel_id: int, evaluation: Evaluation, evaluation_id: int, ncu: bool) -> None:
        """Profile on the device the kernel was judged on; a kernel judged in an earlier session on a device this
        judge does not have (resumed on another machine, a bench's other GPU) on this judge's least loaded one."""
        if evaluation.device not in self.device_load:
            device = min(self.device_load, key=lambda d: self.device_load[d])
            evaluation = dataclasses.replace(evaluation, device=device, node_id="")
        self.device_load[evaluation.device] += 1
        future = self.judge.profile(self.state.task, self.state.kernel_path(kernel_id), evaluation, ncu=ncu)
        self.futures[future] = Profiling(kernel_id, evaluation_id, evaluation.device)
