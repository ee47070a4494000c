"""Can a candidate slow down the torch.compile it is measured against? A final judgement before and after a
candidate that tries.

    python benchmarks/opponent_poison.py --out benchmarks/results/opponent_poison-cpu-<date>.json

Method: one Judge on a fresh cache (CPU, a compiled baseline, timing up to 0.5 s per side) on
tests/fixtures/cpu/task_softmax.py. Its baseline is measured first (torch.compile writes its code for the
reference). An honest softmax (tests/fixtures/general/softmax_ok_c.py) is judged as a run's final
judgement, which on the CPU times torch.compile beside the candidate in one process; then
tests/fixtures/sandbox/poison_opponent_c.py, which walks the judge's cache from C and appends a sleep to
every module torch.compile generated; then the honest softmax's final judgement again. Recorded: the
poisoner's verdict and message, and each final judgement's speedup over torch.compile with its interval.
A judge that keeps the opponent's caches from candidates gives the same figure twice.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def final(judge, task, path: Path) -> dict:
    e = judge.evaluate(task, path, final=True)
    return {"verdict": e.verdict, "speedup_compile": e.speedup_compile, "speedup_compile_ci": e.speedup_compile_ci,
            "speedup_eager": e.speedup_eager}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.judge.measure.timing import TimingConfig
    from kernelevo.tasks import load_task

    task = load_task(FIXTURES / "cpu" / "task_softmax.py")
    honest, poisoner = FIXTURES / "general" / "softmax_ok_c.py", FIXTURES / "sandbox" / "poison_opponent_c.py"
    with tempfile.TemporaryDirectory() as cache:
        options = JudgeOptions(devices=("cpu",), timing=TimingConfig(min_reps=10, max_seconds=0.5))
        with Judge(Path(cache), options) as judge:
            judge.baseline(task, "cpu")
            before = final(judge, task, honest)
            p = judge.evaluate(task, poisoner)
            after = final(judge, task, honest)
    record = {"date": time.strftime("%Y-%m-%d"), "cpu": platform.processor() or platform.machine(),
              "torch": torch.__version__, "python": sys.version.split()[0],
              "poisoner": {"verdict": p.verdict, "reason": p.reason, "message": p.message},
              "honest_final_before": before, "honest_final_after": after}
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
