"""How far honest candidates stay from each dynamic check's threshold, and what the checks cost.
Run on a GPU:

    python benchmarks/guard_margins.py [--out FILE] [--policy mixed|strict]

Judges every GPU candidate of the starter suite (nvrtc and inline) and every GPU cheat fixture
(tests/fixtures/cheats/cuda) in one judge, as `kernelevo evaluate` would, and reports per
candidate: the verdict and reason; the host-clock check (wall time with a device-wide synchronise
minus event time, over eager's; rejected above 0.025 ms or 25 % of the event time); the fresh-values
check (the fastest call on inputs whose values all change, over the timed median; rejected above
2x + 0.02 ms);
eager's time beside the candidate over eager's time in the baseline process (rejected outside
1/1.5..1.5); and the seconds each phase of the judge took on the device.
"""
from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = HERE / "tasks"
CHEATS = ROOT / "tests" / "fixtures" / "cheats" / "cuda"


def _row(e, baseline_eager: float | None) -> dict:
    ev = e.evidence
    clock, fresh = ev.get("host_clock", {}), ev.get("fresh_values", {})
    return {
        "verdict": e.verdict, "reason": e.reason, "message": e.message, "speedup_eager": e.speedup_eager,
        "escaped_ms": clock.get("escaped_ms"), "event_ms": clock.get("event_ms"), "wall_ms": clock.get("wall_ms"),
        "fresh_over_timed": fresh["fresh_values_ms"] / fresh["timed_ms"] if fresh else None,
        "eager_beside_over_alone": (e.eager.median_ms / baseline_eager) if e.eager and baseline_eager else None,
        "phases_s": ev.get("phases_s"), "device_s": e.device_s, "own_kernels": ev.get("policy", {}).get("own_kernels"),
        "torch_compute": ev.get("policy", {}).get("torch_compute"),
    }


def main() -> None:
    import torch

    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--policy", default="mixed")
    args = parser.parse_args()
    jobs = [(SUITE / f"{p.stem.split('__')[0]}.py", p) for p in sorted((SUITE / "candidates").glob("*.py"))
            if not p.stem.endswith(("__c", "_cpp_inline"))]
    jobs += [(ROOT / "tests" / "fixtures" / "cuda" / "task_relu.py", p) for p in sorted(CHEATS.glob("*.py"))]
    report: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
                    "date": time.strftime("%Y-%m-%d"), "policy": args.policy, "method": __doc__, "candidates": {}}
    options = JudgeOptions(compile_baseline=False, policy=args.policy, concurrency=8)
    with Judge(Path(tempfile.mkdtemp(prefix="kernelevo-guards-")), options) as judge:
        started = time.perf_counter()
        futures = {c.name: (load_task(t), judge.submit(load_task(t), c)) for t, c in jobs}
        for name, (task, future) in futures.items():
            e = future.result()
            base = judge.baseline(task, "cuda:0")
            row = _row(e, base.eager_ms if base else None)
            expected = re.search(r"^# expect: (\w+) (\w+)$", (CHEATS / name).read_text(), re.M) \
                if (CHEATS / name).exists() else None
            row["expected"] = " ".join(expected.groups()) if expected else "ok"
            report["candidates"][name] = row
            print(name, json.dumps({k: v for k, v in row.items() if k != "message"}, default=str), flush=True)
        report["wall_s"] = time.perf_counter() - started
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
