"""Judge kernels from elsewhere (imports) here, and keep the verdict beside the numbers they claimed.

Like loop/ this joins the judge and the archive, but nothing of the search runs: no LLM, no
selection. A kernel that passes becomes a stepping stone, so the next run on its task starts from it.
Results are stored as they arrive, from this thread only; Ctrl-C keeps every verdict already in.
"""
from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelevo.runtime import slug
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
    device: str = ""  # which of the judge's devices judged it (cuda:1; on a Ray cluster its node/GPU)


def claimed_speedup(claims: dict | None) -> float | None:
    """The speedup over eager a source published: Sakana's CUDA_Speedup_Native, CUDA-L1's score."""
    claims = claims or {}
    for key in ("CUDA_Speedup_Native", "score_default", "score", "speedup"):
        if isinstance(claims.get(key), (int, float)):
            return float(claims[key])
    return next((float(v) for k, v in sorted(claims.items()) if k.startswith("score") and isinstance(v, (int, float))),
                None)


def rejudge(store: Archive, kernel_ids: Iterable[int], judge: Judge, work_dir: Path,
            on_result: Callable[[Rejudged], None] = lambda r: None, in_flight: int | None = None,
            deadline: float | None = None) -> list[Rejudged]:
    """Judge each kernel on the judge's devices (spread over them by its executor); store each
    evaluation with purpose 'rejudge'; mark the ones that pass as stepping stones.

    At most `in_flight` kernels are with the judge at once (None: all of them), so that a long
    collection can stop between kernels: none is started after `deadline` (a time.monotonic()
    value), and those left unjudged are simply judged by a later call."""
    names: dict[int, str] = {}  # task id -> the stored task name, read once per task
    loaded: dict[int, Task | str] = {}
    pending: dict[concurrent.futures.Future, dict] = {}
    done: list[Rejudged] = []
    queue = iter(kernel_ids)
    try:
        while True:
            while (in_flight is None or len(pending) < in_flight) and (deadline is None or time.monotonic() < deadline):
                kernel_id = next(queue, None)
                if kernel_id is None:
                    break
                _submit(store, kernel_id, judge, work_dir, loaded, names, pending, done, on_result)
            if not pending:
                return done
            finished, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                done.append(_tell(on_result, _stored(store, future, pending.pop(future))))
    except KeyboardInterrupt:
        for future in pending:
            future.cancel()
        raise


def _submit(store: Archive, kernel_id: int, judge: Judge, work_dir: Path, loaded: dict, names: dict,
            pending: dict, done: list, on_result: Callable[[Rejudged], None]) -> None:
    """Hand one kernel to the judge, or say at once why it cannot be judged (its task does not load)."""
    kernel = store.kernel(kernel_id)
    task = _task(store, kernel.task_id, work_dir, loaded)
    if kernel.task_id not in names:
        stored = store.task(kernel.task_id)
        names[kernel.task_id] = stored.name if stored else ""
    name = names[kernel.task_id]
    if isinstance(task, str):
        done.append(_tell(on_result, Rejudged(kernel_id, name, "not judged", task, None,
                                              claimed_speedup(kernel.claims))))
        return
    path = work_dir / "kernels" / f"kernel_{kernel_id}_{kernel.source_hash[:12]}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kernel.source)
    pending[judge.submit(task, path)] = {"kernel": kernel, "name": name}


def _stored(store: Archive, future: concurrent.futures.Future, job: dict) -> Rejudged:
    """The judge's verdict on one kernel, stored as it arrives (a stepping stone when it passed)."""
    kernel, name = job["kernel"], job["name"]
    try:
        evaluation = future.result()
    except Exception as exc:  # noqa: BLE001 - a fault of the judge itself: say so, judge the rest
        return Rejudged(kernel.id, name, "not judged", f"judge error: {exc!r}", None,
                        claimed_speedup(kernel.claims))
    store.add_evaluation(kernel.id, evaluation, purpose="rejudge")
    if evaluation.ok:
        store.mark_stepping_stone(kernel.id, f"imported; rejudged ok at {evaluation.speedup_eager:.2f}x "
                                                f"eager on {evaluation.device_name or evaluation.device}")
    return Rejudged(kernel.id, name, evaluation.verdict, evaluation.reason, evaluation.speedup_eager,
                    claimed_speedup(kernel.claims), evaluation.device_name,
                    evaluation.node or evaluation.device)


def store_imported(store: Archive, found: Sequence) -> list[tuple[int, bool]]:
    """Store kernels found elsewhere (importing.Imported): the task by source hash, each kernel
    once per task and source, its published numbers as claims. Per item, in order: (its kernel
    id, whether it is new here); a kernel seen before, imported or written by a run, is one row."""
    from kernelevo.formats import detect_format
    from kernelevo.tasks import source_hash

    out: list[tuple[int, bool]] = []
    known: dict[int, dict[str, int]] = {}  # task id -> its kernels by source hash, read once per task
    for item in found:
        task_id = store.add_task(item.task_name, item.task_source, source_hash(item.task_source))
        kernels = known.setdefault(task_id, {k.source_hash: k.id for k in store.kernels(task_id=task_id)})
        digest = source_hash(item.source)
        if digest in kernels:
            out.append((kernels[digest], False))
            continue
        try:
            fmt = detect_format(item.source)
        except (SyntaxError, ValueError):
            fmt = "unknown"
        kernels[digest] = store.add_kernel(task_id, item.source, fmt, "import", origin="import",
                                           claims=item.claims or None, thinking=f"imported from {item.where}")
        out.append((kernels[digest], True))
    return out


def _tell(on_result: Callable[[Rejudged], None], result: Rejudged) -> Rejudged:
    on_result(result)
    return result


def _task(store: Archive, task_id: int, work_dir: Path, loaded: dict[int, Task | str]) -> Task | str:
    """The kernel's task loaded from its stored source (once per task), or why it cannot be."""
    if task_id not in loaded:
        row = store.task(task_id)
        path = work_dir / "tasks" / f"{slug(row.name or 'task')}_{row.source_hash[:12]}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(row.source)
        try:
            loaded[task_id] = load_task(path)
        except TaskError as exc:
            loaded[task_id] = f"its task does not load: {exc}"
    return loaded[task_id]
