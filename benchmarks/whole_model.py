"""A whole model in parts on a GPU: `kernelevo optimize MODEL.py --parts N` with a scripted model
that answers each part's prompts with a hand-written kernel for that part. Run on a GPU machine:

    python benchmarks/whole_model.py --out benchmarks/results/whole_model-<gpu>-<date>.json

Method: the real CLI splits MODEL (default benchmarks/models/gpt_stack.py, a GPT-style stack of 6
pre-norm blocks) on the GPU, searches its N hottest parts with the LLM calls shared by their time,
assembles the model with each part whose kernel was faster than its part alone beyond noise, has the
judge verify the assembled model against the original (all trials), times the original and the
assembly in the user's loop (host included, interleaved in one process) in every compile mode, keeps
each part only where the model without it is slower in the chosen mode, and reports the assembly in
its best mode against the original in its best mode. The model's replies come from a
loopback server (tests/llm_server.py): for the part task NAME, the kernel in
tests/fixtures/models/kernels/NAME__nvrtc.py and then variants of its tune-marked constants. Recorded:
the split, the assembly's result (each part's share, its own speedup, whether it was placed, the
model's measured speedup with its interval, the Amdahl bound) and the CLI's summary.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KERNELS = ROOT / "tests" / "fixtures" / "models" / "kernels"
sys.path.insert(0, str(ROOT / "tests"))  # the scripted server of the tests
sys.path.insert(0, str(HERE))


def responder():
    from format_auto import variants
    from llm_server import Step, request_text

    cycles: dict[str, itertools.cycle] = {}

    def respond(body: dict) -> Step:
        text = request_text(body)
        task = text.split("# The task: ", 1)[1].split("\n", 1)[0].strip()
        if not (KERNELS / f"{task}__nvrtc.py").is_file():  # a part nobody wrote a kernel for
            return Step(text="I have no kernel for this part.", usage=dict(input=6000, cache_read=8000, output=20))
        if task not in cycles:
            cycles[task] = itertools.cycle(variants((KERNELS / f"{task}__nvrtc.py").read_text()))
        analysis = "## Analysis\nThe fastest fuses the norm.\n\n## Kernel\n" if "measured kernels" in text else ""
        return Step(text=f"{analysis}Here it is.\n\n```python\n{next(cycles[task])}```\n",
                    usage=dict(input=6000, cache_read=8000, output=3000))
    return respond


def main() -> None:
    import torch

    from llm_server import ScriptedServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", type=Path, default=HERE / "models" / "gpt_stack.py")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--calls", type=int, default=4, help="LLM calls for all parts together")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--min-speedup", type=float, default=None,
                        help="passed to optimize: a part's kernel alone must beat its part by this to be tried in place")
    parser.add_argument("--no-compile-baseline", action="store_true", help="passed to optimize: parts against eager")
    parser.add_argument("--modes", default=None, help="passed to optimize: the compile modes to time the assembly in")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds for the whole optimize run")
    args = parser.parse_args()
    report = {"gpu": torch.cuda.get_device_name(args.device), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "method": __doc__}
    server = ScriptedServer(responder=responder())
    with tempfile.TemporaryDirectory(prefix="kernelevo-model-") as tmp:
        folder = Path(tmp)
        config = folder / "kernelevo.toml"
        config.write_text('[models.scripted]\nmodel = "openai:scripted-coder"\ninput = 1.0\ncached_input = 0.1\n'
                          'output = 4.0\n')
        env = dict(os.environ, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{server.url}/v1", COLUMNS="120",
                   KERNELEVO_CACHE_DIR=str(folder / "cache"))
        command = [str(Path(sys.executable).parent / "kernelevo"), "optimize", str(args.model), "--parts",
                   str(args.parts), "--device", args.device, "--model", "scripted", "--config", str(config),
                   "--archive", str(folder / "a.sqlite"), "--out", str(folder / "out"), "--max-llm-calls",
                   str(args.calls), "--generations", "2", "--children", "2", "--concurrency", "2", "--seed", "1",
                   "--no-ncu"]
        command += ["--min-speedup", str(args.min_speedup)] if args.min_speedup is not None else []
        command += ["--no-compile-baseline"] if args.no_compile_baseline else []
        command += ["--modes", args.modes] if args.modes else []
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
        except subprocess.TimeoutExpired as exc:  # what it wrote so far is still recorded
            text = [(x or b"").decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr)]
            done = subprocess.CompletedProcess(command, f"timed out after {args.timeout:g} s", *text)
        finally:
            server.close()
        report.update(command=" ".join(command[1:]).replace(str(folder), "TMP"), exit=done.returncode,
                      wall_s=round(time.monotonic() - started, 1), stdout=done.stdout.splitlines()[-60:],
                      stderr_tail=done.stderr[-3000:])
        stem = args.model.stem
        for key, path in (("result", folder / "out" / f"{stem}_kernelevo.json"),
                          ("split", folder / "out" / f"{stem}_parts" / "split.json")):
            if path.is_file():
                report[key] = json.loads(path.read_text())
        kernels = {p.name: p.read_text() for p in (folder / "out").glob("*_kernelevo.py")}
        report["assembled_lines"] = {name: len(text.splitlines()) for name, text in kernels.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: v for k, v in report.items() if k not in ("method", "split", "stdout")}, indent=1,
                     default=str)[:6000])
    print("\n".join(report["stdout"]))


if __name__ == "__main__":
    main()
