"""Speedups from CUPTI kernel timestamps (torch.profiler), set beside the judge's. Run on a GPU:

    python benchmarks/span_agreement.py [--out FILE] [task ...]

An independent timer of the quantity the judge reports: device time per forward, from the start
of its first kernel to the end of its last (memsets and copies included), with the GPU queue kept
full so that host launch cost does not appear. The judge reads CUDA events; this reads the
profiler's activity records, a different clock path. Each forward is preceded, as in the judge,
by an L2 flush (reading a buffer twice the L2 size, which leaves clean lines) and a 1 ms spin
kernel, so both see the same cache state and the comparison isolates the clock; the spin kernels mark where
one forward ends and the next begins. Candidate and eager forwards alternate, 60 of each, in a
separate process; the median span of each side gives the speedup. The judge's speedup comes from
judging the same starter nvrtc candidate in its own worker.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = HERE / "tasks"
REPS = 60

_SPANS = r"""
import json, os, sys, tempfile, torch
from torch.profiler import ProfilerActivity, profile
sys.path.insert(0, sys.argv[3])
from pairs import load_pair
ref, new, args = load_pair(sys.argv[1], sys.argv[2])
reps = int(sys.argv[4])
flush = torch.zeros(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, dtype=torch.int32, device="cuda")
sink = torch.zeros((), dtype=torch.int64, device="cuda")
sides = {"candidate": lambda: new(*args), "eager": lambda: ref(*args)}
def boundary():
    torch.sum(flush, dim=0, out=sink)
    torch.cuda._sleep(2_000_000)  # ~1 ms: the host enqueues the next forward meanwhile
def device_events(prof):
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    os.unlink(path)
    return sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")), key=lambda e: e["ts"])
with torch.no_grad():
    for _ in range(20):
        for fn in sides.values():
            fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # how many device events one flush is
        boundary()
        boundary()
        torch.cuda.synchronize()
    marks = [i for i, e in enumerate(device_events(prof)) if "spin" in e["name"]]
    per_flush = marks[1] - marks[0] - 1
    order = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for r in range(reps):
            for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                boundary()
                sides[name]()
                order.append(name)
        boundary()
        torch.cuda.synchronize()
device = device_events(prof)
spins = [i for i, e in enumerate(device) if "spin" in e["name"]]
spans = {name: [] for name in sides}
for k, name in enumerate(order):
    work = device[spins[k] + 1: spins[k + 1] - per_flush]  # without the next boundary's flush
    spans[name].append((max(e["ts"] + e["dur"] for e in work) - work[0]["ts"]) / 1000)
print(json.dumps(spans))
"""


def spans(task: Path, cand: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _SPANS, str(task), str(cand), str(HERE), str(REPS)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    import torch

    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", help="task names [default: the whole starter suite]")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = args.tasks or sorted(p.stem for p in SUITE.glob("*.py") if not p.name.startswith("_"))
    report: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
                    "date": time.strftime("%Y-%m-%d"), "method": __doc__, "tasks": {}}
    with Judge(Path(tempfile.mkdtemp(prefix="kernelevo-span-")), JudgeOptions(compile_baseline=False)) as judge:
        judged = {n: judge.submit(load_task(SUITE / f"{n}.py"), SUITE / "candidates" / f"{n}__nvrtc.py", "cuda:0")
                  for n in names}
        judged = {n: f.result() for n, f in judged.items()}
    for name in names:
        measured = spans(SUITE / f"{name}.py", SUITE / "candidates" / f"{name}__nvrtc.py")
        cand, eager = statistics.median(measured["candidate"]), statistics.median(measured["eager"])
        ours = judged[name]
        row = {"judge_speedup": ours.speedup_eager, "span_speedup": eager / cand,
               "judge_candidate_ms": ours.candidate.median_ms, "span_candidate_ms": cand,
               "judge_eager_ms": ours.eager.median_ms, "span_eager_ms": eager,
               "relative_difference": ours.speedup_eager / (eager / cand) - 1}
        report["tasks"][name] = row
        print(name, json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
