"""Judge workers on a Ray cluster with GPUs (--executor ray, the CUDA backend): a local cluster on
this host whose head node offers every GPU as a resource. A CUDA job whose Ray worker is killed is
judged anyway; a search and a bench with scripted CUDA replies are judged on every GPU, each
evaluation naming the node and GPU that judged it; Ctrl-C leaves no judge process behind and every
GPU of the cluster free. With $OUT set, what ran comes back as a record."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kernelevo.archive.store import Archive
from llm_server import ScriptedServer
from test_gpu_optimize import TASKS, gpu_count, scripted_cuda
from test_optimize import cli
from test_ray import freed, interrupt_once_judging, kill_its_ray_worker, local_cluster

pytestmark = pytest.mark.gpu
ray = pytest.importorskip("ray")
NAME = "row_softmax"
CANDIDATE = TASKS / "candidates" / f"{NAME}__nvrtc.py"
ON_GPU = re.compile(r"/cuda:\d+$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One node holding every GPU of the machine (as `ray start --head` on a GPU host would)."""
    head = {"num_cpus": 8, "num_gpus": gpu_count(), "object_store_memory": 256 * 2**20}
    with local_cluster(tmp_path_factory.mktemp("node-cache"), head) as nodes:
        yield nodes


def record(name: str, data: dict) -> None:
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / f"ray_{name}.json").write_text(json.dumps(data, indent=1, default=str))


def environment(server, tmp_path: Path, cluster) -> dict:
    config = tmp_path / "kernelevo.toml"
    config.write_text('[models.scripted]\nmodel = "openai:scripted-cuda"\ninput = 1.0\ncached_input = 0.1\noutput = 4.0\n')
    env = dict(os.environ, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{server.url}/v1", COLUMNS="100",
               RAY_ADDRESS=cluster.address)
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def ray_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--executor", "ray", "--device", "cuda", "--model", "scripted", "--config", str(tmp_path / "kernelevo.toml"),
            "--archive", str(tmp_path / "archive.sqlite"), "--out", str(tmp_path / "out"), "--trials", "2",
            "--no-compile-baseline", "--seed", "1", *extra]


def test_a_cuda_job_whose_ray_worker_is_killed_is_judged_anyway(cluster, tmp_path):
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.tasks import load_task

    candidate = tmp_path / "slow_build.py"
    candidate.write_text("import time\ntime.sleep(4)\n" + CANDIDATE.read_text())
    options = JudgeOptions(devices=tuple(f"cuda:{i}" for i in range(gpu_count())), compile_baseline=False,
                           trials=2, executor="ray", ray_address=cluster.address)
    with Judge(tmp_path / "cache", options) as judge:
        future = judge.submit(load_task(TASKS / f"{NAME}.py"), candidate)
        worker, _ = kill_its_ray_worker(set(), cluster.kernelevo_cache)
        evaluation = future.result(timeout=600)
    ray.shutdown()  # this process's Ray job ends, and the zygotes its idle Ray workers keep with it (test_ray)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{worker}").exists()  # the orphaned judge worker followed its Ray worker
    assert evaluation.verdict == "ok", (evaluation.reason, evaluation.message)
    assert ON_GPU.search(evaluation.node) and evaluation.speedup_eager, evaluation
    record("killed_worker", {"verdict": evaluation.verdict, "node": evaluation.node,
                             "speedup_eager": evaluation.speedup_eager, "device_name": evaluation.device_name})


def test_optimize_and_bench_on_the_gpus_of_the_cluster(cluster, tmp_path):
    """One search with scripted CUDA replies, then a bench of two starter tasks' given candidates."""
    server = ScriptedServer(responder=scripted_cuda(NAME))
    env = environment(server, tmp_path, cluster)
    started = time.monotonic()
    try:
        done = cli(["optimize", str(TASKS / f"{NAME}.py"),
                    *ray_args(tmp_path, "--generations", "2", "--children", "4", "--max-llm-calls", "8",
                              "--concurrency", "2")], env, timeout=900)
    finally:
        server.close()
    search_s = time.monotonic() - started
    assert done.returncode in (0, 3), done.stderr[-3000:]
    suite, candidates = tmp_path / "suite", tmp_path / "candidates"
    suite.mkdir(), candidates.mkdir()
    for name in (NAME, "elementwise_chain"):
        shutil.copy(TASKS / f"{name}.py", suite / f"{name}.py")
        shutil.copy(TASKS / "candidates" / f"{name}__nvrtc.py", candidates / f"{name}__nvrtc.py")
    started = time.monotonic()
    benched = cli(["bench", str(suite), "--candidates", str(candidates), *ray_args(tmp_path), "--json"], env, timeout=900)
    bench_s = time.monotonic() - started
    assert benched.returncode == 0, benched.stderr[-3000:]
    rows = json.loads(benched.stdout)["tasks"]
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
        (run,) = store.runs()
        evaluations = [e for k in store.kernels(run_id=run.id) for e in store.kernel(k.id).evaluations]
    judged = [e for e in evaluations if e.verdict != "compile_error"]
    nodes = sorted({e.data["node"] for e in judged})
    assert run.config["executor"] == "ray" and "GPU" in run.gpu_name
    assert judged and all(ON_GPU.search(e.data["node"]) for e in judged), nodes
    assert len({n.rsplit("/", 1)[1] for n in nodes}) == gpu_count(), nodes  # every GPU of the cluster judged
    assert any(e.purpose == "final" and e.verdict == "ok" for e in evaluations)
    assert [r["verdict"] for r in rows] == ["ok", "ok"] and all(ON_GPU.search(r["device"]) for r in rows), rows
    record("optimize_bench", {"search_s": round(search_s, 1), "bench_s": round(bench_s, 1), "run": run.id,
                              "gpu_name": run.gpu_name, "nodes": nodes,
                              "evaluations_per_node": {n: sum(e.data["node"] == n for e in judged) for n in nodes},
                              "bench_rows": [{k: r[k] for k in ("name", "verdict", "speedup_eager", "device")}
                                             for r in rows]})


def test_ctrl_c_frees_every_gpu_of_the_cluster(cluster, tmp_path):
    server = ScriptedServer(responder=scripted_cuda(NAME))
    env = environment(server, tmp_path, cluster)
    exe = Path(sys.executable).parent / "kernelevo"
    proc = subprocess.Popen([str(exe), "optimize", str(TASKS / f"{NAME}.py"),
                             *ray_args(tmp_path, "--max-llm-calls", "20")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = interrupt_once_judging(proc, cluster.kernelevo_cache, wait_s=180)
    finally:
        proc.kill()
        server.close()
    assert proc.returncode == 130, err.decode()[-2000:]
    available, total = freed(cluster.address, "GPU", cluster.kernelevo_cache)
    assert available == total == gpu_count()
    record("ctrl_c", {"exit": proc.returncode, "gpus_free": available})
