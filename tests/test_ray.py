"""Judge workers on a Ray cluster (--executor ray), on the CPU backend: a real local cluster (a head
and a second node, each a raylet of its own) that every test here shares. A job whose Ray worker is
killed is judged anyway; a job lost twice gets a verdict; optimize, bench
and an import's rejudge run end to end, their evaluations saying which node judged them;
Ctrl-C leaves no judge process behind and every CPU of the cluster free."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kernelevo.archive.store import Archive
from llm_server import ScriptedServer

from conftest import FIXTURES
from test_optimize import GOOD, cli, environment, scripted_model

ray = pytest.importorskip("ray")
CPU = FIXTURES / "cpu"
TASK = CPU / "task_scale.py"
# Held in the build phase long enough to be found and killed (the import runs in the judge worker).
SLOW_BUILD = "import time\ntime.sleep(4)\n" + GOOD


@contextlib.contextmanager
def local_cluster(cache: Path, head: dict, others: tuple[dict, ...] = ()):
    """A Ray cluster of raylets on this machine whose nodes keep their caches in `cache`."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("KERNELEVO_CACHE_DIR", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(KERNELEVO_CACHE_DIR=str(cache), RAY_USAGE_STATS_ENABLED="0")
    nodes = Cluster(initialize_head=True, head_node_args={**head, "include_dashboard": False})
    for node in others:
        nodes.add_node(**node)
    nodes.wait_for_nodes()
    nodes.kernelevo_cache = cache  # where its judge workers keep their cache: how a test finds its own
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node and a worker node, one CPU each; nodes keep their caches in a folder of the test's."""
    small = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    with local_cluster(tmp_path_factory.mktemp("node-cache"), small, (small,)) as nodes:
        yield nodes


def judge_options(cluster):
    from kernelevo.judge.api import JudgeOptions
    from kernelevo.judge.measure.timing import TimingConfig

    return JudgeOptions(devices=("cpu",), compile_baseline=False, trials=2, executor="ray",
                        ray_address=cluster.address, timing=TimingConfig(min_reps=10, max_seconds=0.2))


