"""The optimize bar on a GPU: scripted CUDA replies for two starter tasks, the real CLI in a
100-column pseudo-terminal (so the live panel is drawn), a judged ok best kernel faster than eager,
every candidate in the archive with its lineage."""
import itertools
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from kernelevo.archive.reports.run_data import report_data
from kernelevo.archive.store import Archive
from kernelevo.evolution.novelty import fingerprints
from llm_server import ScriptedServer, kernel_replies, request_text

from conftest import ROOT

pytestmark = pytest.mark.gpu
TASKS = ROOT / "benchmarks" / "tasks"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def scripted_cuda(name: str):
    """Translate: a kernel that does not compile, then the starter nvrtc and inline ones in turn.
    Improvements cycle through fast exponentials with a tunable block size (which the tune operator
    then explores), wrong math, the inline kernel, and small real edits (other block sizes, fast
    exponentials at other block sizes): every kind of outcome for the run's report, and replies
    that repeat a kernel once the cycle comes round again."""
    nvrtc = (TASKS / "candidates" / f"{name}__nvrtc.py").read_text()
    inline = (TASKS / "candidates" / f"{name}__inline.py").read_text()
    broken = nvrtc.replace("expf(", "expff(").replace("tanhf(", "tanhff(")
    fast = nvrtc.replace("expf(", "__expf(").replace("#define BLOCK 256", "#define BLOCK 256  // tune: 128 256 512")
    wrong = (fast.replace("* inv", "* inv * 0.5f").replace("return tanhf(y)", "return 0.5f * tanhf(y)")
             .replace("out[i] = r;", "out[i] = make_float4(r.x, r.y, r.z, 0.0f);"))
    edits = [nvrtc.replace("#define BLOCK 256", f"#define BLOCK {b}") for b in (128, 512, 1024)]
    edits += [fast.replace("#define BLOCK 256  // tune: 128 256 512", f"#define BLOCK {b}") for b in (64, 1024)]
    return kernel_replies(itertools.chain([broken], itertools.cycle([nvrtc, inline])),
                          itertools.cycle([fast, wrong, inline, *edits]), nvrtc,
                          dict(input=4000, cache_read=8000, output=1500))


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def archive_evaluations(tmp_path: Path, kernel_id: int) -> tuple:
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        return archive.kernel(kernel_id).evaluations


