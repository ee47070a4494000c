"""The search against torch.compile, the user's one-line alternative: a run ranks its kernels by their
speedup over the compiled reference (inductor's C++ on the CPU backend), says so, stores it with the
run and in the drop-in; `--baseline eager` asks for the old ranking; a bad choice is refused in one line."""
import re

from kernelevo.archive.store import Archive
from llm_server import ScriptedServer, request_text

from conftest import run_cli
from test_optimize import TASK, cli, environment, scripted_model


def args(tmp_path, *extra):
    return ["optimize", str(TASK), "--device", "cpu", "--model", "scripted", "--config", str(tmp_path / "kernelevo.toml"),
            "--archive", str(tmp_path / "archive.sqlite"), "--out", str(tmp_path / "out"), "--children", "2",
            "--concurrency", "2", "--timing-seconds", "0.2", "--trials", "2", "--seed", "1", "--generations", "1",
            "--max-llm-calls", "3", *extra]


def test_a_run_ranks_its_kernels_against_torch_compile(tmp_path):
    server = ScriptedServer(responder=scripted_model())
    try:
        done = cli(args(tmp_path), environment(server, tmp_path))
    finally:
        server.close()
    assert done.returncode in (0, 3), done.stderr[-3000:]
    said = " ".join(done.stderr.split())
    assert "baseline: torch.compile: kernels are ranked by their speedup over it; eager is shown beside" in said
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        (run,) = archive.runs()
        best = archive.best_kernel(run.id)
        reasons = [k.stone_reason or "" for k in archive.kernels(run_id=run.id)]
    assert run.config["baseline"] == "compile" and best is not None
    assert best.speedup_compile is not None  # measured against inductor's C++ on this CPU
    assert re.search(r"ranked against\s+torch\.compile", done.stdout), done.stdout
    written = (tmp_path / "out" / "task_scale_kernelevo.py").read_text()
    assert "which ranked kernels against torch.compile, measured" in " ".join(written.split())
    bests = [r for r in reasons if r.startswith("new best of island")]
    assert bests and all(r.endswith("x torch.compile") for r in bests), reasons
    # every prompt names the opponent, measured before the first call, with its time and eager's
    prompts = [" ".join(request_text(r["body"]).split()) for r in server.requests]
    assert prompts and all(re.search(r"What the kernel must beat: torch\.compile .* takes [0-9.]+ ms compiled and "
                                     r"[0-9.]+ ms in eager PyTorch", p) for p in prompts), prompts[0][:3000]
    assert "In a loop, host work included:" in written  # the device-time figures' host-inclusive twin


def test_the_baseline_is_a_choice_of_two():
    done = run_cli("optimize", str(TASK), "--device", "cpu", "--baseline", "cudnn")
    assert done.returncode == 2 and "--baseline cudnn" in done.stderr and "compile" in done.stderr