def judge_workers(under: Path, under_ray: bool = False, kinds: tuple[str, ...] = ("worker",)) -> list[tuple[int, int]]:
    """(pid, driver pid) of every kernelevo judge worker process on this machine whose judge cache is in
    the folder `under` (a test's own: other tests may be judging alongside, under pytest -n). Its driver
    is the process that started it: its parent, or its zygote's parent where it was forked from one
    (judge/run/zygote.py). `under_ray`: only those driven by a Ray worker (its title starts with ray::);
    `kinds`: ("worker", "zygote") also counts the zygotes."""
    found, mine = [], f"KERNELEVO_CACHE_DIR={Path(under).resolve()}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit():
                continue
            command = (entry / "cmdline").read_bytes()
            if any(f"kernelevo.judge.run.{k}".encode() in command for k in kinds) \
                    and any(v.startswith(mine) for v in (entry / "environ").read_bytes().split(b"\0")):
                driver = _parent(int(entry.name))
                if b"kernelevo.judge.run.zygote" in Path(f"/proc/{driver}/cmdline").read_bytes():
                    driver = _parent(driver)
                if not under_ray or Path(f"/proc/{driver}/cmdline").read_bytes().startswith(b"ray::"):
                    found.append((int(entry.name), driver))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _described(pid: int) -> str:
    """A process as `ps` would show it: pid, state, what it waits in, its command line (cut)."""
    try:
        state = _stat(pid)[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError as exc:
        return f"{pid} ({exc.strerror})"
    return f"{pid} {state} in {wchan or '-'}: {command}"


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name: state, parent pid..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int:
    return int(_stat(pid)[1])


def kill_its_ray_worker(killed: set[int], under: Path) -> tuple[int, int]:
    """Wait for a judge worker driven by a Ray worker not killed yet, and SIGKILL that Ray worker
    (as a lost node would end it); (judge worker, Ray worker) pids."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for worker, parent in judge_workers(under, under_ray=True):
            if parent not in killed:
                os.kill(parent, signal.SIGKILL)
                killed.add(parent)
                return worker, parent
        time.sleep(0.2)
    raise AssertionError("no judge worker started on the cluster within 120 s")


def judge_slow_build(cluster, tmp_path, kills: int):
    """A candidate whose build takes 4 s, judged on the cluster while its Ray worker is killed `kills` times."""
    from kernelevo.judge.api import Judge
    from kernelevo.tasks import load_task

    candidate = tmp_path / "slow_build.py"
    candidate.write_text(SLOW_BUILD)
    killed: set[int] = set()
    with Judge(tmp_path / "cache", judge_options(cluster)) as judge:
        future = judge.submit(load_task(TASK), candidate)
        workers = [kill_its_ray_worker(killed, cluster.kernelevo_cache) for _ in range(kills)]
        evaluation = future.result(timeout=300)
        live = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    # This process's Ray job ends here: its idle Ray workers, and the zygotes they keep for their next
    # task (judge/run/ray_executor.py), go with it, as they do when a kernelevo run exits.
    ray.shutdown()
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{w}").exists() for w, _ in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{w}").exists() for w, _ in workers)  # orphaned judge workers follow their parent
    return evaluation, live


def test_a_job_whose_ray_worker_is_killed_is_judged_anyway(cluster, tmp_path):
    evaluation, live = judge_slow_build(cluster, tmp_path, kills=1)
    assert evaluation.verdict == "ok", (evaluation.reason, evaluation.message)
    assert evaluation.node.endswith("/cpu") and evaluation.node_id in live


def test_a_job_lost_twice_gets_a_verdict_not_a_hang(cluster, tmp_path):
    """As a candidate that takes its node down every time would be."""
    evaluation, _ = judge_slow_build(cluster, tmp_path, kills=2)
    assert (evaluation.verdict, evaluation.reason) == ("runtime_error", "node_lost")
    assert "lost the worker judging this candidate 2 times" in evaluation.message


def test_a_ray_error_the_executor_does_not_expect_still_ends_the_jobs_future(monkeypatch):
    """Ray's memory monitor killing a job past its retries (OutOfMemoryError, not a lost node), or any other error
    of ray.get, ends the job's future, with a verdict or the error: before, the thread awaiting it died with it, and
    the search waited forever. (ray.get made to raise: Ray cannot be made to run low on memory on demand here.)"""
    import concurrent.futures
    import threading

    from ray import exceptions as rx

    from kernelevo.judge.run.executor import Spread
    from kernelevo.judge.run.ray_executor import RayExecutor

    executor = object.__new__(RayExecutor)  # its _await alone: no cluster to connect to
    Spread.__init__(executor, ["cpu"])
    executor._lock, executor._refs = threading.Lock(), {}
    memory = rx.OutOfMemoryError("Task was killed due to the node running low on memory.")
    for error in (memory, ValueError("a reply Ray could not read")):
        monkeypatch.setattr(ray, "get", lambda ref, error=error: (_ for _ in ()).throw(error))
        future: concurrent.futures.Future = concurrent.futures.Future()
        executor._count("cpu", 1)
        executor._await("ref", future, "cpu")
        assert future.done() and executor.outstanding["cpu"] == 0
        if error is memory:
            assert (future.result().verdict, future.result().reason) == ("runtime_error", "out_of_memory")
        else:
            assert future.exception() is error

def ray_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--executor", "ray", "--device", "cpu", "--model", "scripted", "--config", str(tmp_path / "kernelevo.toml"),
            "--archive", str(tmp_path / "archive.sqlite"), "--out", str(tmp_path / "out"), "--timing-seconds", "0.2",
            "--trials", "2", "--no-compile-baseline", "--seed", "1", *extra]


def test_optimize_and_bench_on_the_cluster(cluster, tmp_path):
    """One search and one bench over two tasks, through the CLI, judged on the cluster's nodes."""
    server = ScriptedServer(responder=scripted_model())
    try:
        env = dict(environment(server, tmp_path), RAY_ADDRESS=cluster.address)
        done = cli(["optimize", str(TASK), *ray_args(tmp_path, "--generations", "1", "--children", "2",
                                                      "--max-llm-calls", "4")], env)
    finally:
        server.close()
    assert done.returncode in (0, 3), done.stderr[-3000:]
    assert "on a Ray cluster" in " ".join(done.stderr.split())
    suite, candidates = tmp_path / "suite", tmp_path / "candidates"
    suite.mkdir(), candidates.mkdir()
    for name, task, kernel in (("scale", TASK, CPU / "ok_c.py"),
                               ("offset", CPU / "task_offset.py", CPU / "offset_ok_c.py")):
        shutil.copy(task, suite / f"{name}.py")
        shutil.copy(kernel, candidates / f"{name}__ok.py")
    benched = cli(["bench", str(suite), "--candidates", str(candidates), *ray_args(tmp_path)], env)
    assert benched.returncode == 0, benched.stderr[-3000:]
    imported = cli(["archive", "import", str(candidates), "--task", str(suite), "--rejudge", "--executor", "ray",
                    "--device", "cpu", "--archive", str(tmp_path / "imported.sqlite"), "--json", "--trials", "2",
                    "--no-compile-baseline", "--timing-seconds", "0.2"], env)
    assert imported.returncode == 0, imported.stderr[-3000:]
    rejudged = json.loads(imported.stdout)["rejudged"]
    assert sorted(r["verdict"] for r in rejudged) == ["ok", "ok"]
    assert "of the Ray cluster" in " ".join(imported.stderr.split())
    live = {n["NodeID"] for n in ray.nodes() if n["Alive"]} if ray.is_initialized() else None
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
        (run,) = store.runs()
        evaluations = [e for k in store.kernels() for e in store.kernel(k.id).evaluations]
        (bench,) = store.benches()
        rows = store.bench_tasks(bench.id)
    assert run.config["executor"] == "ray" and run.gpu_name.startswith("ray cluster: 2 nodes")
    assert any(e.purpose == "final" and e.verdict == "ok" for e in evaluations)
    nodes = {e.data["node_id"] for e in evaluations if e.data.get("node_id")}
    assert all(e.data["node"].endswith("/cpu") for e in evaluations if e.verdict != "compile_error")
    assert nodes and (live is None or nodes <= live)
    assert [r.verdict for r in rows] == ["ok", "ok"] and bench.config["executor"] == "ray"


def interrupt_once_judging(proc: subprocess.Popen, under: Path, wait_s: float = 300) -> bytes:
    """Send Ctrl-C to `proc` once a judge worker under a Ray worker exists; its stderr. The wait is long: at
    the end of a full suite on 2 busy cores, none had started after 120 s (2026-11-28; alone: 13 s a test)."""
    deadline = time.monotonic() + wait_s
    while not judge_workers(under, under_ray=True) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if not judge_workers(under, under_ray=True):
        # what each judge process was, and was doing, before the run is killed (once at a suite's end on 2
        # cores: one worker, driven by a process that was no Ray worker, and the run still timing its baseline)
        workers = [(_described(pid), _described(driver)) for pid, driver in judge_workers(under, kinds=("worker", "zygote"))]
        ended = proc.poll()
        proc.kill()
        err = proc.communicate(timeout=60)[1].decode()[-2000:]
        state = f"exited {ended}" if ended is not None else "was still going"
        pytest.fail(f"no judge worker under a Ray worker within {wait_s:.0f} s (the run {state}; judge processes "
                    f"under the cache: {workers}); its stderr: {err}")
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=120)[1]


