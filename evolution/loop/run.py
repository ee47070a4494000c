"""A whole run of the search: open it (or resume it), seed it with stepping stones, search,
re-judge the best in a fresh process, write it out. `optimize` is what the CLI and the bench call.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import random
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kernelevo.agent.prompting import Context, Opponent, Variant
from kernelevo.archive.rows import by_format, by_model
from kernelevo.formats import native
from kernelevo.text import speedup_text

from .. import budget as budgets
from .. import ensemble as ensembles
from .. import replays
from .. import placement
from ..bound import left_to_compiler, opponent_bound, peaks_from
from ..novelty import NoveltyGate
from ..population import BASELINES
from ..options import OptimizeOptions, formats_of, judge_options
from ..outcome import (
    EXIT_BUDGET,
    EXIT_LEFT,
    EXIT_OK,
    EXIT_UNREACHABLE,
    BoundUsed,
    Interrupted,
    Outcome,
    Progress,
    RunSummary,
    elapsed_s,
    write_drop_in,
)
from ..state import RunState
from .search import Search

if TYPE_CHECKING:
    from kernelevo.archive.records import RunRecord


def run_config(**values: Any) -> dict:
    """The effective configuration as stored with the run and echoed at start (JSON-friendly)."""
    return {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
            for k, v in values.items()}


# -- a whole run: set up, search, re-judge the best, write it out ---------------------------------------

def final_judgement(state: RunState, judge, options: OptimizeOptions, on_status: Callable[[str], None],
                    tick: Callable[[], None] = lambda: None):
    """The best kernel, then the next fastest two, re-judged in a fresh process; the first that passes
    is announced. The best is the incumbent (population.best_of), not a faster median inside its noise.
    `tick` is called every half second while a judgement runs (a bench's stop is raised from it)."""
    best = state.population.best()
    others = sorted((m for m in state.population.correct() if best is None or m.kernel_id != best.kernel_id),
                    key=lambda m: -m.fitness)
    for member in ([best] if best else []) + others[:3 - bool(best)]:
        on_status(f"re-judging kernel {member.kernel_id} ({speedup_text(member.fitness, member.fitness_ci)} "
                  f"{BASELINES[member.against]}) in a fresh process")
        evaluation = _waited(lambda: judge.evaluate(state.task, state.kernel_path(member.kernel_id), options.devices[0],
                                                    final=True), tick=tick)
        state.archive.add_evaluation(member.kernel_id, evaluation, purpose="final", run_id=state.run_id)
        state.archive.add_event(state.run_id, "final", {"kernel": member.kernel_id, "verdict": evaluation.verdict,
                                                        "speedup_eager": evaluation.speedup_eager})
        if evaluation.ok:
            return member, evaluation
    return None, None


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """A run once opened and prepared: what the search and the finish need (optimize's steps hand it on)."""

    state: RunState
    ensemble: ensembles.Ensemble
    gate: NoveltyGate
    budget: budgets.Budget
    settings: Any  # the search's settings, with an island per format
    seed: int
    seeded: tuple[int, int]


def optimize(options: OptimizeOptions, on_progress: Callable[[Progress], None] | None = None,
             on_status: Callable[[str], None] = lambda text: None) -> Outcome:
    """A whole run, in steps: open (or resume) it, prepare its search, search, finish. Raises
    agent.client.Stop (bad key or request), tasks.TaskError, ValueError on bad options; a Ctrl-C once
    the run is open leaves it 'stopped' and resumable (Interrupted)."""
    from kernelevo.archive.store import Archive
    from kernelevo.judge.api import Judge
    from kernelevo.tasks import load_task

    task = load_task(options.task_path)
    config = options.config
    names, pins = _model_names(options, on_status)
    tokens = (options.settings.prompt_tokens_estimate, options.settings.output_tokens_estimate)
    place = replays.ReplayPlace(task.name, Path(options.archive_path), Path(options.out_dir) / "prompts" / task.name,
                                options.resume or "")
    ensemble = ensembles.build(config, names, pins, tokens, on_status, place)  # its calls are recorded once the run exists
    archive = Archive.open(options.archive_path)
    try:
        before = _run_to_judge_again(archive, options)
        opened = _open_run(archive, task, options, ensemble, (names, pins))
        try:
            run = _prepared(archive, task, config, ensemble, opened, options, on_status)
        except KeyboardInterrupt:  # while stepping stones are found, or the embedder loads
            _stopped(archive, opened[1])
        # One spare worker per device: a started worker waits while another runs, so the device does
        # not wait for Python and torch to import (the search always has the next child ready).
        judging = dataclasses.replace(judge_options(options, options.devices), seed=run.seed, spares=1)
        search = None
        with Judge(options.cache_dir, judging) as judge:
            if before is not None:
                return _judge_again(run, before, judge, options, on_status, _ticker(run, "final judgement", on_progress))
            try:
                left = _measure_opponent(run, judge, options, on_status, _ticker(run, "timing the reference", on_progress))
                if left:
                    on_status(left)
                    return _left_to_compiler(run, left)
                search = _started(run, judge, on_progress, on_status)
                reason = search.run()
                # a run waiting for a reply goes on from it (--resume): its best is not re-judged yet
                search.progress.status = "final judgement"
                member, final = (None, None) if reason.kind.waits else final_judgement(
                    run.state, judge, options, on_status, lambda: on_progress and on_progress(search.progress))
            except KeyboardInterrupt:
                if search is not None:
                    search.abandon(0.0)
                _stopped(archive, run.state.run_id)
        return _finish(run, search, reason, member, final, options)
    finally:
        archive.close()


def _run_to_judge_again(archive, options: OptimizeOptions) -> RunRecord | None:
    """The run whose final judgement is made again (`judge_again`), as it stood; None for a search."""
    if not options.judge_again:
        return None
    run = archive.run(options.resume) if options.resume else None
    if run is None:
        raise ValueError("--judge-again makes a run's final judgement again: name the run with --resume RUN")
    return run


def _judge_again(run: _Prepared, before: RunRecord, judge, options: OptimizeOptions,
                 on_status: Callable[[str], None], tick: Callable[[], None]) -> Outcome:
    """A run's final judgement made again: the first of its best kernels to pass written out, the run left as
    it ended (its status and stop reason; Ctrl-C too), an event saying what the new judgement found."""
    state, archive = run.state, run.state.archive
    try:
        member, final = final_judgement(state, judge, options, on_status, tick)
    except KeyboardInterrupt:
        raise Interrupted(state.run_id) from None
    finally:  # _open_run marked it running
        archive.finish_run(state.run_id, before.status, before.stop_reason)
    written = write_drop_in(member, final, state.task.name, state.run_id, options.out_dir) if final else None
    archive.add_event(state.run_id, "judged_again", {"kernel": member.kernel_id if member else None,
                                                     "written": str(written) if written else None})
    return Outcome(state.run_id, before.stop_reason or "", EXIT_OK, final,
                   member.kernel_id if member else None, written, run.seeded,
                   summary=RunSummary(spend=archive.spend(state.run_id), counts=archive.counts(state.run_id),
                                      baseline=member.against if member else state.baseline))


def _stopped(archive, run_id: str) -> None:
    """Ctrl-C once the run exists: stored as 'stopped', to be resumed by its id (the CLI says how)."""
    archive.add_event(run_id, "stopped", {"by": "ctrl-c"})
    archive.finish_run(run_id, "stopped", "interrupted (Ctrl-C)")
    raise Interrupted(run_id) from None


def _prepared(archive, task, config, ensemble: ensembles.Ensemble, opened: tuple[int, str, int, str, str],
              options: OptimizeOptions, on_status: Callable[[str], None]) -> _Prepared:
    """The opened (or resumed) run seeded with stepping stones, with what it had spent and judged restored."""
    from kernelevo.agent.prompting import task_view
    from kernelevo.tasks import model_part

    from ..novelty import default_embedder

    task_id, run_id, seed, fmt, asked = opened
    baseline = _baseline(asked, options, on_status)
    embedder = default_embedder(config.embed_model())
    on_status(f"embedder: {embedder.why}")
    stones, seeded = _stepping_stones(archive, task, task_id, embedder, options, on_status)
    formats = formats_of(fmt, options.devices[0])
    graphed = model_part(task.path) and options.devices[0].startswith("cuda")  # its model runs in CUDA graphs
    ctx = Context(task_view(task, graphed), placement.target(options, formats[0]), inspirations=stones)
    state = RunState(archive, run_id, task, task_id, ctx, Path(options.archive_path).parent / "runs" / run_id,
                     formats, baseline)
    ensemble.set_on_call(state.record_call)
    on_status(f"run {run_id}" + (" (resumed)" if options.resume else "") + f"; kernels in {state.run_dir}")
    archive.add_event(run_id, "session_start", {"resume": bool(options.resume), "seeded": list(seeded),
                                                "models": ensemble.active, "model_for": ensemble.pins})
    for model, why in ensemble.dropped.items():
        archive.add_event(run_id, "model_dropped", {"model": model, "reason": why})
    budget = budgets.Budget(options.budget)
    spend = archive.spend(run_id)
    budget.restore(spend.cost_usd, spend.calls, elapsed_s(archive.events(run_id), time.time()))
    gate = NoveltyGate(embedder)
    for member in state.population.members:  # children left unjudged join it when resubmitted
        if member.ok:
            gate.add_source(member.kernel_id, member.source)
        else:
            gate.remember(member.kernel_id, member.source)
    return _Prepared(state, ensemble, gate, budget, _islands_for(options.settings, formats, on_status), seed, seeded)


def _measure_opponent(run: _Prepared, judge, options: OptimizeOptions, on_status: Callable[[str], None],
                      tick: Callable[[], None]) -> str:
    """Time what the kernels must beat, before any call, into every prompt's context; the sentence that
    ends the run where the compiler leaves nothing to win ("" to search)."""
    state = run.state
    if state.base_context.target.capability is not None or state.base_context.target.format != "triton":
        # (the Triton interpreter times nothing)
        opponent = _opponent(judge, state.task, options.devices[0], state.baseline, on_status, tick)
        state.base_context = dataclasses.replace(state.base_context, opponent=opponent)
        if used := _bound_used(opponent):  # a bench's table gives each task's best as a share of it
            state.archive.add_event(state.run_id, "bound", dataclasses.asdict(used))
    return "" if options.force else left_to_compiler(state.base_context.opponent)


def _left_to_compiler(run: _Prepared, left: str) -> Outcome:
    archive, run_id = run.state.archive, run.state.run_id
    archive.add_event(run_id, "finished", {"reason": left, "written": None})
    archive.finish_run(run_id, "stopped", left)
    return Outcome(run_id, left, EXIT_LEFT, seeded=run.seeded,
                   summary=RunSummary(spend=archive.spend(run_id), baseline=run.state.baseline))


def _started(run: _Prepared, judge, on_progress, on_status: Callable[[str], None]) -> Search:
    """The search, with what a kill left behind taken up again: children stored but never judged, and a
    new best whose re-measurement was cut off."""
    state = run.state
    rng = random.Random(f"{run.seed}:{state.judged()}")  # a resumed run does not replay its draws
    search = Search(state, run.ensemble, judge, run.settings, run.budget, run.gate, rng, on_progress, on_status)
    for child in state.unjudged():
        search.resubmit(child)
    if state.unconfirmed is not None:
        run.gate.remember(state.unconfirmed.kernel_id, state.unconfirmed.source)
        search.remeasure(state.unconfirmed, state.unconfirmed.lineage.operator)
    return search


def _finish(run: _Prepared, search: Search, reason, member, final, options: OptimizeOptions) -> Outcome:
    """Write the best out, store how the run ended, and sum it up."""
    state, run_id = run.state, run.state.run_id
    archive = state.archive
    written = write_drop_in(member, final, state.task.name, run_id, options.out_dir) if final else None
    budget_hit, unreachable = reason.kind.budget, bool(search.stopping.unreachable)
    waiting = reason.kind.waits
    archive.finish_run(run_id, "stopped" if unreachable or waiting else "budget" if budget_hit else "finished",
                       reason.text)
    archive.add_event(run_id, "finished", {"reason": reason.text, "written": str(written) if written else None})
    code = EXIT_UNREACHABLE if unreachable else EXIT_BUDGET if budget_hit else EXIT_OK
    formats = state.formats
    return Outcome(run_id, reason.text, code, final, member.kernel_id if member else None, written, run.seeded,
                   waiting, RunSummary(
                       spend=archive.spend(run_id), counts=archive.counts(run_id), calls=archive.call_yield(run_id),
                       models=tuple(by_model(archive.model_yield(run_id), run.ensemble.labels)),
                       formats=tuple(by_format(archive.format_yield(run_id), archive.format_best(run_id), formats)
                                     if len(formats) > 1 else ()),
                       dropped=dict(run.ensemble.dropped), replays=run.ensemble.replay_notes(),
                       bound=_bound_used(state.base_context.opponent),
                       baseline=member.against if member else state.baseline,
                       search_speedups=(member.figures.speedup_eager, member.figures.speedup_compile) if member else None,
                       search_intervals=(member.figures.speedup_eager_ci, member.figures.speedup_compile_ci)
                       if member else None))


def _islands_for(settings, formats: tuple[str, ...], on_status: Callable[[str], None]):
    """The search settings with an island for each format at least (--format auto), said once."""
    if len(formats) > settings.islands:
        settings = dataclasses.replace(settings, islands=len(formats))
    if len(formats) > 1:
        on_status(f"formats: {', '.join(formats)}, on alternate islands of {settings.islands}; "
                  "each call's format is drawn by what the formats' calls earned")
    return settings


def _model_names(options: OptimizeOptions, on_status: Callable[[str], None] = lambda text: None
                 ) -> tuple[list[str], dict[str, str]]:
    """The run's models and operator pins: the options', else (resuming) the ones the run had."""
    names, pins = list(options.models), dict(options.model_for or ())
    if options.resume and (not names or options.model_for is None):
        from kernelevo.archive.store import Archive

        with Archive.open_readonly(options.archive_path) as archive:
            run = archive.run(options.resume)
        stored = ensembles.given_or_stored(options.models, options.model_for, run.config if run else {})
        names, pins = list(stored[0]), dict(stored[1])
        pinned = ", ".join(f"{op} -> {m}" for op, m in pins.items())
        on_status(f"models of run {options.resume}: {', '.join(names)}" + (f" ({pinned})" if pinned else ""))
    if not names:
        raise ValueError("no model to call: pass --model (or set ensemble = [...] in kernelevo.toml)")
    return names, pins


def _open_run(archive, task, options: OptimizeOptions, ensemble: ensembles.Ensemble,
              given: tuple[list[str], dict[str, str]]) -> tuple[int, str, int, str, str]:
    """(task id, run id, seed, format, baseline) of a new run, or of the run being resumed (same task
    required; a run stored before baselines were chosen ranked by eager). The run stores its models as
    `given` (names a resume can find again) and by label for display."""
    task_id = archive.add_task(task.name, task.source, task.source_hash)
    fmt = options.fmt or native(options.devices[0])
    if options.resume:
        run = archive.run(options.resume)
        if run is None:
            raise ValueError(f"--resume {options.resume}: no such run in {options.archive_path}; "
                             "`kernelevo archive ls runs` lists them")
        if run.task_id != task_id:
            raise ValueError(f"--resume {options.resume}: that run is for another task (or this task file changed)")
        archive.set_run_status(options.resume, "running")
        stored = run.config
        return task_id, options.resume, run.seed, stored.get("format", fmt), stored.get("baseline", "eager")
    gpu, torch_version, cuda_version = placement.label(options)
    config = run_config(task=options.task_path, model=", ".join(ensemble.labels), models=given[0],
                        model_for=given[1], devices=options.devices, format=fmt,
                        policy=options.judge.policy, trials=options.judge.trials, shapes=options.judge.shapes,
                        seed=options.seed,
                        limits=dataclasses.asdict(options.budget), search=dataclasses.asdict(options.settings),
                        seed_from=options.seed_from, executor=options.judge.executor, baseline=options.baseline,
                        compile_baseline=options.judge.compile_baseline)
    run_id = archive.start_run(task_id, config, options.seed, ",".join(options.devices), gpu,
                               torch_version, cuda_version)
    return task_id, run_id, options.seed, fmt, options.baseline


def _baseline(asked: str, options: OptimizeOptions, on_status: Callable[[str], None]) -> str:
    """The baseline a run's fitness is a speedup over, said once: torch.compile unless eager is asked
    for or torch.compile is not measured (a kernel whose torch.compile figure is missing is ranked by
    eager all the same: kernelevo.evaluation.Variant.against)."""
    if asked == "compile" and not options.judge.compile_baseline:
        on_status("baseline: eager, since torch.compile is not measured (--no-compile-baseline)")
        return "eager"
    other = "eager" if asked == "compile" else "torch.compile"
    on_status(f"baseline: {BASELINES[asked]}: kernels are ranked by their speedup over it; {other} is shown beside")
    return asked


def _opponent(judge, task, device: str, baseline: str, on_status: Callable[[str], None],
              tick: Callable[[], None] = lambda: None) -> Opponent | None:
    """What the kernels must beat, measured before the first call so that every prompt names it (the
    judge caches it: the first candidate's figures are scaled by the same measurement)."""
    on_status("baseline: timing the reference before the first call")
    measured = _waited(lambda: judge.baseline(task, device), tick=tick)
    if measured is None or measured.eager_ms is None:
        return None
    made = Opponent(baseline, measured.eager_ms, measured.compiled_ms, measured.eager_kernels,
                    measured.compiled_kernels, measured.bound_ms, bound_from=peaks_from(measured.sol),
                    floor_ms=measured.memory_ms)
    why = opponent_bound(made)
    if why:
        on_status(f"speed of light not used: {why}")
    return dataclasses.replace(made, bound_why=why)


def _bound_used(opponent: Opponent | None) -> BoundUsed | None:
    """The speed of light the run had, where its peaks came from, and why it was not used (None without one)."""
    if opponent is None or not opponent.bound_ms:
        return None
    return BoundUsed(opponent.bound_ms, opponent.bound_from or "calibrated peaks", opponent.bound_why or "")


def _waited(fn: Callable[[], Any], tick: Callable[[], None] = lambda: None) -> Any:
    """fn() on a daemon thread, waited for here: a Ctrl-C then stops the run at once (a Ray executor's ray.get in
    the main thread took the interrupt as its own and the run went on). `tick` is called every half second: a
    bench's stop is raised from it, where a task timing its reference or making its final judgement (minutes for a
    large task under torch.compile or memcheck) did not stop within the bench's grace and was left as after a kill."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - raised again in the waiting thread
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="kernelevo-wait").start()
    while True:
        try:
            return future.result(timeout=0.5)
        except concurrent.futures.TimeoutError:
            tick()


def _ticker(run: _Prepared, status: str, on_progress: Callable[[Progress], None] | None) -> Callable[[], None]:
    """What a wait outside the search calls: the display's on_progress, with the run's progress as its rows hold it
    and `status` (a bench raises its stop from it)."""
    waiting = Progress(judged=run.state.judged(), run_id=run.state.run_id, status=status)
    return (lambda: on_progress(waiting)) if on_progress else (lambda: None)


def _stepping_stones(archive, task, task_id: int, embedder, options: OptimizeOptions,
                     on_status) -> tuple[tuple[Variant, ...], tuple[int, int]]:
    """Kernels earlier runs marked as stepping stones: this task first (this archive and --seed-from
    files, matched by source hash), then similar tasks by embedding."""
    from kernelevo.archive.store import Archive

    from ..state import inspirations

    rows = [r for r in archive.stepping_stones(task_hash=task.source_hash) if r.run_id != options.resume]
    for path in options.seed_from:
        with Archive.open_readonly(path) as other:
            rows += other.stepping_stones(task_hash=task.source_hash)
    if len(rows) < 3:
        vector = embedder.embed([task.source])[0]
        archive.put_embedding("task", task_id, embedder.name, vector, task.source_hash)
        similar = [tid for tid, score in archive.similar_tasks(vector, embedder.name, exclude_task_id=task_id)
                   if score > 0.8]
        if similar:
            rows += archive.stepping_stones(task_ids=similar)
    chosen = inspirations(rows)
    tasks = {r.task_id for r in rows if r.source in {v.source for v in chosen}}
    if chosen:
        on_status(f"seeded from {len(chosen)} kernels of {len(tasks)} tasks")
    return chosen, (len(chosen), len(tasks))
