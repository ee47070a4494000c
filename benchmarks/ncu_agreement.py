"""Speedups from Nsight Compute's gpu__time_duration (summed over each forward's kernels), to set
beside the judge's: an independent device timer. Run on a GPU machine with ncu on the PATH:

    python benchmarks/ncu_agreement.py small_attention layernorm

Each side (candidate, eager) runs in its own ncu process: 3 warm-up forwards, then 5 forwards
inside an NVTX range "measure" that ncu filters on; clocks are left as they are (--clock-control
none), caches flushed between kernels (ncu's default), as the judge flushes before each call.
"""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parent / "tasks"
FORWARDS = 5

_RUN = r"""
import sys, torch
sys.path.insert(0, sys.argv[5])
from pairs import load_pair
ref, new, args = load_pair(sys.argv[1], sys.argv[2])
model = new if sys.argv[3] == "candidate" else ref
with torch.no_grad():
    for _ in range(3):
        model(*args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    for _ in range(int(sys.argv[4])):
        model(*args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
"""


def device_ms(task: Path, cand: Path, side: str) -> float:
    out = subprocess.run(["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                          "--nvtx", "--nvtx-include", "measure/", sys.executable, "-c", _RUN,
                          str(task), str(cand), side, str(FORWARDS), str(Path(__file__).resolve().parent)],
                         capture_output=True, text=True, check=True)
    rows = list(csv.DictReader(io.StringIO(out.stdout[out.stdout.index('"ID"'):])))
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}
    total = sum(float(r["Metric Value"].replace(",", "")) * scale[r["Metric Unit"]] for r in rows)
    return total / FORWARDS


def main() -> None:
    report = {}
    for name in sys.argv[1:]:
        task, cand = SUITE / f"{name}.py", SUITE / "candidates" / f"{name}__nvrtc.py"
        c, e = device_ms(task, cand, "candidate"), device_ms(task, cand, "eager")
        report[name] = {"candidate_ms": c, "eager_ms": e, "ncu_speedup": e / c}
        print(json.dumps({name: report[name]}), flush=True)


if __name__ == "__main__":
    main()
