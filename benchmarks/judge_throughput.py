"""How fast is the judge, and can its numbers be trusted? Run on a GPU machine:

    python benchmarks/judge_throughput.py --out benchmarks/results/judge_throughput-<gpu>-<date>.json

Five measurements, each over the starter suite (benchmarks/tasks):
1. build latency per format, cold (a source never compiled: a unique comment defeats every cache)
   and cached (the same source in a new process), as median and p90; a Triton candidate's build
   is its import, construction and first call (where Triton compiles and autotunes), as the judge
   counts it;
2. throughput: nvrtc candidates (every starter kernel, each made unique) fully judged per minute
   on one GPU, from the first submit to the last verdict, baselines cached beforehand; the same
   for the Triton candidates apart (throughput_triton);
3. repeatability: each starter kernel judged in 5 separate worker processes; the coefficient of
   variation of its speedup over eager;
4. agreement: the judge's speedup against triton.testing.do_bench (median, its own L2 clearing),
   in a separate process, timing each call as it is (host launch gaps included where the host
   is slower than the GPU) and as a replayed CUDA graph of the call (device time, as the judge
   measures it);
5. the verdict of every honest starter candidate (all must be ok);
6. profiling's cost: each passing starter candidate profiled without and with Nsight Compute
   (device seconds held, wall seconds), what its profile found (dominant kernel, registers, spills,
   % of speed of light), and throughput (2.) again with every candidate profiled without ncu.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = HERE / "tasks"


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def unique(source: str) -> str:
    """The same kernel with a fresh comment in its CUDA source, or in the body of its first Triton
    kernel (Triton's cache key is the function's source from `def` on): a new hash, so a cold build."""
    tag = uuid.uuid4().hex
    if "__global__" not in source and "@triton.jit" in source:
        lines = source.splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("@triton.jit"))
        end = next(i for i in range(start + 1, len(lines)) if lines[i].rstrip().endswith(":"))  # the signature's end
        lines.insert(end + 1, f"    # kernelevo benchmark {tag}\n")
        return "".join(lines)
    return re.sub(r"^(?![ \t]*#)(.*__global__)", rf"// kernelevo benchmark {tag}\n\1", source, count=1, flags=re.M)


def candidates(fmt: str) -> list[tuple[Path, Path]]:
    return [(SUITE / f"{p.name.split('__')[0]}.py", p) for p in sorted((SUITE / "candidates").glob(f"*__{fmt}.py"))]


def build_latency(fmt: str, count: int, cache: Path) -> dict:
    """Time importing a candidate and constructing ModelNew in a fresh process, cold then cached."""
    cold, cached = [], []
    pairs = candidates(fmt)
    for i in range(count):
        task, cand = pairs[i % len(pairs)]
        path = cache / "bench-src" / f"{fmt}_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(unique(cand.read_text()))
        cold.append(_timed_build(task, path, cache, fmt))
        cached.append(_timed_build(task, path, cache, fmt))
    return {"format": fmt, "n": count, "cold_median_s": statistics.median(cold), "cold_p90_s": percentile(cold, 0.9),
            "cached_median_s": statistics.median(cached), "cached_p90_s": percentile(cached, 0.9),
            "cold_s": cold, "cached_s": cached}


_BUILD = r"""
import os, sys, time, torch
from pathlib import Path
from kernelevo.judge.run import inline
from kernelevo.tasks import load_module
inline.prepare(Path(os.environ["KERNELEVO_CACHE_DIR"]), inline.torch_include(), torch.__version__)  # as the judge does
inline.install()
os.environ["TORCH_EXTENSIONS_DIR"] = sys.argv[3]
task = load_module(open(sys.argv[1]).read(), sys.argv[1], "task")
torch.empty(1, device="cuda")
t = time.perf_counter()
module = load_module(open(sys.argv[2]).read(), sys.argv[2], "candidate")
model = module.ModelNew(*task.get_init_inputs()).cuda()
if sys.argv[4] == "triton":  # Triton compiles (and autotunes) at the first call: part of its build
    with torch.no_grad():
        model(*[x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()])
