"""How long a judge worker takes to be ready: started as a new interpreter, or forked from the zygote
(judge/run/zygote.py). Run on the machine to measure:

    python benchmarks/worker_start.py --device cpu --workers 8 --out benchmarks/results/worker_start-<machine>-<date>.json

For each way, `--workers` workers are started one after another, each timed from its creation to its
`ready` event (interpreter and imports, or the fork; the sandbox; the device's preparation: the profiler's
first start, and on a GPU the CUDA context) and its CPU time read from /proc, then killed. The zygote's
own start (its imports) is timed apart: a judge pays it once, at its first worker. Medians and the
spread (min, max) are reported; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User and system time of `pid` so far, from /proc (the worker is alive until killed)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_times(device: str, cache: Path, workers: int, forks) -> list[dict]:
    from kernelevo.judge.run.executor import Worker

    times = []
    for _ in range(workers):
        started = time.perf_counter()
        worker = Worker(device, cache, {}, forks)
        worker.wait_ready(300)
        times.append({"ready_s": time.perf_counter() - started, "cpu_s": cpu_seconds(worker.proc.pid)})
        worker.kill()
    return times


def summary(times: list[dict]) -> dict:
    out = {}
    for key in ("ready_s", "cpu_s"):
        values = [t[key] for t in times]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    from kernelevo.judge.run import zygote
    from kernelevo.judge.run.executor import _child_env

    cache = Path(tempfile.mkdtemp(prefix="worker-start-"))
    spawned = start_times(args.device, cache, args.workers, None)
    forks = zygote.Zygote(args.device, cache, _child_env(args.device, {}), 300)
    started = time.perf_counter()
    start_times(args.device, cache, 1, forks)  # the zygote's start, then its first fork
    zygote_s = time.perf_counter() - started
    forked = start_times(args.device, cache, args.workers, forks)
    forks.close()
    report = {"device": args.device, "cores": os.cpu_count(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "workers": args.workers, "method": __doc__,
              "spawned": summary(spawned), "forked": summary(forked), "zygote_and_first_fork_s": zygote_s,
              "raw": {"spawned": spawned, "forked": forked}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("method", "raw")}, indent=1))


if __name__ == "__main__":
    main()