def run_in_pty(args: list[str], env: dict, log: Path) -> int:
    """Run the CLI with stdout and stderr on a 100x40 pseudo-terminal; the screen output goes to `log`."""
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(args, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    log.write_bytes(b"".join(chunks))
    return proc.wait(timeout=900)


@pytest.mark.parametrize("name", ["row_softmax", "elementwise_chain"])
def test_optimize_starter_task_on_the_gpu(name, tmp_path):
    server = ScriptedServer(responder=scripted_cuda(name))
    config = tmp_path / "kernelevo.toml"
    config.write_text('[models.scripted]\nmodel = "openai:scripted-cuda"\ninput = 1.0\ncached_input = 0.1\noutput = 4.0\n')
    env = dict(os.environ, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{server.url}/v1", COLUMNS="100",
               LINES="40", TERM="xterm-256color")
    log = Path(os.environ.get("OUT", tmp_path)) / f"optimize_{name}.log"
    exe = str(Path(sys.executable).parent / "kernelevo")
    try:
        code = run_in_pty([exe, "optimize", str(TASKS / f"{name}.py"), "--model", "scripted", "--config", str(config),
                           "--archive", str(tmp_path / "archive.sqlite"), "--out", str(tmp_path / "out"),
                           "--children", "4", "--generations", "4", "--max-llm-calls", "16", "--plateau", "4",
                           "--concurrency", "2", "--gpus", "all", "--force"],  # row_softmax: compiled at its bound
                          env, log)
    finally:
        server.close()
    reports = list((tmp_path / "out").glob(f"{name}_r*.html"))
    if os.environ.get("OUT"):  # the archive and the report travel back with the screen log, for the record
        for path in [tmp_path / "archive.sqlite", *reports]:
            shutil.copy(path, Path(os.environ["OUT"]) / f"optimize_{name}{path.suffix}")
    screen = ANSI.sub("", log.read_bytes().decode(errors="replace"))
    assert code in (0, 3), screen[-3000:]
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        (run,) = archive.runs()
        kernels = archive.kernels(run_id=run.id)
        finals = [e for k in kernels for e in archive.kernel(k.id).evaluations if e.purpose == "final"]
        verdicts = archive.counts(run.id).verdicts
        profiles = archive.profiles(run.id)
        calls = archive.call_yield(run.id)
    assert finals and finals[-1].verdict == "ok" and finals[-1].speedup_eager > 1.0
    assert verdicts.get("compile_error", 0) >= 1 and verdicts.get("ok", 0) >= 1
    assert all(k.parents for k in kernels if k.operator != "translate")
    assert "generation" in screen and "vs torch.compile" in screen
    # every reply that changed code was judged; copies were skipped with their reason
    seen: set[str] = set()
    for k in sorted((k for k in kernels if k.source), key=lambda k: k.id):
        prints = set(fingerprints(k.source))
        assert k.verdict or (prints & seen and k.problem.startswith(("copy:", "renamed_copy:"))), k
        seen |= prints
    assert "replies judged" in screen and "calls per operator" in screen  # the live panel and the summary
    assert all(len(line) <= 100 for line in screen.replace("\r", "\n").splitlines())  # rich wraps to the terminal
    # the first correct kernel is a new best: profiled, with Nsight Compute where it is installed
    assert profiles and all(p.sol and p.candidate for p in profiles.values()), profiles
    fed = sum("Profile of this kernel on" in request_text(r["body"]) for r in server.requests)
    # the report optimize wrote: every section has data (tests/test_report.py renders it in Chromium)
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        data = report_data(archive, run.id)
    assert len(reports) == 1 and f"report:{reports[0]}" in "".join(screen.split())
    assert len(data["progress"]) >= 3 and data["progress"][-1]["spent_usd"] > 0
    assert {"translate", "repair", "mutate"} <= {k["operator"] for k in data["lineage"]} and data["best_path"]
    assert len(data["top"]) >= 2 and {"ok", "compile_error"} <= set(data["verdicts"])
    if name == "row_softmax":  # elementwise's scripted variants change a line or two: the gate skips most
        assert any(t["diff"] and t["operator"] == "mutate" for t in data["top"]), data["top"]
    assert len(data["operators"]) >= 3 and data["models"][0]["cost_usd"] > 0
    record = {"task": name, "exit": code, "kernels": len(kernels), "verdicts": verdicts,
              "replies": sum(c.replies for c in calls.values()), "judged": sum(c.judged for c in calls.values()),
              "calls_by_operator": {op: c.calls for op, c in calls.items()},
              "copies_skipped": sum(1 for k in kernels if k.problem.startswith(("copy:", "renamed_copy:"))),
              "devices": sorted({e.device for k in kernels for e in archive_evaluations(tmp_path, k.id)}),
              "final_speedup_eager": finals[-1].speedup_eager, "final_speedup_compile": finals[-1].speedup_compile}
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / f"optimize_{name}.json").write_text(json.dumps(record, indent=1))
    judged = [e for k in kernels for e in archive_evaluations(tmp_path, k.id)]
    if gpu_count() >= 2:  # --gpus all: the search's candidates were judged on every GPU of the machine
        assert {f"cuda:{i}" for i in range(gpu_count())} <= {e.device for e in judged if e.purpose == "search"}
    # the final re-judgement ran on the GPU kind that searched
    assert {e.device_name for e in judged if e.purpose == "final"} <= {e.device_name for e in judged
                                                                         if e.purpose == "search"}
    print(f"{name}: best {finals[-1].speedup_eager:.2f}x eager, verdicts {verdicts}, "
          f"{len(kernels)} kernels, {len(profiles)} profiled, {fed} prompts with a profile; screen log {log}")


