"""`kernelevo split` on whole networks nobody here wrote: how much of each model's time its parts hold.

    python benchmarks/split_models.py KernelBench/level3/9_ResNet18.py ... --device cpu \
        --out benchmarks/results/split_models-cpu-<date>.json [--compile]

Method: each model file (KernelBench format) is split as `kernelevo split` does (defaults: parts
written until they hold 90 % of the model's time, at most 16), into a temporary folder. Recorded per
model: the parts, each with its share of the model's time (each module's time with a wait at its start
and end, over the model's time measured the same way), how its constructor arguments were found, its
call and the outputs left out; the share all parts hold; the notes (what was left out, and why, and for a
split short of its 90 %, where the rest of the time goes: `rest`); and
that every written task runs standalone and gives back its call site's output (split's own check,
repeated here from the task file alone: load, build with the site's weights, run on the captured
inputs). With --compile (a GPU), each part is also timed compiled alone (the judge's baseline, as
`kernelevo split` does by default), the whole model compiled is timed (median of 20 forwards after 3
warm-ups, synchronised), and each part's compiled time is given as a share of that. A model whose
file cannot be loaded (a missing package) is recorded with the one-line error.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def split_one(path: Path, device: str, compile_parts: bool, cache: Path) -> dict:
    from kernelevo.evolution.drivers.parts.split import split_model
    from kernelevo.tasks import TaskError

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        try:
            data = split_model(path, Path(tmp), device, top=16, headroom=compile_parts, cache_dir=cache)
        except TaskError as exc:
            return {"model": path.name, "error": str(exc)}
        seconds = time.perf_counter() - started
        standalone = {t["task"]: _standalone(Path(tmp), t) for t in data["tasks"]}
    row = {"model": path.name, "seconds": round(seconds, 1), "model_ms": data["model_ms"],
           "covered": data["covered"], "parts": len(data["tasks"]),
           "tasks": [{k: t.get(k) for k in ("task", "class", "built_from", "share", "call", "left_out", "checked", "ms",
                                            "ms_compiled", "sol_ms", "headroom_ms", "left_to_compiler")}
                     | {"sites": len(t["call_sites"]), "standalone": standalone[t["task"]]} for t in data["tasks"]],
           "notes": data["notes"], "rest": data.get("rest")}
    if compile_parts:
        compiled = _compiled_model_ms(path, device)
        row["model_ms_compiled"] = compiled
        for t in row["tasks"]:
            t["share_compiled"] = round(t["ms_compiled"] / compiled, 4) if t.get("ms_compiled") and compiled else None
    return row


def _standalone(folder: Path, entry: dict) -> str:
    """The task file alone: it loads, builds, runs its own inputs; "ok" or why not."""
    import torch

    from kernelevo.tasks import load_task

    try:
        task = load_task(folder / entry["task"])
        with torch.no_grad():
            out = task.make_model()(*task.get_inputs())
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    outs = out if isinstance(out, tuple) else (out,)
    return "ok" if all(isinstance(o, torch.Tensor) for o in outs) else "returns something other than tensors"


def _compiled_model_ms(path: Path, device: str) -> float | None:
    import torch

    from kernelevo.tasks import load_task

    task = load_task(path)
    torch.manual_seed(0)
    model = task.make_model().to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            for _ in range(3):
                compiled(*inputs)
            times = []
            for _ in range(20):
                sync()
                start = time.perf_counter()
                compiled(*inputs)
                sync()
                times.append((time.perf_counter() - start) * 1e3)
    except Exception as exc:  # noqa: BLE001 - recorded as not measured
        print(f"{path.name}: torch.compile failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return round(statistics.median(times), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true", help="time each part, and the model, under torch.compile")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for path in args.models:
            row = split_one(path, args.device, args.compile, Path(cache))
            rows.append(row)
            print(f"{row['model']}: " + (row["error"] if "error" in row else
                  f"{row['parts']} parts hold {row['covered']:.1%} of its time ({row['seconds']} s)"), flush=True)
    device_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor() or "cpu"
    result = {"date": time.strftime("%Y-%m-%d"), "device": device_name, "torch": torch.__version__,
              "method": __doc__.split("Method: ", 1)[1].strip(), "models": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
