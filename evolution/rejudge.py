"""Judge kernels from elsewhere (imports) here, and keep the verdict beside the numbers they claimed.

Like loop.py this joins the judge and the archive, but nothing of the search runs: no LLM, no
selection. A kernel that passes becomes a stepping stone, so the next run on its task starts from it.
Results are stored as they arrive, from this thread only; Ctrl-C keeps every verdict already in.
"""
from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelevo.runtime._common import slug
from kernelevo.tasks import Task, TaskError, load_task

if TYPE_CHECKING:
    from kernelevo.archive.store import Archive
    from kernelevo.judge.api import Judge


@dataclass(frozen=True)
class Rejudged:
    kernel_id: int
    task: str
    verdict: str  # the judge's, or "not judged" when its task could not be loaded
    reason: str
    speedup_eager: float | None
    claimed: float | None  # the speedup its source published, when it gave one
    device_name: str = ""


def claimed_speedup(claims: dict | None) -> float | None:
    """The speedup over eager a source published: Sakana's CUDA_Speedup_Native, CUDA-L1's score."""
    claims = claims or {}
    for key in ("CUDA_Speedup_Native", "score_default", "score", "speedup"):
        if isinstance(claims.get(key), (int, float)):
            return float(claims[key])
    return next((float(v) for k, v in sorted(claims.items()) if k.startswith("score") and isinstance(v, (int, float))),
                None)


def rejudge(store: Archive, kernel_ids: Sequence[int], judge: Judge, work_dir: Path,
            on_result: Callable[[Rejudged], None] = lambda r: None) -> list[Rejudged]:
    """Judge each kernel on the judge's devices (spread over them by its executor); store each
    evaluation with purpose 'rejudge'; mark the ones that pass as stepping stones."""
    tasks: dict[int, Task | str] = {}
    names: dict[int, str] = {}  # task id -> the stored task name, read once per task
    pending: dict[concurrent.futures.Future, dict] = {}
    done: list[Rejudged] = []
    for kernel_id in kernel_ids:
        kernel = store.kernel(kernel_id)
        task = _task(store, kernel["task_id"], work_dir, tasks)
        if kernel["task_id"] not in names:
            names[kernel["task_id"]] = (store.task(kernel["task_id"]) or {}).get("name", "")
        name = names[kernel["task_id"]]
        if isinstance(task, str):
            done.append(_tell(on_result, Rejudged(kernel_id, name, "not judged", task,
                                                  None, claimed_speedup(kernel["claims"]))))
            continue
        path = work_dir / "kernels" / f"kernel_{kernel_id}_{kernel['source_hash'][:12]}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(kernel["source"])
        pending[judge.submit(task, path)] = {"kernel": kernel, "name": name}
    try:
        for future in concurrent.futures.as_completed(pending):
            kernel, name = pending[future]["kernel"], pending[future]["name"]
            try:
                evaluation = future.result()
            except Exception as exc:  # noqa: BLE001 - a fault of the judge itself: say so, judge the rest
                done.append(_tell(on_result, Rejudged(kernel["id"], name, "not judged", f"judge error: {exc!r}",
                                                      None, claimed_speedup(kernel["claims"]))))
                continue
            store.add_evaluation(kernel["id"], evaluation, purpose="rejudge")
            if evaluation.ok:
                store.mark_stepping_stone(kernel["id"], f"imported; rejudged ok at {evaluation.speedup_eager:.2f}x "
                                                        f"eager on {evaluation.device_name or evaluation.device}")
            done.append(_tell(on_result, Rejudged(kernel["id"], name, evaluation.verdict, evaluation.reason,
                                                  evaluation.speedup_eager, claimed_speedup(kernel["claims"]),
                                                  evaluation.device_name)))
    except KeyboardInterrupt:
        for future in pending:
            future.cancel()
        raise
    return done


def _tell(on_result: Callable[[Rejudged], None], result: Rejudged) -> Rejudged:
    on_result(result)
    return result


def _task(store: Archive, task_id: int, work_dir: Path, loaded: dict[int, Task | str]) -> Task | str:
    """The kernel's task loaded from its stored source (once per task), or why it cannot be."""
    if task_id not in loaded:
        row = store.task(task_id)
        path = work_dir / "tasks" / f"{slug(row['name'] or 'task')}_{row['source_hash'][:12]}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(row["source"])
        try:
            loaded[task_id] = load_task(path)
        except TaskError as exc:
            loaded[task_id] = f"its task does not load: {exc}"
    return loaded[task_id]