torch.cuda.synchronize()
print(time.perf_counter() - t)
"""


def _timed_build(task: Path, cand: Path, cache: Path, fmt: str) -> float:
    out = subprocess.run([sys.executable, "-c", _BUILD, str(task), str(cand), str(cache / "inline" / cand.stem), fmt],
                         capture_output=True, text=True, env=_env(cache), check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _env(cache: Path) -> dict:
    return {**os.environ, "KERNELEVO_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}


def throughput(judge, tasks: dict, cache: Path, rounds: int, device: str, profile: bool = False,
               fmt: str = "nvrtc") -> dict:
    """Every starter kernel of `fmt`, made unique, `rounds` times; all submitted at once."""
    jobs = []
    for r in range(rounds):
        for task_path, cand in candidates(fmt):
            path = cache / "bench-src" / f"tp_{r}_{cand.name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(unique(cand.read_text()))
            jobs.append((tasks[task_path], path))
    started = time.monotonic()
    futures = [judge.submit(task, path, device, profile=profile, ncu=False) for task, path in jobs]
    results = [f.result() for f in futures]
    minutes = (time.monotonic() - started) / 60
    verdicts = {}
    for e in results:
        verdicts[e.verdict] = verdicts.get(e.verdict, 0) + 1
    return {"candidates": len(jobs), "minutes": minutes, "per_minute": len(jobs) / minutes, "verdicts": verdicts,
            "mean_device_s": statistics.mean(e.device_s or 0 for e in results),
            "mean_build_s": statistics.mean(e.build_s or 0 for e in results),
            "mean_wall_s": statistics.mean(e.wall_s or 0 for e in results),
            "mean_phases_s": mean_fields([e.evidence.get("phases_s") or {} for e in results]),
            "mean_trial_s": mean_fields([e.evidence.get("trial_s") or {} for e in results]),
            "mean_trials": statistics.mean(e.correctness.trials if e.correctness else 0 for e in results),
            "not_ok": [{"kernel": path.name, "verdict": e.verdict, "reason": e.reason, "message": e.message,
                        "evidence": e.evidence} for (_, path), e in zip(jobs, results) if not e.ok]}


def mean_fields(rows: list[dict]) -> dict:
    """Per key, its mean over the rows (a row without the key counts 0): where the device time goes."""
    keys = sorted({k for r in rows for k in r})
    return {k: round(statistics.mean(r.get(k, 0.0) for r in rows), 4) for k in keys} if rows else {}


def repeatability(judge, tasks: dict, runs: int, device: str) -> dict:
    """Each kernel `runs` times, every run in its own worker process (submitted together)."""
    futures = {(task_path.stem, i): judge.submit(tasks[task_path], cand, device)
               for task_path, cand in candidates("nvrtc") for i in range(runs)}
    out = {}
    for task_path, _ in candidates("nvrtc"):
        speedups = [futures[(task_path.stem, i)].result().speedup_eager for i in range(runs)]
        speedups = [s for s in speedups if s is not None]
        cv = statistics.stdev(speedups) / statistics.mean(speedups) if len(speedups) > 1 else None
        out[task_path.stem] = {"speedups": speedups, "cv": cv}
    return out


_DO_BENCH = r"""
import sys, json, torch, triton.testing as tt
sys.path.insert(0, sys.argv[3])
from pairs import load_pair
ref, new, args = load_pair(sys.argv[1], sys.argv[2])

