"""What the bounds trial (judge/run/bounds.py) costs and finds, per candidate. Runs on the CPU backend
(AddressSanitizer) or a GPU (compute-sanitizer, where workers run unconfined):

    python benchmarks/bounds_cost.py [--device cpu] --out benchmarks/results/bounds_cost-<machine>-<date>.json

Judges every C fixture of tests/fixtures/general (CPU) or every GPU cheat fixture and starter candidate
(GPU) twice in one judge each, once with the bounds trial on every candidate (`bounds="all"`) and
once without it, and reports per candidate: both verdicts, the trial's seconds and note, the
seconds of the whole judgement with and without it, and the candidates per minute of each pass
(submitted together, from the first submit to the last verdict).
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
FIXTURES = ROOT / "tests" / "fixtures"


def _candidates(device: str) -> list[tuple[Path, Path]]:
    """(candidate, task) pairs: a header names a fixture's task; starters are named after theirs."""
    def task_of(path: Path, default: Path) -> Path:
        found = re.search(r"^# task: (\S+)$", path.read_text(), re.M)
        return FIXTURES / found.group(1) if found else default

    if device == "cpu":
        return [(p, task_of(p, p)) for p in sorted((FIXTURES / "general").glob("*_c.py"))]
    relu = FIXTURES / "cuda" / "task_relu.py"
    starters = sorted(p for p in (HERE / "tasks" / "candidates").glob("*.py") if not p.stem.endswith(("__c", "_cpp_inline")))
    return [(p, task_of(p, relu)) for p in sorted((FIXTURES / "cheats" / "cuda").glob("*.py"))] + \
        [(p, HERE / "tasks" / f"{p.stem.split('__')[0]}.py") for p in starters]


def _pass(pairs, device: str, bounds: str, cache: Path) -> tuple[dict, float]:
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    with Judge(cache, JudgeOptions(devices=(device,), compile_baseline=False, bounds=bounds)) as judge:
        for task in {t for _, t in pairs}:
            judge.baseline(load_task(task), device)  # outside the timed pass
        started = time.perf_counter()
        futures = {c.name: judge.submit(load_task(t), c) for c, t in pairs}
        done = {name: f.result(timeout=1800) for name, f in futures.items()}
        return done, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    from kernelevo.host import cpu_name

    pairs = _candidates(args.device)
    cache = Path(tempfile.mkdtemp(prefix="kernelevo-bounds-"))
    checked, with_s = _pass(pairs, args.device, "all", cache)
    plain, without_s = _pass(pairs, args.device, "off", cache)
    rows = {}
    for name, e in checked.items():
        bound = (e.evidence or {}).get("bounds") or {}
        rows[name] = {"verdict": f"{e.verdict} {e.reason}".strip(), "without": f"{plain[name].verdict} {plain[name].reason}".strip(),
                      "bounds_s": bound.get("seconds"), "checker": bound.get("checker"),
                      "note": next((n for n in e.notes if n.startswith("bounds trial")), e.message[:200]),
                      "wall_s": e.wall_s, "wall_s_without": plain[name].wall_s}
    report = {"device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else cpu_name(),
              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "method": __doc__,
              "per_minute_with": round(60 * len(pairs) / with_s, 2), "per_minute_without": round(60 * len(pairs) / without_s, 2),
              "candidates": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("method", "candidates")}))
    for name, row in rows.items():
        print(f"{name:55s} {row['verdict']:32s} without: {row['without']:32s} {row['bounds_s']} s")


if __name__ == "__main__":
    main()
