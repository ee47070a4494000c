"""The judge's GPU verdicts on its fixtures, recorded: every GPU cheat fixture (tests/fixtures/cheats/cuda),
the bounds fixtures, the honest GPU fixtures, the persisting-L2 fixture (harmless/) and every CUDA and
Triton starter candidate, each judged once by one Judge as tests/test_gpu_cheats.py judges them (cuda:0, bounds 'all', run limit 60 s, timing at most
0.5 s, concurrency 8). Run on a GPU machine:

    python benchmarks/gpu_verdicts.py --out benchmarks/results/gpu_verdicts-<gpu>-<date>.json [--against OLD.json]

With --against, the verdicts are compared with a record of the same files (its "verdicts" or
"verdicts_after"); files only one side has are listed apart.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _clock(e) -> dict:
    """The checker's clock against the worker's figures (trials/clock.py): per call, and the speedup over eager."""
    clock = e.evidence.get("clock") or {}
    out = {k: clock.get(k) for k in ("confirmed", "why", "calls", "candidate_ms", "eager_ms", "blocks_ms") if k in clock}
    if e.reason in ("forged_report", "escaped_work"):
        out["message"] = e.message
        out.update({k: e.evidence[k] for k in ("claimed_ms", "speedup_eager") if k in e.evidence})
    if e.candidate and clock.get("candidate_ms"):
        out["claimed_ms"] = e.candidate.median_ms
        out["seen_over_claimed"] = round(clock["candidate_ms"] / e.candidate.median_ms, 3)
    if e.speedup_eager and clock.get("candidate_ms") and clock.get("eager_ms"):
        out["speedup_claimed"] = round(e.speedup_eager, 3)
        out["speedup_seen"] = round(clock["eager_ms"] / clock["candidate_ms"], 3)
    return out


def main() -> None:
    import torch

    import test_gpu_cheats as suite
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--against", type=Path)
    args = parser.parse_args()
    relu = load_task(suite.FIXTURES / "cuda" / "task_relu.py")
    files = {p: relu for p in [*sorted(suite.CHEATS.glob("*.py")), suite.JOINED, suite.GRAPHED, suite.GRAPH_INPUT,
                               *suite.BOUNDS]}
    files.update({p: load_task(suite.SUITE / f"{p.stem.split('__')[0]}.py") for p in suite.STARTERS})
    started = time.monotonic()
    with Judge(Path(tempfile.mkdtemp(prefix="kernelevo-verdicts-")), JudgeOptions(**suite.OPTIONS)) as judge:
        futures = {p.name: judge.submit(task, p) for p, task in files.items()}
        judged = {name: f.result(timeout=900) for name, f in futures.items()}
        judged[suite.PERSISTING.name] = judge.evaluate(relu, suite.PERSISTING)  # alone, as the test judges it
    record = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "method": __doc__, "seconds": round(time.monotonic() - started, 1),
              "verdicts": {name: [e.verdict, e.reason] for name, e in judged.items()},
              "comparison": {name: e.confinement.comparison if e.confinement else "" for name, e in judged.items()},
              "checker_memory": {name: (e.evidence.get("checker") or {}).get("memory", "") for name, e in judged.items()},
              "clock": {name: _clock(e) for name, e in judged.items()},
              "l2_reset": {name: e.evidence["l2_reset"] for name, e in judged.items() if "l2_reset" in e.evidence}}
    if args.against:
        old = json.loads(args.against.read_text())
        before = old.get("verdicts") or old.get("verdicts_after") or {}
        shared = sorted(set(before) & set(record["verdicts"]))
        record["against"] = {"record": args.against.name,
                             "identical": all(list(before[n]) == record["verdicts"][n] for n in shared),
                             "changed": {n: [before[n], record["verdicts"][n]] for n in shared
                                         if list(before[n]) != record["verdicts"][n]},
                             "only_here": sorted(set(record["verdicts"]) - set(before)),
                             "only_there": sorted(set(before) - set(record["verdicts"]))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k not in ("method", "comparison")}, indent=1))


if __name__ == "__main__":
    main()
