"""A bench's task scored from given candidate files (`bench --candidates`): each `<task>__<label>.py` judged with
final figures by one judge for the whole suite, the best that passes its row. bench.py's runner calls it."""
from __future__ import annotations

from pathlib import Path

from kernelevo.archive.records import BenchTaskRecord

from ..options import judge_options


def score_task(runner, row: BenchTaskRecord, device: str, cap: float | None) -> dict:
    """The task's `<task>__<label>.py` files judged (final figures) by the bench's scoring judge; the
    best that passes is its row."""
    from kernelevo.tasks import load_task

    from .rejudge import store_imported

    folder = runner.options.candidates
    files = sorted(Path(folder).glob(f"{Path(row.path).stem}__*.py"))
    if not files:
        return {"status": "skipped", "error": f"no candidate file {Path(row.path).stem}__*.py in {folder}"}
    task = load_task(row.path)
    store = runner.store
    ids = [kid for kid, _ in store_imported(store, [_imported(task, f) for f in files])]
    judge = runner.judge
    futures = [(kid, judge.submit(task, f, device, final=True)) for kid, f in zip(ids, files)]
    judged = []
    for kid, future in futures:
        evaluation = future.result()
        judged.append((kid, evaluation, store.add_evaluation(kid, evaluation, purpose="rejudge")))
        runner._show(row.name, f"{len(judged)}/{len(files)} candidates judged")
    degenerate = baseline_warnings(judge, task, device)
    ok = [j for j in judged if j[1].ok]
    against = _speedup_against(runner.view.baseline)  # the candidate that beats the bench's baseline most
    kid, evaluation, evaluation_id = max(ok, key=lambda j: against(j[1])) if ok else judged[0]
    return {"status": "done", "task_id": store.kernel(kid).task_id, "kernel_id": kid,
            "evaluation_id": evaluation_id, "degenerate": degenerate, "error": ""}


def _speedup_against(baseline: str):
    """The figure a candidates bench chooses a task's kernel by: its speedup over torch.compile where
    that is the baseline and was measured, else over eager (as kernelevo.evaluation.Variant.fitness)."""
    def speedup(e) -> float:
        if baseline == "compile" and e.speedup_compile is not None:
            return e.speedup_compile
        return e.speedup_eager or 0.0
    return speedup


def scoring_judge(runner, devices: tuple[str, ...]):
    """One judge for every task a candidates bench scores, with each pending task's baseline asked
    for at once: the baselines' torch.compile builds then overlap on the CPU cores (one task after
    another, they kept the GPU waiting for most of a suite's wall time)."""
    from kernelevo.judge.api import Judge
    from kernelevo.tasks import TaskError, load_task

    judge = Judge(runner.options.search.cache_dir, judge_options(runner.options.search, devices))
    for i, row in enumerate(runner.queue):
        try:
            judge.prefetch_baseline(load_task(row.path), devices[i % len(devices)])
        except TaskError:
            continue  # its own scoring says what is wrong with it
    return judge


def _imported(task, path: Path):
    from kernelevo.archive.importing import Imported

    return Imported(task.name, task.source, path.read_text(), path.name)


def baseline_warnings(judge, task, device: str) -> str:
    """A task is degenerate when the judge warned about its reference (near-constant output, output
    insensitive to its inputs or weights): then a speedup says nothing about kernels."""
    baseline = judge.baseline(task, device)
    return "; ".join(baseline.warnings) if baseline else ""
