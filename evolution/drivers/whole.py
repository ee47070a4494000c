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
                   min_speedup: float = 1.0, modes: tuple[str, ...] | None = None,
                   on_status: Callable[[str], None] = lambda text: None) -> dict:
    """The model of `model_path` with the verified kernels of bench `bench_id` (a suite written by
    split) in place, written to `out_file`, judged end to end and timed in its user's loop in each of
    `modes` (all four on a GPU, eager and default on the CPU, by default); the result, also written
    beside `out_file` as JSON. ValueError (one line) for a bench that is not a split model's. `on_status`
    hears each step as it starts (minutes each on a GPU: the final judgement, compiles in every mode)."""
    from kernelevo.archive.reports import model_html
    from kernelevo.archive.reports.bench_data import task_rows
    from kernelevo.archive.store import Archive
    from kernelevo.judge.api import CPU_MODES, MODES, Judge
    from kernelevo.evolution.drivers.parts.assemble import chosen_parts, result
    from kernelevo.evolution.drivers.parts.split import SPLIT_JSON
    from kernelevo.tasks import load_task

    task = load_task(model_path)
    asked = tuple(modes or (MODES if search.devices[0].startswith("cuda") else CPU_MODES))
    with Archive.open_readonly(search.archive_path) as store:
        bench = store.bench(bench_id)
        if bench is None:
            raise ValueError(f"--bench {bench_id}: no such bench in {search.archive_path}; `kernelevo bench ls` lists them")
        split_dir = Path(bench.suite)
        split_dir = split_dir.parent if split_dir.is_file() else split_dir  # a model's searched.txt lists its parts
        if not (split_dir / SPLIT_JSON).is_file():
            raise ValueError(f"bench {bench_id} ran {split_dir}, which has no {SPLIT_JSON}: "
                             "assemble takes a bench of the parts `kernelevo split` wrote")
        rows = task_rows(store.bench_tasks(bench_id))
        candidates, left = chosen_parts(split_dir, rows, lambda kid: store.kernel(kid).source, min_speedup,
                                        search.ranked_by)
        out_file.parent.mkdir(parents=True, exist_ok=True)
        # the whole model under the policy of an assembled model: each kernel passed its part's own
        whole = dataclasses.replace(search, judge=dataclasses.replace(search.judge, policy="model"))
        with Judge(search.cache_dir, judge_options(whole, search.devices[:1])) as judge:
            placed = _placed(task, Path(model_path).name, out_file, candidates, judge, asked, on_status)
        data = {**result(str(model_path), out_file, bench_id, candidates, left, placed.evaluation), **placed.figures()}
        out_file.write_text(placed.delivered())
        try:  # the page costs nothing of the result if it cannot be written
            data["report"] = str(model_html.write(data, store, out_file.with_suffix(".html")))
        except OSError as exc:
            data["report"] = f"not written: {exc}"
    out_file.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def _placed(task, name: str, out_file: Path, candidates: list, judge, asked: tuple[str, ...],
            on_status: Callable[[str], None]):
    """Verify the parts in place (reverting those wrong in place), time the model in every mode, keep
    the parts that earn their place in the chosen one, and hand back nothing where the assembly does
    not beat the original's best mode beyond noise (parts/effect.py)."""
    from kernelevo.evolution.drivers.parts.as_run import as_run_text, verified_as_run
    from kernelevo.evolution.drivers.parts.assemble import verified
    from kernelevo.evolution.drivers.parts.drop_in import drop_in_text
    from kernelevo.evolution.drivers.parts.effect import Assembly, effects, headline

    def judged(path: Path):
        on_status(f"judging {name} with {_names(c for c in candidates if not c.reverted)} in place")
        return judge.evaluate(task, path, final=True)

    def timed(sources: tuple[str, ...] = ()):
        modes = (chosen,) if sources else asked
        on_status(f"timing {name} in {', '.join(modes)}, host included: the original, the assembly"
                  + (f" and it without each of {_names(kept)}" if sources else "") + " (compiles first)")
        done = judge.modes(task, out_file, evaluation.device, modes, sources)
        on_status(_loop_line(done, modes))
        return done

    def text(parts: list, mode: str = "eager") -> str:
        return drop_in_text(task.source, name, [c.placed for c in parts], mode)

    def judged_as_run(mode: str):
        on_status(f"judging {name} as kernelevo_compile runs it in {mode}, with {_names(kept)} in place")
        path = out_file.with_name(f"{out_file.stem}_as_run.py")
        return _judged_file(judge, task, path, as_run_text(text(kept, mode)))

    evaluation = verified(task.source, name, out_file, candidates, judged)
    kept = [c for c in candidates if not c.reverted]
    if not evaluation.ok:
        return Assembly(task.source, name, evaluation, tuple(kept), None, asked, len(candidates))
    loop = timed()
    chosen = loop.best("assembled")
    if kept and chosen:
        effects(candidates, chosen, timed, text, loop)
        for c in kept:
            on_status(f"{c.placed.name}: " + (f"not placed: {c.reverted}" if c.reverted else "kept in place"))
        still = [c for c in candidates if not c.reverted]
        if still != kept:
            evaluation = verified(task.source, name, out_file, still, judged)
            loop = timed() if evaluation.ok and still else loop
            kept = [c for c in candidates if not c.reverted]
    speedup, as_run, unverified = headline(loop)[2], None, []
    if kept and speedup is not None and speedup.beyond_noise:  # the headline's mode, judged as the user runs it
        timed_before = loop
        loop, as_run = verified_as_run(loop, judged_as_run)
        unverified = [loop.errors[key] for key in timed_before.samples if key not in loop.samples]
        speedup = headline(loop)[2]
    if kept and (speedup is None or not speedup.beyond_noise):
        for c in kept:
            c.reverted = ("in place together, the model was not faster than the original in its best mode beyond noise"
                          + "".join(f" ({why})" for why in unverified))
        evaluation, kept = verified(task.source, name, out_file, [], judged), []
    return Assembly(task.source, name, evaluation, tuple(kept), loop, asked, len(candidates), as_run)


