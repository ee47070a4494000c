"""The bench bar on a GPU: `kernelevo bench` over two starter tasks with scripted CUDA replies, on
every GPU of the machine (one task per GPU at a time); every row done and judged, the table's
figures those of the archive's final evaluations. With $OUT set, the table comes back as a record."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernelevo.archive.store import Archive
from llm_server import ScriptedServer, request_text

from conftest import ROOT
from test_gpu_optimize import gpu_count, scripted_cuda

pytestmark = pytest.mark.gpu
TASKS = ROOT / "benchmarks" / "tasks"
NAMES = ("elementwise_chain", "row_softmax")


def by_task():
    """The scripted model of each task, picked by the task the prompt names."""
    models = {name: scripted_cuda(name) for name in NAMES}

    def respond(body: dict):
        task = request_text(body).split("# The task: ", 1)[1].split("\n", 1)[0].strip()
        return models[task](body)
    return respond


def test_bench_two_starter_tasks_on_every_gpu(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in NAMES:
        shutil.copy(TASKS / f"{name}.py", suite / f"{name}.py")
    server = ScriptedServer(responder=by_task())
    config = tmp_path / "kernelevo.toml"
    config.write_text('[models.scripted]\nmodel = "openai:scripted-cuda"\ninput = 1.0\ncached_input = 0.1\noutput = 4.0\n')
    env = dict(os.environ, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{server.url}/v1")
    exe = str(Path(sys.executable).parent / "kernelevo")
    try:
        done = subprocess.run([exe, "bench", str(suite), "--model", "scripted", "--config", str(config), "--gpus", "all",
                               "--archive", str(tmp_path / "archive.sqlite"), "--out", str(tmp_path / "out"),
                               "--children", "4", "--generations", "3", "--max-llm-calls-per-task", "8",
                               "--concurrency", "2", "--json"], capture_output=True, text=True, env=env, timeout=900)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads(done.stdout)
    rows = {r["name"]: r for r in table["tasks"]}
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
        stored = {r.name: r for r in store.bench_tasks(table["bench"]["id"])}
        finals = {n: store.evaluation(r.evaluation_id) for n, r in stored.items()}
    for name in NAMES:
        assert rows[name]["status"] == "done" and rows[name]["verdict"] == "ok", rows[name]
        assert finals[name].purpose == "final" and rows[name]["speedup_eager"] == finals[name].speedup_eager
        assert rows[name]["calls"] > 0 and rows[name]["cost_usd"] > 0
    assert all(row["device"].startswith("cuda:") for row in rows.values())
    if gpu_count() >= 2:  # one task per GPU at a time: the two tasks ran side by side
        assert {f.device for f in finals.values()} == {"cuda:0", "cuda:1"}, finals
    assert table["suite"]["correct"] == 2 and table["suite"]["fast_p"]["eager"]["1.0"] is not None
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "bench_scripted.json").write_text(json.dumps(
            {**table, "devices": sorted({f.device for f in finals.values()})}, indent=1, default=str))