def graphed(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch's graph docs require
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay

with torch.no_grad():
    out = {}
    for name, fn in (("candidate", lambda: new(*args)), ("eager", lambda: ref(*args))):
        out[name + "_ms"] = tt.do_bench(fn, warmup=100, rep=500, return_mode="median")
        out[name + "_graph_ms"] = tt.do_bench(graphed(fn), warmup=100, rep=500, return_mode="median")
print(json.dumps(out))
"""


def agreement(results: dict, cache: Path) -> dict:
    out = {}
    for task_path, cand in candidates("nvrtc"):
        proc = subprocess.run([sys.executable, "-c", _DO_BENCH, str(task_path), str(cand), str(HERE)], capture_output=True,
                              text=True, env=_env(cache), check=True)
        bench = json.loads(proc.stdout.strip().splitlines()[-1])
        ours = results[cand.name]
        theirs = bench["eager_ms"] / bench["candidate_ms"]
        graph = bench["eager_graph_ms"] / bench["candidate_graph_ms"]
        out[task_path.stem] = {"judge_speedup": ours.speedup_eager, "do_bench_speedup": theirs,
                               "do_bench_graph_speedup": graph, "judge_candidate_ms": ours.candidate.median_ms,
                               "judge_eager_ms": ours.eager.median_ms, **bench,
                               "relative_difference": ours.speedup_eager / theirs - 1,
                               "relative_difference_graph": ours.speedup_eager / graph - 1}
    return out


_LAUNCH = r"""
import json, time, torch
from kernelevo import runtime
mod = runtime.load_cuda('extern "C" __global__ void noop(float* x, long long n, float a) {}')
x = torch.zeros(1, device="cuda")
def per_call(fn, n=20000):
    for _ in range(100): fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6
print(json.dumps({"runtime_launch_us": per_call(lambda: mod.noop(1, 32, x, 1, 1.0)),
                  "torch_add__us": per_call(lambda: x.add_(1.0))}))
"""


def launch_overhead(cache: Path) -> dict:
    """Host microseconds per launch of an empty kernel through kernelevo.runtime, next to a torch op."""
    proc = subprocess.run([sys.executable, "-c", _LAUNCH], capture_output=True, text=True, env=_env(cache), check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def suite_verdicts(judge, tasks: dict, device: str, formats: tuple[str, ...]) -> dict:
    futures = {cand.name: judge.submit(tasks[task], cand, device)
               for fmt in formats for task, cand in candidates(fmt)}
    return {name: f.result() for name, f in futures.items()}


def profile_cost(judge, tasks: dict, verdicts: dict, device: str) -> dict:
    """Each passing starter candidate profiled, one at a time, without and with Nsight Compute."""
    out = {}
    for fmt in ("nvrtc", "inline"):
        for task, cand in candidates(fmt):
            evaluation = verdicts.get(cand.name)
            if evaluation is None or not evaluation.ok:
                continue
            row = {}
            for label, ncu in (("basic", False), ("ncu", True)):
                started = time.monotonic()
                p = judge.profile(tasks[task], cand, evaluation, ncu=ncu).result()
                row[label] = {"device_s": p.cost_s, "wall_s": time.monotonic() - started, "notes": list(p.notes)}
            top = p.candidate[0] if p.candidate else None
            used = next((r for r in p.resources if top and r.name in top.name), None)
            row.update(dominant=top.name if top else None, dominant_share=top.share if top else None,
                       launches=sum(k.launches for k in p.candidate), registers=used.registers if used else None,
                       spill_stores=used.spill_stores if used else None, bound=p.sol.bound if p.sol else None,
                       sol_pct=p.sol.candidate_pct if p.sol else None, eager_sol_pct=p.sol.reference_pct if p.sol else None,
                       ncu_kernels=len(p.ncu), profile=p.to_dict())
            out[cand.name] = row
            print(json.dumps({cand.name: {k: v for k, v in row.items() if k != "profile"}}), flush=True)
    return out


def main() -> None:
    import torch

    from kernelevo.host import cpu_name
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4, help="throughput: times through the suite")
    parser.add_argument("--builds", type=int, default=8, help="cold builds per format")
    parser.add_argument("--inline-builds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5, help="repeatability: runs per kernel")
    parser.add_argument("--input-sets", type=int, default=JudgeOptions.input_sets, help="input sets rotated in timing")
    parser.add_argument("--cache", type=Path, help="cache directory [default: a new temporary one]")
    parser.add_argument("--bounds", default="final", help="the bounds trial (judge/run/bounds.py): final, all or off")
    parser.add_argument("--no-compile-baseline", action="store_true",
                        help="baselines time eager only (throughput and verdicts need no torch.compile)")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="parts to skip: launch build inline triton throughput repeat agree profile")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="kernelevo-bench-"))
    report: dict = {"gpu": torch.cuda.get_device_name(args.device), "cpu": cpu_name(), "cores": os.cpu_count(),
                    "torch": torch.__version__,
                    "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "input_sets": args.input_sets,
                    "method": __doc__}
    tasks = {SUITE / f"{p.stem}.py": load_task(p) for p in sorted(SUITE.glob("*.py")) if not p.name.startswith("_")}

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))

    if "launch" not in args.skip:
        report["launch_overhead"] = launch_overhead(cache)
        save()
    if "build" not in args.skip:
        report["build_nvrtc"] = build_latency("nvrtc", args.builds, cache)
        save()
    if "inline" not in args.skip:
        report["build_inline"] = build_latency("inline", args.inline_builds, cache)
        save()
    if "build" not in args.skip and "triton" not in args.skip:
        report["build_triton"] = build_latency("triton", args.builds, cache)
        save()
    options = JudgeOptions(devices=(args.device,), spares=4, input_sets=args.input_sets, bounds=args.bounds,
                           compile_baseline=not args.no_compile_baseline)
    report["bounds"] = options.bounds
    with Judge(cache, options) as judge:
        for task in tasks.values():  # baselines once per task, outside every measurement below
            judge.baseline(task, args.device)
        formats = ("nvrtc",) + (() if "inline" in args.skip else ("inline",)) + (() if "triton" in args.skip else ("triton",))
        verdicts = suite_verdicts(judge, tasks, args.device, formats)
        report["verdicts"] = {name: {"verdict": e.verdict, "reason": e.reason, "message": e.message,
                                     "speedup_eager": e.speedup_eager, "speedup_compile": e.speedup_compile,
                                     "candidate_ms": e.candidate.median_ms if e.candidate else None,
                                     "candidate_host_ms": e.candidate.host_ms if e.candidate else None,
                                     "device_s": e.device_s, "build_s": e.build_s, "format": e.format,
                                     "notes": [n for n in e.notes if n.startswith(("build:", "autotune"))]}
                               for name, e in verdicts.items()}
        save()
        if "agree" not in args.skip:
            report["agreement"] = agreement(verdicts, cache)
            save()
        if "throughput" not in args.skip:
            report["throughput"] = throughput(judge, tasks, cache, args.rounds, args.device)
            save()
            if "triton" not in args.skip:
                report["throughput_triton"] = throughput(judge, tasks, cache, args.rounds, args.device, fmt="triton")
                save()
        if "profile" not in args.skip:
            report["profile"] = profile_cost(judge, tasks, verdicts, args.device)
            save()
            if "throughput" not in args.skip:
                report["throughput_profiled"] = throughput(judge, tasks, cache, args.rounds, args.device, profile=True)
                save()
        if "repeat" not in args.skip:
            report["repeatability"] = repeatability(judge, tasks, args.runs, args.device)
            save()
    print(json.dumps({k: v for k, v in report.items() if k != "method"}, indent=1, default=str))


if __name__ == "__main__":
    main()