def test_an_ensemble_of_two_scripted_models_on_the_gpu(tmp_path):
    """row_softmax with two models: 'careful' (the scripted CUDA replies above) and 'hasty', at a
    third of the price, whose kernels never compile or compute the wrong thing. The summary and the
    report show the per-model table, and it agrees with the archive's rows."""
    from kernelevo.archive.rows import by_model

    name = "row_softmax"
    careful = scripted_cuda(name)
    nvrtc = (TASKS / "candidates" / f"{name}__nvrtc.py").read_text()
    hasty_kernels = itertools.cycle([nvrtc.replace("expf(", f"expff{i}(") for i in range(50)]
                                    + [nvrtc.replace("* inv", f"* inv * 0.{i + 1}f") for i in range(8)])
    hasty = kernel_replies(hasty_kernels, hasty_kernels, nvrtc.replace("expf(", "expfff("),
                           dict(input=4000, cache_read=8000, output=1500))
    server = ScriptedServer(responder=lambda body: (careful if body["model"] == "careful-cuda" else hasty)(body))
    config = tmp_path / "kernelevo.toml"
    config.write_text('[models.careful]\nmodel = "openai:careful-cuda"\ninput = 1.5\ncached_input = 0.15\noutput = 6.0\n'
                      '[models.hasty]\nmodel = "openai:hasty-cuda"\ninput = 0.5\ncached_input = 0.05\noutput = 2.0\n')
    env = dict(os.environ, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{server.url}/v1", COLUMNS="100",
               LINES="40", TERM="xterm-256color")
    out = Path(os.environ.get("OUT", tmp_path))
    log = out / "ensemble_row_softmax.log"
    exe = str(Path(sys.executable).parent / "kernelevo")
    try:
        code = run_in_pty([exe, "optimize", str(TASKS / f"{name}.py"), "--model", "careful", "--model", "hasty",
                           "--config", str(config), "--archive", str(tmp_path / "archive.sqlite"),
                           "--out", str(tmp_path / "out"), "--children", "4", "--generations", "6",
                           "--max-llm-calls", "30", "--plateau", "6", "--concurrency", "2", "--gpus", "all",
                           "--force"], env, log)  # row_softmax: torch.compile at its speed of light on an H100
    finally:
        server.close()
    screen = ANSI.sub("", log.read_bytes().decode(errors="replace"))
    assert code in (0, 3), screen[-3000:]
    (report,) = (tmp_path / "out").glob(f"{name}_r*.html")
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        (run,) = archive.runs()
        rows = by_model(archive.model_yield(run.id), ["careful", "hasty"])
        calls = archive._db.read("SELECT label, operator FROM llm_calls WHERE run_id = ? ORDER BY id", (run.id,))
        data = report_data(archive, run.id)
        finals = [e for k in archive.kernels(run_id=run.id) for e in archive.kernel(k.id).evaluations
                  if e.purpose == "final"]
    if os.environ.get("OUT"):
        for path in (tmp_path / "archive.sqlite", report):
            shutil.copy(path, out / f"ensemble_{name}{path.suffix}")
    table, shown = {r["model"]: r for r in rows}, {m["model"]: m for m in data["models"]}
    assert set(shown) - {"(none)"} == {"careful", "hasty"}  # (none): tune's children, which make no call
    for model, r in table.items():
        assert (r["calls"], r["correct"], r["improvements"]) == (shown[model]["calls"], shown[model]["ok"],
                                                                  shown[model]["improvements"])
    assert table["careful"]["improvements"] >= 1 and table["hasty"]["correct"] == 0
    assert finals and finals[-1].verdict == "ok" and finals[-1].speedup_eager > 1.0
    summary = " ".join(screen.split())
    assert "model careful" in summary and "model hasty" in summary and "improvements" in summary
    order = [c["label"] for c in calls]
    half = len(order) // 2
    record = {"task": name, "run": run.id, "exit": code, "stop": run.stop_reason, "per_model": rows,
              "calls_in_order": order,
              "hasty_share": {f"first_{half}_calls": round(order[:half].count("hasty") / half, 3),
                              f"last_{half}_calls": round(order[-half:].count("hasty") / half, 3)},
              "calls_by_model_and_operator": dict(sorted(Counter(f"{c['label']}/{c['operator']}" for c in calls).items())),
              "final_speedup_eager": finals[-1].speedup_eager, "final_speedup_compile": finals[-1].speedup_compile,
              "gpu": finals[-1].device_name, "torch": finals[-1].torch_version}
    if os.environ.get("OUT"):
        (out / "ensemble_row_softmax.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))
