"""Can a CPU speedup be repeated? The same C kernel judged several times on the CPU backend, in four
conditions, to find what makes its figure move:

    python benchmarks/cpu_timing_noise.py --out benchmarks/results/cpu_timing_noise-<cpu>-<date>.json

1. alone: one evaluation at a time (the task's baseline cached beforehand);
2. beside judge work, machine held: the kernel submitted together with fresh variants of itself, as
   a search generation's candidates arrive, judged as `optimize` judges on the CPU (a spare worker
   starts while a job runs; compilers and imports of the others meanwhile); the judge pauses the
   other workers while it times (judge/measure/hold.py);
3. the same with the hold switched off (this script replaces hold.machine by a no-op): what the
   judge measured before;
4. alone, beside a busy process outside the judge (a Python loop on one core): not ours to stop,
   so the verdict must say so (evidence["load"], a note) and the interval must carry it.

For each: the speedup over eager with its 95 % interval, eager's median ms, the load other processes
put on the machine during timing, and whether the runs' intervals overlap.

    python benchmarks/cpu_timing_noise.py --out FILE --task TASK.py --kernels DIR

instead judges every candidate file of DIR once on TASK (each in a fresh worker, one after another):
eager is the same module every time, so the spread of its median across processes is the judge's
own noise (a search's kernels re-judged, say).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(2048, 4096)]


def get_init_inputs():
    return []
"""
# A C softmax whose rows are shared out by OpenMP, as the kernels a model writes for the CPU are.
KERNEL = """# variant {n}
import torch
import torch.nn as nn

from kernelevo import runtime

lib = runtime.load_c(r\"\"\"
// variant {n}
#include <math.h>
#include <stdint.h>
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {{
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {{
        const float* in = x + r * cols;
        float* out = y + r * cols;
        float top = in[0], sum = 0.0f;
        for (int64_t c = 1; c < cols; c++) top = in[c] > top ? in[c] : top;
        for (int64_t c = 0; c < cols; c++) {{ out[c] = expf(in[c] - top); sum += out[c]; }}
        for (int64_t c = 0; c < cols; c++) out[c] /= sum;
    }}
}}
\"\"\")


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.softmax_rows(x, y, x.shape[0], x.shape[1])
        return y
"""


def judged(judge, task, folder: Path, repeats: int, beside: int) -> list[dict]:
    """`repeats` verdicts of the kernel, each submitted together with `beside` fresh variants of it
    (new sources: each builds anew), as the candidates of a search generation arrive together."""
    out = []
    for r in range(repeats):
        paths = []
        for i in range(beside + 1):
            path = folder / f"k{time.time_ns()}_{i}.py"
            path.write_text(KERNEL.format(n=f"{r}-{i}-{time.time_ns()}"))
            paths.append(path)
        futures = [judge.submit(task, p) for p in paths]
        e = futures[0].result()
        for f in futures[1:]:
            f.result()
        out.append({"verdict": e.verdict, "reason": e.reason, "speedup_eager": e.speedup_eager,
                    "ci": list(e.speedup_eager_ci) if e.speedup_eager_ci else None,
                    "eager_ms": e.eager.median_ms if e.eager else None,
                    "candidate_ms": e.candidate.median_ms if e.candidate else None,
                    "load": e.evidence.get("load"), "notes": [n for n in e.notes if "cores busy" in n]})
    return out


def overlap(rows: list[dict]) -> bool:
    cis = [r["ci"] for r in rows if r.get("ci")]
    return bool(cis) and max(lo for lo, _ in cis) <= min(hi for _, hi in cis)


def summary(rows: list[dict]) -> dict:
    s = [r["speedup_eager"] for r in rows if r.get("speedup_eager")]
    return {"runs": rows, "speedups": [round(x, 3) for x in s], "spread": round(max(s) / min(s), 3) if s else None,
            "intervals_overlap": overlap(rows)}


@contextlib.contextmanager
def busy_core():
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        yield
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    from kernelevo.judge.measure import hold
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.host import cpu_name
    from kernelevo.tasks import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--beside", type=int, default=3, help="variants judged beside the measured kernel")
    parser.add_argument("--task", type=Path, help="with --kernels: the task the kernels are for")
    parser.add_argument("--kernels", type=Path, help="judge each candidate file of this folder once instead")
    args = parser.parse_args()
    if args.kernels:
        return kernels_once(args)
    import torch

    cache = Path(tempfile.mkdtemp(prefix="kernelevo-noise-"))
    (cache / "task.py").write_text(TASK)
    task = load_task(cache / "task.py")
    report: dict = {"cpu": cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__,
                    "date": time.strftime("%Y-%m-%d"), "method": __doc__}
    # As `kernelevo optimize` judges on the CPU: one spare worker starting while a job runs.
    options = JudgeOptions(devices=("cpu",), compile_baseline=False, spares=1)
    with Judge(cache, options) as judge:
        judge.baseline(task, "cpu")
        report["alone"] = summary(judged(judge, task, cache, args.repeats, 0))
        report["beside_held"] = summary(judged(judge, task, cache, args.repeats, args.beside))
        machine = hold.machine
        hold.machine = lambda group: contextlib.nullcontext(0.0)
        try:
            report["beside_not_held"] = summary(judged(judge, task, cache, args.repeats, args.beside))
        finally:
            hold.machine = machine
        with busy_core():
            report["alone_busy_core"] = summary(judged(judge, task, cache, args.repeats, 0))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    for key in ("alone", "beside_held", "beside_not_held", "alone_busy_core"):
        r = report[key]
        print(f"{key:16s} speedups {r['speedups']} spread x{r['spread']} overlap {r['intervals_overlap']}")


def kernels_once(args) -> None:
    """Every kernel of a folder judged once on the task, in turn: eager's median across processes."""
    import statistics

    import torch

    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.host import cpu_name
    from kernelevo.tasks import load_task

    task = load_task(args.task)
    rows = []
    with Judge(Path(tempfile.mkdtemp(prefix="kernelevo-noise-")), JudgeOptions(devices=("cpu",))) as judge:
        for path in sorted(args.kernels.glob("*.py")):
            e = judge.evaluate(task, path)
            rows.append({"kernel": path.name, "verdict": e.verdict, "speedup_eager": e.speedup_eager,
                         "ci": list(e.speedup_eager_ci) if e.speedup_eager_ci else None,
                         "speedup_compile": e.speedup_compile,
                         "eager_ms": e.eager.median_ms if e.eager else None,
                         "candidate_ms": e.candidate.median_ms if e.candidate else None,
                         "load": e.evidence.get("load")})
    eager = [r["eager_ms"] for r in rows if r["eager_ms"]]
    report = {"cpu": cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "task": args.task.name, "kernels": rows, "method": __doc__,
              "eager_ms": {"min": min(eager), "median": statistics.median(eager), "max": max(eager)} if eager else None}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"{len(rows)} kernels; eager ms {report['eager_ms']}")


if __name__ == "__main__":
    main()
