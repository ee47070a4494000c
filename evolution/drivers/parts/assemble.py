"""Hand the model back with verified kernels in place, judged end to end.

Which parts go in: those whose bench task found a kernel the judge verified and measured faster
than the baseline beyond noise (the interval of its speedup wholly above `min_speedup`): torch.compile
of the part alone by default, where it was measured (a kernel that beats eager but not what the
compiler makes of the same code is worth nothing in a model the user compiles), else eager. The assembled file
(drop_in.py) is then judged as a candidate against the original model by the same judge: every
trial, generality included, timed against eager and torch.compile of the whole model. A part that
is right alone can be wrong in place (a stride or aliasing assumption): when the whole is rejected,
each part is judged in place alone and those rejected are reverted with the judge's reason; if the
rest is still rejected together, the part with the smallest share of the model's time is reverted,
until the judge accepts the model or no part is left (the model as it was, judged too: that the
file still is the model, at about 1.0x). The policy is "model": each kernel passed its part's own. The model figure is the one measured; the
per-part contributions (share times the time a part's speedup saves) are estimates beside it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelevo.host import cpu_name

from .call import parse, parse_defaults
from .drop_in import Placed, drop_in_text
from .effect import triple
from .rewrite import Forward, Placement, Spot
from .split import SPLIT_JSON


@dataclass
class Candidate:
    """A part with a verified kernel: what the bench found, where it goes."""
    placed: Placed
    share: float
    speedup: float
    ci: tuple[float, float] | None
    kernel_id: int
    reverted: str = ""
    effect: Any = None  # its A/B in place (a Ratio: the model without it over the model with it; effect.py)
    with_ms: Any = None  # the model's LoopTime in the chosen mode with it in place, and without it
    without_ms: Any = None
    compile_speedup: float | None = None  # alone, against torch.compile of the part, where the bench measured it
    compile_ci: tuple[float, float] | None = None
    graph: Any = None  # alone, each replayed in a CUDA graph (GraphTiming), where the bench's final measured it


def chosen_parts(split_dir: Path, rows: list[dict], kernel_source: Callable[[int], str],
                 min_speedup: float, baseline: str = "compile") -> tuple[list[Candidate], list[dict]]:
    """The split's tasks whose bench row holds a verified kernel faster than `min_speedup` over
    `baseline` (beyond noise), as candidates to place; and a line of data for every task left as it
    was, with why."""
    from kernelevo.tasks import load_task

    data = json.loads((split_dir / SPLIT_JSON).read_text())
    by_file = {Path(r["path"]).name: r for r in rows}
    chosen, left = [], []
    for entry in data["tasks"]:
        row = by_file.get(entry["task"])
        why = _why_not(row, min_speedup, baseline)
        if why:
            left.append({"task": entry["task"], "share": entry["share"], "why": why})
            continue
        task = load_task(split_dir / entry["task"])
        kinds = tuple(_kind(x) for x in task.get_inputs())
        source = kernel_source(row["kernel_id"])
        label = f"kernel {row['kernel_id']}, {_format_of(source)} ({_alone(row)})"
        # a task folded over sites of other sizes: each site built as get_call_sites() lists it
        site_inits = tuple(task.call_sites[s["built"]][0] for s in entry["call_sites"]) if task.call_sites else ()
        placed = Placed(Path(entry["task"]).stem, source, task.init_args, kinds,
                        tuple(s["path"] for s in entry["call_sites"]), label, parse(entry.get("call"), len(kinds)),
                        _placement(entry, data, task.source), site_inits, parse_defaults(entry.get("defaults")))
        chosen.append(Candidate(placed, entry["share"] or 0.0, row["speedup_eager"], _ci(row, "speedup_eager"),
                                row["kernel_id"], compile_speedup=row.get("speedup_compile"),
                                compile_ci=_ci(row, "speedup_compile"), graph=_graph(row)))
    return chosen, left


def _placement(entry: dict, data: dict, source: str) -> Placement | None:
    """A region task's place in its modules' forwards (split.json's region and forwards); None for a module part."""
    if "region" not in entry:
        return None
    sites = entry["call_sites"]
    return Placement(tuple(Spot.of_json(s.get("region", entry["region"])) for s in sites),
                     tuple(Forward.of_json(s["path"], data["forwards"][s["path"]]) for s in sites), source)


def _format_of(source: str) -> str:
    """The kernel's format, for the drop-in's comments (a Triton one needs triton where it runs)."""
    from kernelevo.formats import detect_format

    try:
        return detect_format(source)
    except SyntaxError:
        return "unknown format"


def _why_not(row: dict | None, min_speedup: float, baseline: str = "compile") -> str:
    if row is None:
        return "not in the bench"
    if row.get("status") in ("pending", "running"):
        # an open search (a replay waiting for its next reply, or one stopped) has no final judgement yet
        so_far = row.get("search_speedup_compile") if baseline == "compile" else row.get("search_speedup_eager")
        best = f", best so far {so_far:.2f}x" if so_far else ""
        return (f"its search is still open ({row.get('calls') or 0} calls{best}): resume the bench with a call cap "
                "at its calls made to end it, then assemble")
    if not row.get("correct"):
        why = row.get("verdict") or row.get("status")
        return f"no verified kernel ({why}: {row['reason']})" if row.get("reason") else f"no verified kernel ({why})"
    key = "speedup_compile" if baseline == "compile" and row.get("speedup_compile") is not None else "speedup_eager"
    low = (row.get(f"{key}_ci") or [row[key]])[0]
    if low is None or low <= min_speedup:
        against = "torch.compile of the part" if key == "speedup_compile" else "eager"
        return f"its kernel is not faster than {min_speedup:g}x {against} beyond noise ({row[key]:.2f}x)"
    return ""


def _ci(row: dict, key: str) -> tuple[float, float] | None:
    """A bench row's interval of `key` (speedup_eager, speedup_compile) as a tuple; None where it has none."""
    return tuple(row[f"{key}_ci"]) if row.get(f"{key}_ci") else None


def _graph(row: dict):
    """The row's kernel alone as a CUDA graph replays it, beside torch.compile's (GraphTiming); None where its
    final was not measured so (the CPU, or a record from before)."""
    from kernelevo.twins import GraphTiming

    graph = row.get("graph")
    return GraphTiming.from_dict(graph) if graph else None


def _alone(row: dict) -> str:
    """'1.12x against torch.compile alone, 2.31x against eager': a placed part's own figures."""
    eager = f"{row['speedup_eager']:.2f}x against eager"
    if row.get("speedup_compile") is None:
        return eager + " alone"
    return f"{row['speedup_compile']:.2f}x against torch.compile alone, {eager}"


def _kind(x: Any) -> str:
    import torch

    return "tensor" if isinstance(x, torch.Tensor) else "bool" if isinstance(x, bool) else \
        "int" if isinstance(x, int) else "float"


def verified(model_source: str, model_name: str, out_file: Path, candidates: list[Candidate],
             judge: Callable[[Path], Any]) -> Any:
    """Write `out_file` with the candidates in place and judge it, reverting parts until the judge
    accepts the model or none is left (the model as it was, judged as well: that the file still is
    the model); the final evaluation. Reverted candidates carry the reason in `.reverted`."""
    def judged(parts: list[Candidate]):
        out_file.write_text(drop_in_text(model_source, model_name, [c.placed for c in parts]))
        return judge(out_file)

    kept = list(candidates)
    evaluation = judged(kept)
    if evaluation.ok or not kept:
        return evaluation
    if len(kept) > 1:
        for c in kept:
            alone = judged([c])
            if not alone.ok:
                c.reverted = f"wrong in place: {alone.verdict} ({alone.reason}): {alone.message}"
        kept = [c for c in kept if not c.reverted]
        evaluation = judged(kept)
    else:
        kept[0].reverted = f"wrong in place: {evaluation.verdict} ({evaluation.reason}): {evaluation.message}"
        kept, evaluation = [], judged([])
    while kept and not evaluation.ok:
        smallest = min(kept, key=lambda c: c.share)
        smallest.reverted = (f"reverted with the smallest share: the parts left were wrong together "
                             f"({evaluation.reason}: {evaluation.message})")
        kept.remove(smallest)
        evaluation = judged(kept)
    return evaluation


def result(model_path: str, out_file: Path, bench_id: str, candidates: list[Candidate], left: list[dict],
           evaluation) -> dict:
    """What the assembly says: the measured model figure, then each part with its share, its own
    speedup, whether it is in place (or why not) and its estimated contribution; the Amdahl bound
    of the parts in place (their time gone entirely)."""
    placed = [c for c in candidates if not c.reverted]
    in_place = sum(c.share for c in placed)
    saved = sum(c.share * (1 - 1 / c.speedup) for c in placed if c.speedup)
    e = evaluation
    unchanged = "" if placed else "no part in place: the model as it was; "
    return {
        "model": model_path, "file": str(out_file), "bench": bench_id,
        "verdict": e.verdict, "reason": e.reason, "message": unchanged + e.message,
        "device": e.device, "device_name": e.device_name,
        # host-included figures depend on the host: the same H200 model read 1.6 to 3.7 ms eager on three hosts
        "host": {"cpu": cpu_name() or "unknown", "cores": os.cpu_count()},
        "speedup_eager": e.speedup_eager,
        "speedup_eager_ci": list(e.speedup_eager_ci) if e.speedup_eager_ci else None,
        "speedup_compile": e.speedup_compile,
        "speedup_compile_ci": list(e.speedup_compile_ci) if e.speedup_compile_ci else None,
        "parts": [{"task": c.placed.name, "sites": len(c.placed.sites), "share": c.share, "kernel_id": c.kernel_id,
                   "speedup_alone": c.speedup, "speedup_alone_ci": list(c.ci) if c.ci else None,
                   "speedup_alone_compile": c.compile_speedup,
                   "speedup_alone_compile_ci": list(c.compile_ci) if c.compile_ci else None,
                   "speedup_graph_compile": c.graph.speedup_compile if c.graph else None,
                   "speedup_graph_compile_ci": list(c.graph.speedup_compile_ci)
                   if c.graph and c.graph.speedup_compile_ci else None,
                   "graph_why": c.graph.why if c.graph else None,
                   "in_place": not c.reverted, "reverted": c.reverted, "in_place_effect": triple(c.effect),
                   "model_ms_with": triple(c.with_ms), "model_ms_without": triple(c.without_ms),
                   "estimated_saving": round(c.share * (1 - 1 / c.speedup), 4) if c.speedup else None}
                  for c in candidates],
        "left_as_they_were": left,
        "amdahl_bound": round(1 / (1 - in_place), 3) if in_place < 1 else None,
        "estimate_from_parts": round(1 / (1 - saved), 3) if saved < 1 else None,
    }
