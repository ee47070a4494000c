"""`kernelevo bench` end to end on the CPU backend: three small tasks searched with the scripted
server (one task whose every reply is broken, one degenerate task), the bench killed with SIGKILL
and resumed, every row and the fast_p figures checked by hand against the archive; then the same
suite scored from given candidate files, the two benches compared, and the suite report in Chromium."""
import json
import math
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import browser
import pytest
from kernelevo.archive.reports.bench_data import P_VALUES
from kernelevo.archive.store import Archive
from llm_server import ScriptedServer, Step, request_text

from conftest import FIXTURES
from test_optimize import GOOD, KERNELS, USAGE, cli, environment

CPU = FIXTURES / "cpu"
# a degenerate task: its output is 10 to float32's precision, whatever its input
OFFSET = (CPU / "offset_ok_c.py").read_text().replace("2e-4f", "1e-9f")
DEGENERATE = (CPU / "task_offset.py").read_text().replace("2e-4", "1e-9")
TASKS = {"copy": CPU / "task_copy.py", "offset": CPU / "task_offset.py", "scale": CPU / "task_scale.py"}


def replies(body: dict) -> Step:
    """scale: the honest kernel, then faster and slower ones; offset: its honest kernel (copies of it
    after the first); copy: nothing that compiles, whatever is asked."""
    text = request_text(body)
    task = text.split("# The task: ", 1)[1].split("\n", 1)[0].strip()
    job = text.rsplit("# Your job", 1)[-1]
    if task == "copy":
        kernel = KERNELS["broken"]
    elif task == "offset":
        kernel = OFFSET
    else:
        kernel = GOOD if "Write `ModelNew` for this task" in job else KERNELS["chunked"]
    analysis = "## Analysis\nThe fastest one streams rows.\n\n## Kernel\n" if "measured kernels" in job else ""
    return Step(text=f"{analysis}Here it is.\n\n```python\n{kernel}```\n", usage=USAGE, delay_s=0.3)


def bench_args(tmp: Path, *extra: str) -> list[str]:
    return ["bench", str(tmp / "suite"), "--device", "cpu", "--model", "scripted", "--config", str(tmp / "kernelevo.toml"),
            "--archive", str(tmp / "archive.sqlite"), "--out", str(tmp / "out"), "--children", "1",
            "--generations", "1", "--max-llm-calls-per-task", "2", "--concurrency", "2", "--timing-seconds", "0.2",
            "--trials", "2", "--no-compile-baseline", "--seed", "1", *extra]


def rows_of(tmp: Path, bench_id: str) -> list:
    with Archive.open_readonly(tmp / "archive.sqlite") as store:
        return store.bench_tasks(bench_id)


