"""A whole model: split it into parts, search the hottest as a bench whose budget follows their
share of the model's time (Amdahl: a part at 2 % gets little), and hand the model back with the
verified kernels in place, judged end to end (drivers/parts/). Like loop/ and bench.py this joins
the rooms; it adds no search logic. Resumable as a bench: the parts' bench id is in the result."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from .bench import BenchOptions, BenchView, run_bench
from ..options import OptimizeOptions, judge_options


def assemble_model(model_path: Path, bench_id: str, out_file: Path, search: OptimizeOptions,
                   min_speedup: float = 1.0) -> dict:
    """The model of `model_path` with the verified kernels of bench `bench_id` (a suite written by
    split) in place, written to `out_file` and judged end to end; the result, also written beside
    `out_file` as JSON. ValueError (one line) for a bench that is not a split model's."""
    from kernelevo.archive.reports import model_html
    from kernelevo.archive.reports.bench_data import task_rows
    from kernelevo.archive.store import Archive
    from kernelevo.judge.api import Judge
    from kernelevo.evolution.drivers.parts.assemble import chosen_parts, result, verified
    from kernelevo.evolution.drivers.parts.split import SPLIT_JSON
    from kernelevo.tasks import load_task

    task = load_task(model_path)
    with Archive.open_readonly(search.archive_path) as store:
        bench = store.bench(bench_id)
        if bench is None:
            raise ValueError(f"--bench {bench_id}: no such bench in {search.archive_path}; `kernelevo bench ls` lists them")
        split_dir = Path(bench["suite"])
        split_dir = split_dir.parent if split_dir.is_file() else split_dir  # a model's searched.txt lists its parts
        if not (split_dir / SPLIT_JSON).is_file():
            raise ValueError(f"bench {bench_id} ran {split_dir}, which has no {SPLIT_JSON}: "
                             "assemble takes a bench of the parts `kernelevo split` wrote")
        rows = task_rows(store.bench_tasks(bench_id))
        candidates, left = chosen_parts(split_dir, rows, lambda kid: store.kernel(kid)["source"], min_speedup,
                                        search.baseline if search.compile_baseline else "eager")
        out_file.parent.mkdir(parents=True, exist_ok=True)
        # the whole model under the policy of an assembled model: each kernel passed its part's own policy
        whole = dataclasses.replace(search, policy="model")
        with Judge(search.cache_dir, judge_options(whole, search.devices[:1])) as judge:
            evaluation = verified(task.source, Path(model_path).name, out_file, candidates,
                                  lambda path: judge.evaluate(task, path, final=True))
            placed = evaluation.ok and any(not c.reverted for c in candidates)
            # torch.compile keeps working: the model with its kernels in place, compiled, against the original, compiled
            pair = judge.compiled_pair(task, out_file, evaluation.device) if placed else None
        data = result(str(model_path), out_file, bench_id, candidates, left, evaluation)
        data["under_compile"] = pair
        try:  # the page costs nothing of the result if it cannot be written
            data["report"] = str(model_html.write(data, store, out_file.with_suffix(".html")))
        except OSError as exc:
            data["report"] = f"not written: {exc}"
    out_file.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    return data


SEARCHED = "searched.txt"  # the parts a model's search takes, listed in the parts folder (a suite file)
SPLIT_TOP = 8  # parts written to choose the searched ones among, by headroom


def optimize_model(search: OptimizeOptions, parts: int, parts_dir: Path, out_file: Path,
                   max_cost_usd: float | None, resume: str | None = None, min_speedup: float = 1.0,
                   on_progress: Callable[[BenchView], None] = lambda v: None,
                   on_status: Callable[[str], None] = lambda text: None) -> dict:
    """Split `search.task_path` (unless resuming a bench of its parts), search the `parts` parts with the
    most headroom over torch.compile (the hottest in eager without --no-compile-baseline) as a bench
    with the budget shared by time share, then assemble and verify."""
    from kernelevo.evolution.drivers.parts.headroom import searched
    from kernelevo.evolution.drivers.parts.split import SPLIT_JSON, split_model

    model_path = Path(search.task_path)
    suite = parts_dir / SEARCHED
    if resume is None:
        on_status(f"splitting {model_path.name} on {search.devices[0]}")
        ranked = search.compile_baseline  # rank by headroom: a few more parts written to choose among
        data = split_model(model_path, parts_dir, search.devices[0], max(parts, SPLIT_TOP) if ranked else parts,
                           seed=search.seed, headroom=ranked, cache_dir=search.cache_dir, on_status=on_status,
                           cover=1.0)  # the parts to choose among are the hottest, whatever share they hold
        chosen = searched(data, parts)
        left = [t["task"] for t in data["tasks"] if t.get("left_to_compiler")]
        if left:
            on_status(f"left to the compiler (within 1.2x of the speed of light): {', '.join(left)}")
        suite.write_text("".join(f"{t['task']}\n" for t in chosen))
    else:
        data = json.loads((parts_dir / SPLIT_JSON).read_text())
        chosen = searched(data, parts) if not suite.exists() else \
            [t for t in data["tasks"] if t["task"] in suite.read_text().split()]
    weights = tuple((Path(t["task"]).stem, t["share"] or 0.0) for t in chosen)
    bench = run_bench(BenchOptions(suite=suite if suite.exists() else parts_dir, search=search,
                                   max_cost_usd=max_cost_usd, resume=resume, weights=weights), on_progress, on_status)
    on_status(f"assembling {model_path.name} from bench {bench.bench_id}")
    done = assemble_model(model_path, bench.bench_id, out_file, search, min_speedup)
    return {**done, "split": data}
