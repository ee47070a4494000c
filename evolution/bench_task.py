"""One task of a bench: its search (loop.optimize on one device), or its given candidate files
judged; returns the fields of its bench row. Called from evolution/bench.py's worker threads."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .bench import _Runner


def search(runner: _Runner, row: dict, device: str, cap: float | None) -> dict:
    """The task's search on `device` alone, resuming its run when an earlier session stopped it."""
    from kernelevo.agent.client import Unreachable

    from .loop import optimize
    from .outcome import EXIT_UNREACHABLE

    base = runner.options.search
    resume = row.get("run_id")  # a row not done has a run only when a session stopped in its search
    options = dataclasses.replace(base, task_path=Path(row["path"]), devices=(device,), resume=resume,
                                  limits=dataclasses.replace(base.limits, max_cost_usd=cap))
    outcome = optimize(options, on_progress=runner.progress_of(row),
                       on_status=lambda text: runner._show(row["name"], text))
    if outcome.exit_code == EXIT_UNREACHABLE:  # the run is stopped and resumable; so is the bench
        raise Unreachable(outcome.reason)
    store = runner.store
    task_id = store.run(outcome.run_id)["task_id"]
    fields = {"status": "done", "run_id": outcome.run_id, "task_id": task_id, "error": ""}
    if outcome.best is not None:
        fields.update(kernel_id=outcome.best_kernel_id,
                      evaluation_id=store.final_evaluation_id(outcome.run_id, outcome.best_kernel_id),
                      degenerate="; ".join(outcome.best.warnings))
    else:
        fields["degenerate"] = _probe(runner, Path(row["path"]), device)
    return fields


def score(runner: _Runner, row: dict, device: str, cap: float | None) -> dict:
    """The task's `<task>__<label>.py` files judged (final figures) by the bench's scoring judge; the
    best that passes is its row."""
    from kernelevo.tasks import load_task

    from .rejudge import store_imported

    folder = runner.options.candidates
    files = sorted(Path(folder).glob(f"{Path(row['path']).stem}__*.py"))
    if not files:
        return {"status": "skipped", "error": f"no candidate file {Path(row['path']).stem}__*.py in {folder}"}
    task = load_task(row["path"])
    store = runner.store
    ids = [kid for kid, _ in store_imported(store, [_imported(task, f) for f in files])]
    judge = runner.judge
    futures = [(kid, judge.submit(task, f, device, final=True)) for kid, f in zip(ids, files)]
    judged = []
    for kid, future in futures:
        evaluation = future.result()
        judged.append((kid, evaluation, store.add_evaluation(kid, evaluation, purpose="rejudge")))
        runner._show(row["name"], f"{len(judged)}/{len(files)} candidates judged")
    degenerate = _baseline_warnings(judge, task, device)
    ok = [j for j in judged if j[1].ok]
    kid, evaluation, evaluation_id = max(ok, key=lambda j: j[1].speedup_eager or 0.0) if ok else judged[0]
    return {"status": "done", "task_id": store.kernel(kid)["task_id"], "kernel_id": kid,
            "evaluation_id": evaluation_id, "degenerate": degenerate, "error": ""}


def scoring_judge(runner: _Runner, devices: tuple[str, ...]):
    """One judge for every task a candidates bench scores, with each pending task's baseline asked
    for at once: the baselines' torch.compile builds then overlap on the CPU cores (one task after
    another, they kept the GPU waiting for most of a suite's wall time)."""
    from kernelevo.judge.api import Judge
    from kernelevo.tasks import TaskError, load_task

    judge = Judge(runner.options.search.cache_dir, _judge_options(runner, devices))
    for i, row in enumerate(runner.queue):
        try:
            judge.prefetch_baseline(load_task(row["path"]), devices[i % len(devices)])
        except TaskError:
            continue  # its own scoring says what is wrong with it
    return judge


def _imported(task, path: Path):
    from kernelevo.archive.importing import Imported

    return Imported(task.name, task.source, path.read_text(), path.name)


def _judge_options(runner: _Runner, devices: tuple[str, ...]):
    from kernelevo.judge.api import JudgeOptions

    s = runner.options.search
    return JudgeOptions(devices=devices, policy=s.policy, trials=s.trials, seed=s.seed,
                        compile_baseline=s.compile_baseline, shapes=s.shapes, executor=s.executor,
                        ray_address=s.ray_address, **({"timing": s.timing} if s.timing else {}))


def _probe(runner: _Runner, path: Path, device: str) -> str:
    """The reference's warnings when no kernel of the search passed (so no evaluation carries them)."""
    from kernelevo.judge.api import Judge
    from kernelevo.tasks import TaskError, load_task

    try:
        task = load_task(path)
    except TaskError:
        return ""
    with Judge(runner.options.search.cache_dir, _judge_options(runner, (device,))) as judge:
        return _baseline_warnings(judge, task, device)


def _baseline_warnings(judge, task, device: str) -> str:
    """A task is degenerate when the judge warned about its reference (near-constant output, output
    insensitive to its inputs or weights): then a speedup says nothing about kernels."""
    baseline = judge.baseline(task, device) or {}
    return "; ".join(w.get("message", "") for w in baseline.get("warnings", []))