@pytest.fixture(scope="module")
def benched(tmp_path_factory):
    """A search bench killed after its first task, then resumed to the end."""
    tmp = tmp_path_factory.mktemp("bench")
    (tmp / "suite").mkdir()
    for name, path in TASKS.items():
        shutil.copy(path, tmp / "suite" / f"{name}.py")
    (tmp / "suite" / "offset.py").write_text(DEGENERATE)
    server = ScriptedServer(responder=replies)
    env = environment(server, tmp)
    exe = Path(sys.executable).parent / "kernelevo"
    proc = subprocess.Popen([str(exe), *bench_args(tmp)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    bench_id = _kill_after_first_task(tmp, proc)
    before = {r.name: r for r in rows_of(tmp, bench_id)}
    done = cli(bench_args(tmp, "--resume", bench_id), env)
    server.close()
    return tmp, env, bench_id, before, done


def _kill_after_first_task(tmp: Path, proc: subprocess.Popen) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if not (tmp / "archive.sqlite").exists():
            continue
        try:
            with Archive.open_readonly(tmp / "archive.sqlite") as store:
                benches = store.benches()
                rows = store.bench_tasks(benches[0].id) if benches else []
        except sqlite3.OperationalError:  # the file is there before its first migration has committed
            continue
        if any(r.status == "done" for r in rows) and any(r.run_id and r.status != "done" for r in rows):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return benches[0].id
    proc.kill()
    pytest.fail(f"the bench never had one task done and one searching: {proc.communicate()[1].decode()[-2000:]}")


def test_every_task_row_after_a_kill_and_resume(benched):
    tmp, env, bench_id, before, done = benched
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r.name: r for r in rows_of(tmp, bench_id)}
    assert [r.status for r in rows.values()] == ["done"] * 3
    first = next(name for name, r in before.items() if r.status == "done")
    assert rows[first].run_id == before[first].run_id  # not redone
    with Archive.open_readonly(tmp / "archive.sqlite") as store:
        runs = store.runs()
        assert sorted(r.task_name for r in runs) == ["copy", "offset", "scale"]  # the killed search resumed
        finals = {name: store.evaluation(r.evaluation_id) for name, r in rows.items() if r.evaluation_id}
    assert rows["copy"].evaluation_id is None and rows["copy"].calls > 0  # every reply broken
    assert rows["offset"].verdict == "ok" and rows["offset"].degenerate  # the mean dwarfs the variation
    assert rows["scale"].verdict == "ok" and not rows["scale"].degenerate
    for name in ("offset", "scale"):
        assert finals[name].purpose == "final" and finals[name].run_id == rows[name].run_id
        assert rows[name].cost_usd > 0 and rows[name].wall_s > 0
    assert "fast_1.0" in done.stdout and bench_id in done.stdout
    assert (tmp / "out" / f"bench_{bench_id}.html").is_file()


def test_a_done_task_judged_again_by_a_fixed_judge(benched, tmp_path):
    """`--again TASK` on a resumed bench: the task's final judgement is made again (a judge fixed since the run
    ended), with no search and no call; its row points to the new judgement, its run keeps its status and stop
    reason, and the other tasks are not touched. (On a copy: the module's bench stays as the other tests read it.)"""
    tmp, env, bench_id, _, _ = benched
    again = tmp_path / "again"
    shutil.copytree(tmp, again)
    server = ScriptedServer(responder=replies)  # asked nothing: a call would be a search
    try:
        env = {**environment(server, again), "KERNELEVO_CACHE_DIR": str(again / "cache")}
        before = {r.name: r for r in rows_of(again, bench_id)}
        with Archive.open_readonly(again / "archive.sqlite") as store:
            run = store.run(before["scale"].run_id)
            calls = store.spend(run.id).calls
        done = cli(bench_args(again, "--resume", bench_id, "--again", "scale"), env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.requests == []
    finally:
        server.close()
    rows = {r.name: r for r in rows_of(again, bench_id)}
    assert rows["scale"].status == "done" and rows["scale"].run_id == run.id
    assert rows["scale"].evaluation_id > before["scale"].evaluation_id and rows["scale"].verdict == "ok"
    assert [(r.evaluation_id, r.wall_s) for n, r in rows.items() if n != "scale"] == \
        [(r.evaluation_id, r.wall_s) for n, r in before.items() if n != "scale"]
    with Archive.open_readonly(again / "archive.sqlite") as store:
        after = store.run(run.id)
        assert (after.status, after.stop_reason) == (run.status, run.stop_reason) and store.spend(run.id).calls == calls
        assert store.evaluation(rows["scale"].evaluation_id).purpose == "final"
        assert [e.data["kernel"] for e in store.events(run.id) if e.kind == "judged_again"] == [rows["scale"].kernel_id]
    wrong = cli(bench_args(again, "--resume", bench_id, "--again", "nosuch"), env)
    assert wrong.returncode != 0 and "--again nosuch: no such task" in wrong.stderr


def test_a_resumed_bench_with_more_calls_goes_on_where_the_cap_stopped(tmp_path):
    """A finished bench resumed with a higher --max-llm-calls-per-task: a task whose search its call cap stopped
    goes on in the same run (the calls it made are not made again), and its row points to the new final; resumed
    again with the same cap, or with a cost cap below what it spent, nothing is reopened and nothing asked."""
    (tmp_path / "suite").mkdir()
    shutil.copy(TASKS["scale"], tmp_path / "suite" / "scale.py")
    server = ScriptedServer(responder=replies)
    try:
        env = environment(server, tmp_path)
        args = [*bench_args(tmp_path, "--generations", "4"), "--max-llm-calls-per-task", "1"]  # the last one counts
        first = cli(args, env)
        assert first.returncode == 0, first.stderr[-3000:]
        with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
            bench_id = store.benches()[0].id
            before = {r.name: r for r in store.bench_tasks(bench_id)}
            assert {store.run(r.run_id).status for r in before.values()} == {"budget"}
        asked = len(server.requests)
        more = cli([*args[:-1], "2", "--resume", bench_id], env)
        assert more.returncode == 0, more.stderr[-3000:]
        assert len(server.requests) == asked + 1  # one call more, none made again
        again = cli([*args[:-1], "2", "--resume", bench_id], env)
        assert again.returncode == 0 and len(server.requests) == asked + 1, again.stderr[-3000:]
        # more calls, but a cost cap below what it spent: it would stop at once, its final made again for nothing
        spent = cli([*args[:-1], "3", "--max-cost-usd-per-task", "0.000001", "--resume", bench_id], env)
        assert spent.returncode == 0 and len(server.requests) == asked + 1, spent.stderr[-3000:]
    finally:
        server.close()
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
        for row in store.bench_tasks(bench_id):
            assert row.status == "done" and row.run_id == before[row.name].run_id
            assert store.spend(row.run_id).calls == 2 and store.run(row.run_id).status == "budget"
            assert row.evaluation_id > before[row.name].evaluation_id


def test_a_judgement_made_again_and_stopped_leaves_its_task_as_it_was(benched, tmp_path, monkeypatch):
    """Stopped while its final judgement is made again, the task is done with its old judgement: left pending, a
    plain resume would have resumed its run as a search, and made calls."""
    from kernelevo.evolution.drivers import bench
    from kernelevo.cli import app
    from kernelevo.evolution.outcome import Interrupted
    from typer.testing import CliRunner

    tmp, _, bench_id, _, _ = benched
    again = tmp_path / "again"
    shutil.copytree(tmp, again)
    before = {r.name: r for r in rows_of(again, bench_id)}

    def stopped(runner, row, device, cap):
        assert row.name == "scale"
        raise Interrupted(row.run_id)

    monkeypatch.setattr(bench, "_search_task", stopped)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    done = CliRunner().invoke(app, bench_args(again, "--resume", bench_id, "--again", "scale"))
    assert done.exit_code == 0, done.output
    after = {r.name: r for r in rows_of(again, bench_id)}
    assert after["scale"].status == "done" and after["scale"].evaluation_id == before["scale"].evaluation_id


def test_fast_p_by_hand(benched):
    tmp, env, bench_id, _, _ = benched
    shown = json.loads(cli(["bench", "show", bench_id, "--json", "--archive", str(tmp / "archive.sqlite")], env).stdout)
    rows = rows_of(tmp, bench_id)
    with Archive.open_readonly(tmp / "archive.sqlite") as store:
        speedups = [store.evaluation(r.evaluation_id).speedup_eager if r.verdict == "ok" else None
                    for r in rows]
    healthy = [s for s, r in zip(speedups, rows) if not r.degenerate]
    for p in P_VALUES:
        assert shown["suite"]["fast_p"]["eager"][str(p)] == sum(1 for s in speedups if s and s > p) / 3
        assert shown["suite"]["fast_p_healthy"]["eager"][str(p)] == sum(1 for s in healthy if s and s > p) / len(healthy)
        assert shown["suite"]["fast_p"]["compile"][str(p)] is None  # torch.compile was not measured: not a 0
    assert shown["suite"]["correct"] == 2 and shown["suite"]["degenerate"] == 1
    assert [t["name"] for t in shown["tasks"]] == ["copy", "offset", "scale"]


def test_each_best_kernels_format_loop_figures_share_of_the_bound_and_tokens_by_hand(benched):
    """The yardstick's per-task figures (issue 52): the best kernel's format and its figures in a loop (the final
    evaluation's host-inclusive twin), its share of the run's speed of light, and the tokens of every call."""
    tmp, env, bench_id, _, _ = benched
    shown = json.loads(cli(["bench", "show", bench_id, "--json", "--archive", str(tmp / "archive.sqlite")], env).stdout)
    tasks = {t["name"]: t for t in shown["tasks"]}
    finals = {r.name: r.evaluation_id for r in rows_of(tmp, bench_id)}
    loops = []
    with Archive.open_readonly(tmp / "archive.sqlite") as store:
        for name, row in tasks.items():
            calls = store._db.read("SELECT input_tokens + cache_read_tokens + cache_write_tokens AS i, output_tokens AS o "
                                "FROM llm_calls WHERE run_id = ?", (row["run_id"],))
            assert (row["input_tokens"], row["output_tokens"]) == (sum(c["i"] for c in calls), sum(c["o"] for c in calls))
            assert row["input_tokens"] > 0 and row["output_tokens"] > 0
            if not row["correct"]:
                assert (row["format"], row["loop_speedup_eager"], row["sol_share"]) == ("", None, None)
                continue
            final = store.evaluation(finals[name]).data
            assert row["format"] == final["format"] == "c"
            assert row["loop_speedup_eager"] == final["loop"]["speedup_eager"] > 0
            loops.append(row["loop_speedup_eager"])
            bound = ([e.data for e in store.events(row["run_id"], "bound")] or [{}])[-1]  # none: no bound measured
            beaten = store.events(row["run_id"], "bound_unreliable") or bound.get("unreliable")
            want = None if beaten or not bound else bound["bound_ms"] / final["candidate"]["median_ms"]
            assert row["sol_share"] == want, (name, bound, beaten)
    suite = shown["suite"]
    assert suite["geomean_loop"]["eager"] == pytest.approx(math.exp(sum(map(math.log, loops)) / len(loops)))
    assert suite["input_tokens"] == sum(t["input_tokens"] for t in tasks.values())


def test_candidates_compare_and_report(benched):
    tmp, env, bench_id, _, _ = benched
    given = tmp / "given"
    given.mkdir()
    shutil.copy(CPU / "ok_c.py", given / "scale__ok.py")
    shutil.copy(CPU / "wrong_math_c.py", given / "scale__wrong.py")
    (given / "offset__ok.py").write_text(OFFSET)
    scored = cli(bench_args(tmp, "--candidates", str(given), "--json"), env)
    assert scored.returncode == 0, scored.stderr[-3000:]
    table = json.loads(scored.stdout)
    rows = {r["name"]: r for r in table["tasks"]}
    assert rows["scale"]["verdict"] == "ok" and rows["offset"]["verdict"] == "ok"
    assert rows["copy"]["status"] == "skipped" and "no candidate file" in rows["copy"]["reason"]
    assert rows["scale"]["calls"] == 0 and table["bench"]["mode"] == "candidates"

    other = table["bench"]["id"]
    compared = cli(["bench", "compare", bench_id, other, "--json", "--archive", str(tmp / "archive.sqlite")], env)
    data = json.loads(compared.stdout)
    assert (data["a"], data["b"]) == (bench_id, other) and len(data["tasks"]) == 3
    assert data["suite"]["b"]["correct"] == 2 and data["tasks"][0]["b"]["status"] == "skipped"
    plain = cli(["bench", "compare", bench_id, other, "--archive", str(tmp / "archive.sqlite")], env)
    assert plain.returncode == 0 and "vs eager, all tasks A" in plain.stdout and "fast_1.2" in plain.stdout

    page = tmp / "suite.html"
    made = cli(["bench", "report", bench_id, "-o", str(page), "--archive", str(tmp / "archive.sqlite")], env)
    assert made.returncode == 0, made.stderr
    if not browser.required():
        pytest.skip("no Chromium here")
    dom = browser.load(page)
    assert dom.count("<tr>") >= 3 + 1 and 'id="curve-eager"' in dom and "degenerate" in dom
    for name in ("offset", "scale", "copy"):
        assert f'reports/{name}_r' in dom  # each task links to its run's report


def test_a_resumed_bench_tries_a_failed_task_again(tmp_path, monkeypatch):
    """A task that failed (an error, not a verdict: its run's folder lost on another machine, a full disk) is
    queued again by a resume, and counts as finished only once this session will not run it."""
    from kernelevo.evolution.drivers import bench as bench_driver
    from kernelevo.evolution.drivers.bench import BenchOptions, _Runner
    from kernelevo.evolution.options import OptimizeOptions

    with Archive.open(tmp_path / "archive.sqlite") as store:
        bench_id = store.start_bench("suite", "search", {}, "cpu", "", [("a.py", "a"), ("b.py", "b"), ("c.py", "c")])
        store.set_bench_task(bench_id, 0, status="done")
        store.set_bench_task(bench_id, 1, status="failed", error="FileNotFoundError: runs/r1/kernels/k4.py")
        search = OptimizeOptions(task_path=tmp_path, models=(), devices=("cpu",), archive_path=tmp_path / "archive.sqlite",
                                 out_dir=tmp_path, cache_dir=tmp_path)
        views = []
        runner = _Runner(store, bench_id, BenchOptions(suite=tmp_path, search=search), views.append, print)
        assert [r.name for r in runner.queue] == ["b", "c"]
        runner._tally()
        assert views[-1].done == 1  # b waits in the queue
        seen = []

        def search_task(runner, row, device, cap):  # b tried again: its row while it runs, then a new error
            seen.append([r for r in store.bench_tasks(bench_id) if r.name == "b"][0])
            raise OSError("disk full")

        monkeypatch.setattr(bench_driver, "_search_task", search_task)
        runner._task(runner.queue[0], "cpu")
        assert (seen[0].status, seen[0].error) == ("running", "")  # not the old error beside 'running'
        assert [r.error for r in store.bench_tasks(bench_id) if r.name == "b"] == ["OSError: disk full"]
        runner.queue.clear()  # as once b has failed again this session
        runner._tally()
        assert views[-1].done == 2
