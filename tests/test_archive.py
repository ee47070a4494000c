"""The archive: a real SQLite file holding real records; durable, append-only where it must be."""
import dataclasses
import signal
import sqlite3
import subprocess
import sys
import threading

import numpy as np
import pytest
from kernelevo.agent.prompting import Context, Target, TaskView
from kernelevo.archive.migrations import MIGRATIONS
from kernelevo.archive.rows import LLM_COLUMNS
from kernelevo.archive.store import Archive
from kernelevo.config import default_archive_path
from kernelevo.evolution.state import RunState
from kernelevo.evaluation import Correctness, Evaluation, TimingStats
from kernelevo.llm_call import LLMCall
from kernelevo.tasks import source_hash

TASK_SOURCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def timing(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, p10_ms=ms * 0.95, p90_ms=ms * 1.05, min_ms=ms * 0.9, mean_ms=ms, n=50,
                       rel_ci=0.01)


def ok_eval(speedup: float) -> Evaluation:
    return Evaluation(verdict="ok", reason="ok", message=f"{speedup:.2f}x faster than eager",
                      task="scale", device="cuda:0", device_name="NVIDIA H100", torch_version="2.5.1",
                      device_s=1.5, wall_s=3.0, correctness=Correctness(trials=5, passed=5),
                      candidate=timing(1.0 / speedup), eager=timing(1.0), compiled=timing(0.8),
                      speedup_eager=speedup, speedup_compile=speedup * 0.8, notes=("l2 flushed",))


def bad_eval(verdict: str = "compile_error", reason: str = "nvrtc_error") -> Evaluation:
    return Evaluation(verdict=verdict, reason=reason, message="error: identifier 'x' is undefined",
                      excerpt="kernel.cu(3): error")


def call(cost: float | None = 0.01, outcome: str = "ok", **kw) -> LLMCall:
    return LLMCall(provider="anthropic", model="claude-sonnet-4-5", operator="mutate", outcome=outcome,
                   input_tokens=1000, cache_read_tokens=200, cache_write_tokens=50, output_tokens=300,
                   reasoning_tokens=100, cost_usd=cost, latency_s=2.5, request_id="req_1",
                   started_at=1.7e9, prompt_hash="ab" * 32, reply="```cuda\n...\n```", stop_reason="end_turn",
                   **kw)


@pytest.fixture
def archive(tmp_path):
    with Archive.open(tmp_path / "deep" / "dir" / "archive.sqlite") as a:
        yield a


@pytest.fixture
def run(archive):
    task_id = archive.add_task("scale", TASK_SOURCE, source_hash(TASK_SOURCE))
    run_id = archive.start_run(task_id, {"model": "fast", "budget": {"usd": 5}}, seed=7, device="cuda:0",
                               gpu_name="NVIDIA H100", torch_version="2.5.1", cuda_version="12.4")
    return task_id, run_id


def test_migrations_recorded_and_reopen_is_noop(tmp_path):
    path = tmp_path / "a.sqlite"
    with Archive.open(path) as a:
        assert a.applied_migrations() == [name for name, _ in MIGRATIONS]
        a.add_task("t", "src", "h1")
    raw = sqlite3.connect(path)
    first = raw.execute("SELECT name, applied_at FROM migrations").fetchall()
    raw.close()
    with Archive.open(path) as a:  # re-open: nothing re-applied, nothing lost
        assert a.task_by_hash("h1").name == "t"
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT name, applied_at FROM migrations").fetchall() == first
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    raw.close()
    assert {"tasks", "runs", "llm_calls", "kernels", "kernel_parents", "evaluations", "reflections",
            "embeddings", "events", "migrations"} <= tables


def test_a_new_archive_is_never_seen_before_its_tables(tmp_path, monkeypatch):
    """A run creating its archive while another process reads it (`archive ls`, a test polling the
    file): while the schema is being made, the file is not there yet; once it is, it reads."""
    from kernelevo.archive.store import connection

    path, migrating, go_on = tmp_path / "a.sqlite", threading.Event(), threading.Event()
    migrate = connection.Store._migrate

    def slow_migrate(self):
        migrating.set()
        assert go_on.wait(30)
        migrate(self)

    monkeypatch.setattr(connection.Store, "_migrate", slow_migrate)
    opened = []
    creator = threading.Thread(target=lambda: opened.append(Archive.open(path)))
    creator.start()
    assert migrating.wait(30)
    with pytest.raises(FileNotFoundError):
        Archive.open_readonly(path)
    go_on.set()
    creator.join(30)
    with Archive.open_readonly(path) as reader:
        assert reader.applied_migrations() == [name for name, _ in MIGRATIONS]
    opened[0].close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite"]  # no partial file left beside it


