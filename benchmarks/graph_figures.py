"""Kernels of one task judged as finals on a GPU: torch.compile timed beside each by events (the judge's
timer) and each replayed in a CUDA graph (judge/measure/graphs.py), to set beside what the kernel gave its
model in place (`kernelevo assemble`). Run on a GPU machine:

    python benchmarks/graph_figures.py TASK KERNEL [KERNEL ...] --out benchmarks/results/graph_figures-<gpu>-<date>.json

Method: one Judge (bounds trial off: it measures nothing timed), `evaluate(task, kernel, final=True)` per
kernel in turn; a final on a GPU runs the `compile_beside` job, a fresh process that times the candidate,
eager and torch.compile of the reference interleaved by events, back to back, and in CUDA graphs (each
captured once on static inputs; a call copies its input set in and replays). The figures are medians of
paired per-round ratios with their 95 % intervals. The autotuner's per-shape notes are left out of the record.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("kernels", nargs="+")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    task, rows = load_task(args.task), []
    with tempfile.TemporaryDirectory() as cache, \
            Judge(Path(cache), JudgeOptions(devices=(args.device,), bounds="off")) as judge:
        for kernel in args.kernels:
            started = time.time()
            e = judge.evaluate(task, kernel, final=True)
            rows.append({"kernel": kernel, "verdict": e.verdict, "reason": e.reason,
                         "wall_s": round(time.time() - started, 1),
                         "events_compile": [e.speedup_compile, e.speedup_compile_ci],
                         "events_eager": [e.speedup_eager, e.speedup_eager_ci],
                         "candidate_ms": e.candidate.median_ms if e.candidate else None,
                         "compiled_ms": e.compiled.median_ms if e.compiled else None,
                         "graph": e.graph.__dict__ if e.graph else None,
                         "notes": [n for n in e.notes if not n.startswith("autotune")]})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"task": args.task, "device": e.device_name, "torch": e.torch_version,
                                              "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