def _judged_file(judge, task, path: Path, source: str):
    """The judge's evaluation of `source`, written to `path` for it and gone after."""
    path.write_text(source)
    try:
        return judge.evaluate(task, path)
    finally:
        path.unlink(missing_ok=True)


def _names(candidates) -> str:
    return ", ".join(c.placed.name for c in candidates) or "no part"


def _loop_line(loop, modes: tuple[str, ...]) -> str:
    """One line of a timing: per mode, each model's median ms per call, or that it failed there."""
    cells = []
    for mode in modes:
        models = sorted({key.split("@", 1)[0] for key in (*loop.samples, *loop.errors) if key.endswith(f"@{mode}")})
        said = [f"{m} {t.ms:.3f}" if (t := loop.time(m, mode)) else f"{m} failed" for m in models]
        cells.append(f"{mode}: " + ", ".join(said))
    return "ms per call: " + "; ".join(cells)


@dataclasses.dataclass(frozen=True)
class PartsWaiting:
    """A model whose parts' bench stopped with searches waiting for replies (a replay ran out): not
    assembled, since a part still searching is no part without a kernel; `--resume bench_id` goes on."""
    bench_id: str
    waiting: int  # parts whose search waits for its prompt's answer


SEARCHED = "searched.txt"  # the parts a model's search takes, listed in the parts folder (a suite file)
SPLIT_TOP = 8  # parts written to choose the searched ones among, by headroom


def optimize_model(search: OptimizeOptions, parts: int, parts_dir: Path, out_file: Path,
                   max_cost_usd: float | None, resume: str | None = None, min_speedup: float = 1.0,
                   modes: tuple[str, ...] | None = None, granularity: str = "module",
                   on_progress: Callable[[BenchView], None] = lambda v: None,
                   on_status: Callable[[str], None] = lambda text: None) -> dict | PartsWaiting:
    """Split `search.task_path` (unless resuming a bench of its parts), search the `parts` parts with the
    most headroom over torch.compile (the hottest in eager without --no-compile-baseline) as a bench
    with the budget shared by time share, then assemble and verify; PartsWaiting where some part's
    search waits for a reply (its assembly would read the part as one without a kernel)."""
    from kernelevo.evolution.drivers.parts.headroom import searched
    from kernelevo.evolution.drivers.parts.split import SPLIT_JSON, split_model

    model_path = Path(search.task_path)
    suite = parts_dir / SEARCHED
    if resume is None:
        on_status(f"splitting {model_path.name} on {search.devices[0]}")
        ranked = search.judge.compile_baseline  # rank by headroom: a few more parts written to choose among
        data = split_model(model_path, parts_dir, search.devices[0], max(parts, SPLIT_TOP) if ranked else parts,
                           seed=search.seed, headroom=ranked, cache_dir=search.cache_dir, on_status=on_status,
                           cover=1.0, granularity=granularity)  # the hottest to choose among, whatever share they hold
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
                                   max_cost_usd=max_cost_usd, resume=resume, weights=weights, force=search.force),
                      on_progress, on_status)
    if bench.waiting:
        return PartsWaiting(bench.bench_id, bench.waiting)
    on_status(f"assembling {model_path.name} from bench {bench.bench_id}")
    done = assemble_model(model_path, bench.bench_id, out_file, search, min_speedup, modes, on_status)
    return {**done, "split": data}