def test_wal_and_foreign_keys(archive, run):
    raw = sqlite3.connect(archive.path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent, read from the file
    raw.close()
    with pytest.raises(sqlite3.IntegrityError):  # foreign keys on in the archive's own connection
        archive.add_kernel(task_id=9999, source="x", fmt="nvrtc", operator="translate")
    with pytest.raises(sqlite3.IntegrityError):
        archive.add_kernel(task_id=run[0], source="x", fmt="nvrtc", operator="mutate", parents=[4242])
    assert archive.kernels() == []  # the failed transaction left no half-written kernel


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELEVO_ARCHIVE", str(tmp_path / "x.sqlite"))
    assert default_archive_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("KERNELEVO_ARCHIVE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_archive_path() == tmp_path / "data" / "kernelevo" / "archive.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_archive_path() == tmp_path / "home" / ".local" / "share" / "kernelevo" / "archive.sqlite"


def test_tasks_and_runs(archive, run):
    task_id, run_id = run
    assert archive.add_task("renamed", TASK_SOURCE, source_hash(TASK_SOURCE)) == task_id  # idempotent by hash
    assert archive.task_by_hash(source_hash(TASK_SOURCE)).name == "scale"
    assert archive.task_by_hash("nope") is None
    assert len(run_id) == len("r20261122-1530-ab12") and run_id.startswith("r")
    r = archive.run(run_id)
    assert r.config == {"model": "fast", "budget": {"usd": 5}}
    assert (r.status, r.seed, r.gpu_name, r.task_hash) == ("running", 7, "NVIDIA H100",
                                                                      source_hash(TASK_SOURCE))
    archive.finish_run(run_id, "budget", "spent $5.01 of $5.00")
    r = archive.run(run_id)
    assert (r.status, r.stop_reason) == ("budget", "spent $5.01 of $5.00") and r.finished_at
    archive.set_run_status(run_id, "running")  # a resume
    r = archive.run(run_id)
    assert (r.status, r.stop_reason, r.finished_at) == ("running", None, None)
    with pytest.raises(ValueError):
        archive.finish_run(run_id, "exploded", "")
    with pytest.raises(KeyError):
        archive.set_run_status("r-none", "stopped")
    other = archive.add_task("other", "src2", "h2")
    archive.start_run(other, {}, 0, "cpu", "", "2.5.1", "")
    assert [x.id for x in archive.runs(task_id)] == [run_id]
    assert len(archive.runs()) == 2
    assert archive.run("r-none") is None


def test_llm_call_round_trip_all_fields(archive, run):
    fields = [f.name for f in dataclasses.fields(LLMCall)]
    assert sorted(LLM_COLUMNS) == sorted(fields)  # a new LLMCall field needs a column (and a migration)
    c = call(error="")
    call_id = archive.add_llm_call(run[1], c)
    raw = sqlite3.connect(archive.path)
    raw.row_factory = sqlite3.Row
    row = dict(raw.execute("SELECT * FROM llm_calls WHERE id = ?", (call_id,)).fetchone())
    raw.close()
    assert {k: row[k] for k in fields} == c.to_dict()


def test_lineage_of_a_child_with_two_parents(archive, run):
    task_id, run_id = run
    call_id = archive.add_llm_call(run_id, call())
    root = archive.add_kernel(task_id, "root src", "nvrtc", "translate", run_id=run_id, llm_call_id=call_id)
    a = archive.add_kernel(task_id, "a src", "nvrtc", "mutate", run_id=run_id, parents=[root], generation=1)
    b = archive.add_kernel(task_id, "b src", "inline", "repair", run_id=run_id, parents=[root], generation=1,
                           island=1, descriptors={"smem": True}, niche="smem")
    child = archive.add_kernel(task_id, "child src", "nvrtc", "crossover", run_id=run_id, parents=[b, a, b],
                               generation=2, thinking="combine tiling with vector loads")
    k = archive.kernel(child)
    assert k.parents == (b, a)  # order kept, the repeat dropped
    assert k.source_hash == source_hash("child src") and k.evaluations == ()
    assert k.verdict is None and k.thinking.startswith("combine")
    lineage = archive.lineage(child)
    assert [(x.id, x.depth) for x in lineage] == [(a, 1), (b, 1), (root, 2)]
    assert lineage[1].descriptors == {"smem": True} and lineage[2].parents == ()
    assert archive.lineage(root) == []
    assert archive.kernel(12345) is None


def test_failed_operator_outcome_is_a_row(archive, run):
    task_id, run_id = run
    with pytest.raises(ValueError):
        archive.add_kernel(task_id, "", "nvrtc", "mutate", run_id=run_id)  # no source must say why
    k = archive.add_kernel(task_id, "", "nvrtc", "mutate", run_id=run_id, problem="edit_failed")
    row = archive.kernel(k)
    assert (row.source, row.format, row.problem) == ("", "", "edit_failed")
    assert archive.counts(run_id).problems == {"edit_failed": 1}


def test_kernels_best_kernel_and_counts(archive, run):
    task_id, run_id = run
    k1 = archive.add_kernel(task_id, "k1", "nvrtc", "translate", run_id=run_id)
    k2 = archive.add_kernel(task_id, "k2", "nvrtc", "mutate", run_id=run_id, parents=[k1], generation=1)
    k3 = archive.add_kernel(task_id, "k3", "nvrtc", "mutate", run_id=run_id, parents=[k1], generation=3)
    archive.add_evaluation(k1, ok_eval(1.2))
    archive.add_evaluation(k2, ok_eval(2.5), profile={"kernels": [{"name": "k2", "ms": 0.4}]})
    archive.add_evaluation(k3, bad_eval())
    archive.add_evaluation(k1, ok_eval(9.0), purpose="final")  # not a search evaluation: not the best
    assert archive.add_evaluation(k3, ok_eval(1.1), purpose="rejudge")
    best = archive.best_kernel(run_id)
    assert (best.id, best.speedup_eager, best.parents) == (k2, 2.5, (k1,))
    assert best.candidate_ms == pytest.approx(0.4)
    rows = {k.id: k for k in archive.kernels(run_id=run_id)}
    assert rows[k3].verdict == "compile_error" and rows[k3].reason == "nvrtc_error"
    assert rows[k1].speedup_eager == 1.2  # the latest *search* evaluation
    assert [k.id for k in archive.kernels(task_id=task_id)] == [k1, k2, k3]
    full = archive.kernel(k2).evaluations[0]
    assert full.evaluation() == ok_eval(2.5)  # the whole record round-trips
    assert full.profile == {"kernels": [{"name": "k2", "ms": 0.4}]} and full.run_id == run_id
    counts = archive.counts(run_id)
    assert counts.verdicts == {"ok": 2, "compile_error": 1}
    assert counts.operators == {"translate": 1, "mutate": 2}
    assert (counts.max_generation, counts.kernels, counts.evaluations) == (3, 3, 3)
    assert counts.evaluations_by_purpose == {"search": 3, "final": 1, "rejudge": 1}
    other = archive.start_run(task_id, {}, 1, "cpu", "", "", "")
    assert archive.best_kernel(other) is None
    assert archive.counts(other).max_generation is None


def test_spend_keeps_unknown_cost_unknown(archive, run):
    run_id = run[1]
    archive.add_llm_call(run_id, call(cost=0.25))
    archive.add_llm_call(run_id, call(cost=0.5))
    unknown = archive.add_llm_call(run_id, call(cost=None))
    archive.add_llm_call(run_id, call(cost=0.0, outcome="rate_limit", error="429"))
    spend = archive.spend(run_id)
    assert spend.calls == 4 and spend.unknown_cost_calls == 1 and spend.failed_calls == 1
    assert spend.cost_usd == pytest.approx(0.75)
    assert spend.input_tokens == 4000 and spend.output_tokens == 1200
    assert spend.cache_read_tokens == 800 and spend.cache_write_tokens == 200
    raw = sqlite3.connect(archive.path)
    assert raw.execute("SELECT cost_usd FROM llm_calls WHERE id = ?", (unknown,)).fetchone() == (None,)
    raw.close()
    empty = archive.spend("r-no-calls")
    assert empty.calls == 0 and empty.cost_usd == 0.0 and empty.input_tokens == 0


def test_events_are_append_only(archive, run):
    run_id = run[1]
    archive.add_event(run_id, "generation", {"n": 1, "best": 1.2})
    archive.add_event(None, "note", {})
    archive.add_event(run_id, "stop", {"reason": "budget"})
    assert [(e.kind, e.data) for e in archive.events(run_id)] == [
        ("generation", {"n": 1, "best": 1.2}), ("stop", {"reason": "budget"})]
    assert [e.kind for e in archive.events(run_id, kind="stop")] == ["stop"]
    assert len(archive.events()) == 3
    raw = sqlite3.connect(archive.path)
    with pytest.raises(sqlite3.Error, match="append-only"):
        raw.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(sqlite3.Error, match="append-only"):
        raw.execute("DELETE FROM events")
    raw.close()
    assert len(archive.events()) == 3


def test_embeddings_round_trip(archive):
    v = np.array([0.1, -2.5, 3.25, 1e-7], dtype=np.float32)
    archive.put_embedding("kernel", 3, "emb-small", v, "hash-a")
    archive.put_embedding("kernel", 5, "emb-small", [1.0, 2.0, 3.0, 4.0], "hash-b")
    archive.put_embedding("kernel", 3, "emb-large", np.ones(8), "hash-a")
    got = archive.embeddings("kernel", "emb-small")
    assert [i for i, _ in got] == [3, 5]
    assert got[0][1].dtype == np.float32 and got[0][1].shape == (4,)
    assert np.array_equal(got[0][1], v)
    assert [i for i, _ in archive.embeddings("kernel", "emb-small", owner_ids=[5, 99])] == [5]
    archive.put_embedding("kernel", 3, "emb-small", v * 2, "hash-c")  # replaces, not duplicates
    assert np.array_equal(archive.embeddings("kernel", "emb-small", [3])[0][1], v * 2)
    assert archive.embedding_hashes("kernel", "emb-small") == {3: "hash-c", 5: "hash-b"}
    assert archive.embeddings("kernel", "emb-large")[0][1].shape == (8,)
    with pytest.raises(ValueError):
        archive.put_embedding("kernel", 1, "m", np.ones((2, 2)), "h")
    with pytest.raises(ValueError):
        archive.put_embedding("user", 1, "m", [1.0], "h")


def test_similar_tasks_ordering(archive):
    ids = [archive.add_task(f"t{i}", f"src{i}", f"h{i}") for i in range(4)]
    vectors = [[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [-1, 0, 0]]
    for task_id, vec in zip(ids, vectors):
        archive.put_embedding("task", task_id, "m", vec, f"h{task_id}")
    archive.put_embedding("task", ids[2], "other-model", [1, 0, 0], "x")
    ranked = archive.similar_tasks(np.array([1, 0, 0], dtype=np.float32), "m", exclude_task_id=ids[0])
    assert [i for i, _ in ranked] == [ids[1], ids[2], ids[3]]
    assert ranked[0][1] == pytest.approx(0.9 / np.hypot(0.9, 0.1)) and ranked[2][1] == pytest.approx(-1)
    assert [i for i, _ in archive.similar_tasks([1, 0, 0], "m", limit=2)] == [ids[0], ids[1]]
    assert archive.similar_tasks([1, 0], "m") == []  # another dimension is not comparable


def test_stepping_stones_and_reflections(archive, run, tmp_path):
    task_id, run_id = run
    slow = archive.add_kernel(task_id, "slow", "nvrtc", "translate", run_id=run_id)
    fast = archive.add_kernel(task_id, "fast", "nvrtc", "mutate", run_id=run_id, parents=[slow])
    plain = archive.add_kernel(task_id, "plain", "nvrtc", "mutate", run_id=run_id)
    archive.add_evaluation(slow, ok_eval(1.5))
    archive.add_evaluation(fast, bad_eval("timeout", "wall_clock"))
    archive.add_evaluation(fast, ok_eval(3.0), purpose="rejudge")
    archive.add_evaluation(plain, ok_eval(5.0))
    for k in (slow, fast):
        archive.mark_stepping_stone(k, "novel tiling")
    with pytest.raises(KeyError):
        archive.mark_stepping_stone(999, "x")
    other_task = archive.add_task("other", "o", "ho")
    odd = archive.add_kernel(other_task, "odd", "inline", "import", origin="import", claims={"speedup": 4.0})
    archive.mark_stepping_stone(odd, "imported")
    stones = archive.stepping_stones(task_hash=source_hash(TASK_SOURCE))
    assert [(s.id, s.speedup_eager, s.verdict) for s in stones] == [(fast, 3.0, "ok"), (slow, 1.5, "ok")]
    assert stones[0].stepping_stone is True and stones[0].stone_reason == "novel tiling"
    assert stones[0].task_hash == source_hash(TASK_SOURCE) and stones[0].parents == (slow,)
    assert [s.id for s in archive.stepping_stones(task_ids=[other_task])] == [odd]
    assert archive.stepping_stones(task_ids=[other_task])[0].claims == {"speedup": 4.0}
    assert len(archive.stepping_stones()) == 3 and len(archive.stepping_stones(limit=1)) == 1
    assert archive.stepping_stones(task_hash="unknown") == []

    reflect_call = archive.add_llm_call(run_id, call())
    rid = archive.add_reflection(run_id, reflect_call, "fast wins by coalescing", [fast, slow])
    archive.set_reflection_kernel(rid, plain)
    [r] = archive.reflections(task_id=task_id)
    assert (r.variant_ids, r.kernel_id, r.llm_call_id) == ([fast, slow], plain, reflect_call)
    assert archive.reflections(run_id=run_id) == [r] and archive.reflections(task_id=other_task) == []

    # later prompts show the analysis with what its letters named (speedups of the search)
    ctx = Context(TaskView("scale", TASK_SOURCE, "float32[4]", "[]"), Target("c", "cpu"))
    state = RunState(archive, run_id, None, task_id, ctx, tmp_path / "run", "nvrtc")
    [text] = state.context().insights
    assert text == "Written after comparing A = kernel 2 (not measured), B = kernel 1 (1.50x):\nfast wins by coalescing"


def test_readonly_refuses_writes(tmp_path, archive, run):
    archive.add_event(run[1], "x", {})
    ro = Archive.open_readonly(archive.path)
    try:
        assert ro.run(run[1]).status == "running" and len(ro.events(run[1])) == 1
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro.add_event(run[1], "y", {})
        with pytest.raises(sqlite3.OperationalError):
            ro.add_task("t", "s", "h-ro")
    finally:
        ro.close()
    assert len(archive.events(run[1])) == 1
    with pytest.raises(FileNotFoundError):
        Archive.open_readonly(tmp_path / "missing.sqlite")
    sqlite3.connect(tmp_path / "plain.sqlite").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ValueError, match="not a kernelevo archive"):
        Archive.open_readonly(tmp_path / "plain.sqlite")


def test_writes_from_other_threads(archive, run):
    run_id = run[1]
    errors = []

    def worker(n: int) -> None:  # as an LLM worker's on_call callback would
        try:
            for _ in range(25):
                archive.add_llm_call(run_id, call(cost=0.01))
                archive.add_event(run_id, "call", {"worker": n})
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert archive.spend(run_id).calls == 100 and len(archive.events(run_id)) == 100


CHILD = """
import sys
from kernelevo.archive.store import Archive
a = Archive.open(sys.argv[1])
task = a.add_task("t", "src", "hash")
run = a.start_run(task, {}, 0, "cpu", "", "", "")
print(run, flush=True)
n = 0
while True:
    kernel = a.add_kernel(task, f"src {n}", "nvrtc", "mutate", run_id=run)
    a.add_event(run, "kernel", {"id": kernel})
    n += 1
    print(n, flush=True)
"""


def test_sigkill_loses_no_committed_row(tmp_path):
    path = tmp_path / "killed.sqlite"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        committed = 0
        while committed < 200:  # kill it mid-stream, while it is still writing
            line = child.stdout.readline()
            assert line, "the writer exited early"
            committed = int(line)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    with Archive.open(path) as a:
        kernels = a.kernels(run_id=run_id)
        events = a.events(run_id)
        assert len(kernels) >= committed and len(events) >= committed
        assert [k.source for k in kernels[:committed]] == [f"src {n}" for n in range(committed)]
        assert [e.data["id"] for e in events[:committed]] == [k.id for k in kernels[:committed]]


def test_a_call_keeps_its_prompts_form_and_an_archive_from_before_it_still_replays(archive, run):
    """0008: each call's prompt form (agent.client.prompt_form) is stored and read back with the answered calls a
    replay serves. An archive written before 0008, opened for reading only (its schema as it was), still gives them,
    their form unknown ('')."""
    _, run_id = run
    archive.add_llm_call(run_id, call(prompt_form="cd" * 32))
    (answered,) = archive.recorded_replies(run_id)
    assert answered.prompt_form == "cd" * 32 and answered.prompt_hash == "ab" * 32
    archive.close()
    old = sqlite3.connect(archive.path)
    old.execute("ALTER TABLE llm_calls DROP COLUMN prompt_form")
    old.execute("DELETE FROM migrations WHERE name = '0008_call_prompt_form'")
    old.commit()
    old.close()
    with Archive.open_readonly(archive.path) as before:
        (answered,) = before.recorded_replies(run_id)
    assert answered.prompt_form == "" and answered.reply == "```cuda\n...\n```"
