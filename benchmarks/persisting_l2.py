"""Does a persisting-L2 window left set by a candidate raise its speedup? Run on a GPU machine:

    python benchmarks/persisting_l2.py [--epochs 8] [--out FILE]

In one process, the judge's timing (judge.measure.timing.measure, default precision) of two candidates of
tests/fixtures (task cuda/task_relu.py) against eager, in epochs taken in turn:
- plain: cuda/ok_nvrtc.py, relu(x * scale) in one kernel;
- window: harmless/persisting_l2__window_left_set_nvrtc.py, the same kernel behind a persisting-L2 set-aside
  and an access-policy window over its input, set on every call and left set;
each with the judge's guard (judge/measure/l2.py: no set-aside from the start of the timing, and whatever
was set since taken away before every timed call) and without it (its `_clear` and `restore` made
no-ops), so four arms: plain/guarded, window/guarded, plain/unguarded, window/unguarded. After every measurement the state is cleared, so the
next one starts clean. Reported per arm: each epoch's speedup (median of per-round ratios), and the
median over epochs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"
TASK = FIXTURES / "cuda" / "task_relu.py"
CANDIDATES = {"plain": FIXTURES / "cuda" / "ok_nvrtc.py",
              "window": FIXTURES / "harmless" / "persisting_l2__window_left_set_nvrtc.py"}


def run(epochs: int) -> dict:
    import torch

    from kernelevo.judge.measure import l2, timing
    from kernelevo.judge.trials.inputs import trial_inputs
    from kernelevo.tasks import load_module

    sys.path.insert(0, str(HERE))
    from pairs import load_pair

    models = {name: load_pair(str(TASK), str(path))[:2] for name, path in CANDIDATES.items()}
    module = load_module(TASK.read_text(), str(TASK), "task")
    sets = [trial_inputs(module.get_inputs, 1000 + i, 42, "cuda", "as given")[0] for i in range(3)]
    restore, clear = l2.Guard.restore, l2.Guard._clear
    out: dict = {f"{c} {g}": [] for g in ("guarded", "unguarded") for c in CANDIDATES}
    resets: dict = {}
    for epoch in range(epochs):
        guarded = epoch % 2 == 0
        for name, (ref, new) in (models.items() if epoch % 4 < 2 else reversed(list(models.items()))):
            l2.Guard.restore, l2.Guard._clear = (restore, clear) if guarded else (lambda self: None, lambda self: None)
            fns = {"candidate": lambda a, new=new: new(*a), "eager": lambda a, ref=ref: ref(*a)}
            measured = timing.measure(fns, sets, "cuda", ratios=(("eager", "candidate"),))
            out[f"{name} {'guarded' if guarded else 'unguarded'}"].append(measured.ratio("eager", "candidate")[0])
            if measured.l2:
                resets[name] = {"found": measured.l2.found, "calls": measured.l2.calls}
            l2.Guard.restore, l2.Guard._clear = restore, clear
            l2.Guard(torch.cuda.current_stream().cuda_stream)  # made, it clears: the next measure starts clean
    return {"speedups": out, "median": {k: statistics.median(v) for k, v in out.items()}, "resets": resets}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "method": __doc__, **run(args.epochs)}
    print(json.dumps({k: round(v, 3) for k, v in report["median"].items()}), json.dumps(report["resets"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
