"""Does a second GPU halve the wall time, and leave every timing as it was? Run on a machine with
two or more GPUs:

    python benchmarks/multi_gpu.py --out benchmarks/results/multi_gpu-<gpu>-<date>.json [--skip bench import isolation]

1. bench: `kernelevo bench benchmarks/tasks --candidates` over the nine nvrtc starter candidates,
   with `--gpus 0`, then `--gpus all`; each in a fresh archive and cache (so every torch.compile
   baseline is measured in both), wall time of the command, and the device each row names;
2. import: `kernelevo archive import FOLDER --rejudge` of a KernelBench-format folder of 27 kernels
   (the nine nvrtc starters twice, each copy made unique so it builds afresh, and the nine
   inline ones), with `--gpus 0`, then `--gpus all`; fresh archive and cache each, wall time,
   verdicts and the device of each verdict;
3. isolation: one candidate per task of --isolate (nvrtc starters) judged on cuda:0 `--repeats` times
   by a judge holding every GPU, first with nothing else to do, then while a stream of other
   candidates (inline starters, each unique: builds on the CPU, then judged) goes to cuda:1 through
   the same judge, as in a run with --gpus all (inline and nvrtc starters, three unique copies each). Per candidate: speedup over eager and its 95 %
   interval, each time; how often the busy intervals overlap the quiet ones, beside how often the
   quiet ones overlap each other (each run is a fresh worker process), and whether every busy
   interval meets the span of the quiet ones.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from judge_throughput import SUITE, candidates, unique  # noqa: E402

EXE = str(Path(sys.executable).parent / "kernelevo")


def machine() -> dict:
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    return {"gpus": [line.split(",")[0].strip() for line in smi], "driver": smi[0].split(",")[1].strip() if smi else "",
            "torch": torch.__version__, "cuda": torch.version.cuda, "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d")}


def timed(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "KERNELEVO_CACHE_DIR": str(cwd / "cache")}
    started = time.monotonic()
    done = subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=1200)
    return time.monotonic() - started, done


def bench(work: Path, gpus: str) -> dict:
    folder = work / "candidates"
    folder.mkdir(parents=True, exist_ok=True)
    for _, cand in candidates("nvrtc"):
        shutil.copy(cand, folder / cand.name)
    wall, done = timed(["bench", str(SUITE), "--candidates", str(folder), "--gpus", gpus, "--json",
                        "--archive", str(work / "archive.sqlite"), "--out", str(work / "out"),
                        "--cache-dir", str(work / "cache")], work)
    if done.returncode != 0:
        return {"gpus": gpus, "wall_s": wall, "error": done.stderr[-2000:]}
    rows = json.loads(done.stdout)["tasks"]
    return {"gpus": gpus, "wall_s": round(wall, 1),
            "rows": [{k: r[k] for k in ("name", "verdict", "speedup_eager", "speedup_compile", "device")} for r in rows]}


def import_folder(work: Path) -> Path:
    folder = work / "kernelbench"
    folder.mkdir(parents=True, exist_ok=True)
    for copy in ("a", "b"):
        for _, cand in candidates("nvrtc"):
            (folder / f"{cand.stem.split('__')[0]}__nvrtc_{copy}.py").write_text(unique(cand.read_text()))
    for _, cand in candidates("inline"):
        shutil.copy(cand, folder / cand.name)
    return folder


def rejudge(work: Path, gpus: str) -> dict:
    folder = import_folder(work)
    wall, done = timed(["archive", "import", str(folder), "--task", str(SUITE), "--rejudge", "--gpus", gpus,
                        "--json", "--archive", str(work / "archive.sqlite"), "--cache-dir", str(work / "cache")], work)
    if done.returncode != 0:
        return {"gpus": gpus, "wall_s": wall, "error": done.stderr[-2000:]}
    rows = json.loads(done.stdout)["rejudged"]
    per_device: dict[str, int] = {}
    for r in rows:
        per_device[r["device"]] = per_device.get(r["device"], 0) + 1
    return {"gpus": gpus, "wall_s": round(wall, 1), "kernels": len(rows), "per_device": per_device,
            "verdicts": sorted({(r["verdict"], r["reason"]) for r in rows}),
            "rows": [{k: r[k] for k in ("task", "verdict", "speedup_eager", "device")} for r in rows]}


def isolation(work: Path, names: list[str], repeats: int) -> dict:
    import torch

    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    count = torch.cuda.device_count()
    tasks = {p.stem: load_task(p) for p in sorted(SUITE.glob("*.py"))}
    options = JudgeOptions(devices=tuple(f"cuda:{i}" for i in range(count)), spares=2)
    out: dict = {"repeats": repeats, "quiet": {}, "busy": {}}
    with Judge(work / "cache", options) as judge:
        for name in names:  # baselines first, outside both measurements
            judge.baseline(tasks[name], "cuda:0")
        for phase in ("quiet", "busy"):
            load = []
            if phase == "busy":
                for r in range(3):
                    for task_path, cand in candidates("inline") + candidates("nvrtc"):
                        path = work / "load" / f"{r}_{cand.name}"
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(unique(cand.read_text()))
                        load.append(judge.submit(tasks[task_path.stem], path, "cuda:1"))
            for name in names:
                cand = SUITE / "candidates" / f"{name}__nvrtc.py"
                runs = [judge.submit(tasks[name], cand, "cuda:0").result() for _ in range(repeats)]
                out[phase][name] = [{"speedup_eager": e.speedup_eager, "ci": e.speedup_eager_ci, "verdict": e.verdict,
                                     "device": e.device} for e in runs]
            if load:
                done = [f.result() for f in load]
                out["load_judged_on_cuda1"] = {"candidates": len(done),
                                               "finished_during": sum(e.verdict is not None for e in done)}
    out["overlap"] = overlap(out)
    return out


def overlap(out: dict) -> dict:
    """Per candidate: the share of (quiet, busy) pairs whose intervals overlap, the same share among
    the quiet runs themselves (how far one process's interval covers another's), and whether every
    busy interval meets the span of the quiet ones."""
    def meets(a, b) -> bool:
        return bool(a and b and a[0] <= b[1] and b[0] <= a[1])

    found = {}
    for name, quiet in out["quiet"].items():
        q, b = [r["ci"] for r in quiet], [r["ci"] for r in out["busy"][name]]
        pairs = [(x, y) for x in q for y in b]
        among = [(x, y) for i, x in enumerate(q) for y in q[i + 1:]]
        span = [min(x[0] for x in q), max(x[1] for x in q)]
        found[name] = {"busy_vs_quiet_pairs": round(sum(meets(x, y) for x, y in pairs) / len(pairs), 2),
                       "quiet_vs_quiet_pairs": round(sum(meets(x, y) for x, y in among) / max(1, len(among)), 2),
                       "every_busy_meets_quiet_span": all(meets(y, span) for y in b), "quiet_span": span}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip", nargs="*", default=[], help="parts to skip: bench import isolation")
    parser.add_argument("--isolate", default="row_softmax,layernorm,gemm_bias_gelu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    report: dict = {**machine(), "method": __doc__}

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))

    work = Path(tempfile.mkdtemp(prefix="kernelevo-multi-gpu-"))
    for part, run in (("bench", bench), ("import", rejudge)):
        if part not in args.skip:
            report[part] = [run(work / f"{part}_{gpus.replace(',', '_')}", gpus) for gpus in ("0", "all")]
            save()
    if "isolation" not in args.skip:
        report["isolation"] = isolation(work / "isolation", args.isolate.split(","), args.repeats)
        save()
    print(json.dumps({k: v for k, v in report.items() if k != "method"}, default=str)[:4000])


if __name__ == "__main__":
    main()