def freed(address: str, resource: str, under: Path) -> tuple[float, float]:
    """Once no judge process is left (workers and their zygotes): (available, total) of `resource` on the
    cluster, waiting up to 20 s for the interrupted jobs' resources to come back."""
    deadline = time.monotonic() + 20
    while judge_workers(under, kinds=("worker", "zygote")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not judge_workers(under, kinds=("worker", "zygote"))
    ray.init(address=address, ignore_reinit_error=True, logging_level="ERROR", log_to_driver=False)
    total = ray.cluster_resources()[resource]
    deadline = time.monotonic() + 20
    while ray.available_resources().get(resource, 0) < total and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray.available_resources().get(resource, 0), total


def test_ctrl_c_leaves_the_cluster_clean(cluster, tmp_path):
    server = ScriptedServer(responder=scripted_model())
    env = dict(environment(server, tmp_path), RAY_ADDRESS=cluster.address)
    exe = Path(sys.executable).parent / "kernelevo"
    # Ctrl-C as a terminal sends it: to a run that can take it. A test run started in the background of a
    # non-interactive shell (`pytest &`) inherits SIGINT ignored, and so would the run, which then never
    # sees the signal; the signal's default is restored in the child before kernelevo starts.
    restore = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    proc = subprocess.Popen([sys.executable, "-c", restore, str(exe), "optimize", str(TASK),
                             *ray_args(tmp_path, "--max-llm-calls", "20")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = interrupt_once_judging(proc, cluster.kernelevo_cache)
    finally:
        proc.kill()
        server.close()
    assert proc.returncode == 130, err.decode()[-2000:]
    assert freed(cluster.address, "CPU", cluster.kernelevo_cache) == (2, 2)
