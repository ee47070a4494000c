"""Which language pays, task by task? `kernelevo optimize --format auto` on starter tasks, with a
scripted model that answers each prompt in the format it asks for. Run on a GPU machine:

    python benchmarks/format_auto.py --out benchmarks/results/format_auto-<gpu>-<date>.json

Method: for each task (default: layernorm and row_softmax), the real CLI and judge against a
loopback server speaking the OpenAI protocol (tests/llm_server.py) that replies, to a prompt asking
for Triton, the starter Triton candidate and then variants of its tune-marked constants, and to
one asking for nvrtc, the starter nvrtc candidate and then variants of its `#define`s (so the
replies are real kernels of both languages, not a model's ideas). Islands alternate nvrtc and
Triton; the format bandit draws each later call's format. Recorded per task and format: calls,
kernels judged, correct, improvements, and the format's fastest kernel with its interval, as the
archive holds them; plus each format's mean build seconds (a Triton build includes its first call).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = HERE / "tasks"
sys.path.insert(0, str(HERE.parent / "tests"))  # the scripted server of the tests


def variants(source: str, limit: int = 12) -> list[str]:
    """The starter kernel, then every other value of its tune-marked constants, one change at a time
    (or of its BLOCK, where it marks none)."""
    from kernelevo.evolution.tune import apply, tunables

    out = [source]
    for t in tunables(source):
        out += [apply(source, {t.name: c}) for c in t.choices if c != t.value]
    if len(out) < 3:  # a starter kernel without tune marks: its block size, as an edit would change it
        out += [re.sub(r"#define BLOCK \d+", f"#define BLOCK {b}", source, count=1) for b in (128, 512, 1024)]
    return list(dict.fromkeys(out))[:limit]


def responder(task: str):
    from llm_server import Step, request_text

    kernels = {fmt: itertools.cycle(variants((SUITE / "candidates" / f"{task}__{fmt}.py").read_text()))
               for fmt in ("nvrtc", "triton")}

    def respond(body: dict) -> Step:
        text = request_text(body)
        fmt = "triton" if "# Candidate format: triton (write this one)" in text else "nvrtc"
        analysis = "## Analysis\nThe fastest keeps rows in registers.\n\n## Kernel\n" if "measured kernels" in text else ""
        return Step(text=f"{analysis}Here it is.\n\n```python\n{next(kernels[fmt])}```\n",
                    usage=dict(input=4000, cache_read=8000, output=1500))
    return respond


def run_task(task: str, folder: Path, calls: int, device: str) -> dict:
    from kernelevo.archive.store import Archive
    from llm_server import ScriptedServer

    server = ScriptedServer(responder=responder(task))
    config = folder / "kernelevo.toml"
    config.write_text('[models.scripted]\nmodel = "openai:scripted-coder"\ninput = 1.0\ncached_input = 0.1\noutput = 4.0\n')
    env = dict(os.environ, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{server.url}/v1", COLUMNS="100",
               KERNELEVO_CACHE_DIR=str(folder / "cache"))
    args = [str(Path(sys.executable).parent / "kernelevo"), "optimize", str(SUITE / f"{task}.py"), "--format", "auto",
            "--device", device, "--model", "scripted", "--config", str(config), "--archive", str(folder / "a.sqlite"),
            "--out", str(folder / "out"), "--max-llm-calls", str(calls), "--generations", "4", "--children", "4",
            "--islands", "2", "--concurrency", "2", "--seed", "1", "--no-ncu", "--force"]
    started = time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    finally:
        server.close()
    with Archive.open_readonly(folder / "a.sqlite") as archive:
        (run,) = archive.runs()
        rows, best = archive.format_yield(run.id), archive.format_best(run.id)
        builds: dict[str, list[float]] = {}
        for k in archive.kernels(run_id=run.id):
            for e in archive.kernel(k.id).evaluations:
                if e.purpose == "search" and e.data.get("build_s") is not None:
                    builds.setdefault(k.format, []).append(e.data["build_s"])
    return {"exit": done.returncode, "wall_s": round(time.monotonic() - started, 1), "run": run.id,
            "stop_reason": run.stop_reason, "formats": [dataclasses.asdict(r) for r in rows],
            "best": {fmt: dataclasses.asdict(b) for fmt, b in best.items()},
            "build_s_mean": {f: round(statistics.mean(xs), 3) for f, xs in builds.items()},
            "summary": [line for line in done.stdout.splitlines() if line.strip()][-16:],
            "stderr_tail": done.stderr[-1500:] if done.returncode not in (0, 3) else ""}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", nargs="*", default=["layernorm", "row_softmax"])
    parser.add_argument("--calls", type=int, default=10, help="LLM calls per task")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    report = {"gpu": torch.cuda.get_device_name(args.device), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "method": __doc__, "tasks": {}}
    with tempfile.TemporaryDirectory(prefix="kernelevo-auto-") as tmp:
        for task in args.tasks:
            folder = Path(tmp) / task
            folder.mkdir()
            report["tasks"][task] = run_task(task, folder, args.calls, args.device)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1, default=str))
            print(json.dumps({task: {k: v for k, v in report["tasks"][task].items() if k != "summary"}}, default=str),
                  flush=True)


if __name__ == "__main__":
    main()
