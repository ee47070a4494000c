"""The model sees what was tried (CPU backend, the real CLI, the scripted server): no prompt is sent
twice, a reply that copied a kernel is named as such in every later prompt, slower edits come back
in the next prompt on their parent with their measured speedups, and the model's account of each
kernel is stored and quoted."""
import itertools
import os
import re
import time

from kernelevo.archive.store import Archive
from kernelevo.text import speedup_text
from llm_server import ScriptedServer, Step, request_text

from test_optimize import GOOD, KERNELS, USAGE, cli, environment, optimize_args

# The slow kernel walking its columns 64 times over: far slower than GOOD however the machine is loaded (with
# one of 2 cores busy, GOOD's OpenMP regions wait for a descheduled thread, and the plain slow kernel, single
# threaded, once measured faster than GOOD: it became the best, and no later prompt was on kernel 1).
SLOW = KERNELS["slow"].replace("    for (int64_t c = 0; c < cols; c++) {",
                               "    for (int rep = 0; rep < 64; rep++)\n    for (int64_t c = 0; c < cols; c++) {")
assert SLOW != KERNELS["slow"]
# Real edits of the slow kernel, each slower than GOOD: not copies (the code changes), never faster.
SLOWER = [SLOW,
          SLOW.replace("y[r * cols + c] = v > 0.0f ? v : 0.0f;", "y[r * cols + c] = v < 0.0f ? 0.0f : v;"),
          SLOW.replace("const float wc = w[c], bc = b[c];", "const float wc = w[c];\n        const float bc = b[c];")
              .replace("x[r * cols + c] * wc + bc", "bc + wc * x[r * cols + c]")]
LINE = re.compile(r"^- kernel (\d+) \((\w+)\): (.*) -> (.*)$", re.M)


def reply(kernel: str, idea: str, delay_s: float = 0.0) -> Step:
    return Step(text=f"The work is one pass over x.\nIdea: {idea}\n\n```python\n{kernel}```\n", usage=USAGE,
                delay_s=delay_s)


def prompts(server) -> list[str]:
    return [request_text(r["body"]) for r in server.requests]


def judged_all(archive_path, limit_s: float = 300.0) -> None:
    """Wait until every kernel stored so far has its verdict, but copies of an earlier one (never judged
    again), or `limit_s` passes."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with Archive.open_readonly(archive_path) as store:
            rows = sorted((k for run in store.runs() for k in store.kernels(run_id=run.id) if k.source),
                          key=lambda k: k.id)
        seen, waiting = set(), False
        for k in rows:
            waiting = waiting or (not k.verdict and k.source_hash not in seen)
            seen.add(k.source_hash)
        if not waiting:
            return
        time.sleep(0.1)


def search(respond, tmp_path, calls: int):
    """optimize on the CPU task, one call at a time, up to `calls` calls; (the server, the CLI's result)."""
    server = ScriptedServer(responder=respond)
    try:
        done = cli(optimize_args(tmp_path, "--max-llm-calls", str(calls), "--generations", "8", "--plateau", "8",
                                 "--concurrency", "1"), environment(server, tmp_path))
    finally:
        server.close()
    assert done.returncode in (0, 3), done.stderr[-3000:]
    return server, done


def test_a_model_that_always_answers_the_same_kernel_is_told_so_and_never_asked_twice(tmp_path):
    # one call at a time: "after the first copy" is then after its reply came back
    server, done = search(lambda body: reply(GOOD, "scale, shift and clamp each row in one pass."), tmp_path, 8)
    sent = prompts(server)
    assert len(sent) >= 4 and len(set(sent)) == len(sent)  # no prompt went out twice
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
        (run,) = store.runs()
        rows = store.kernels(run_id=run.id)
        calls = store.call_yield(run.id)
    copies = [r for r in rows if r.problem.startswith("copy:")]
    assert copies and all("the same code as kernel 1" in r.problem for r in copies)
    first_copy = min(r.llm_call_id for r in copies)  # calls are numbered in the order they were made
    told = "your reply was the same code as kernel 1"
    later = [text for i, text in enumerate(sent, 1) if i > first_copy]
    assert later and all(told in text for text in later), [t.rsplit("# Your job", 1)[-1][:400] for t in later]
    assert sum(row.copies for row in calls.values()) == len(copies)
    assert all(r.account.endswith("Idea: scale, shift and clamp each row in one pass.") for r in rows
               if r.llm_call_id is not None)
    summary = " ".join(done.stdout.split())
    assert "asked once" in summary and "replies copies of a kernel" in summary


def test_slower_edits_come_back_with_their_speedups_in_the_next_prompt_on_their_parent(tmp_path):
    edits = itertools.cycle(enumerate(SLOWER))

    def respond(body: dict) -> Step:
        job = request_text(body).rsplit("# Your job", 1)[-1]
        if "Write `ModelNew` for this task" in job:
            return reply(GOOD, "one pass over each row with the scale and shift in registers.")
        i, kernel = next(edits)
        # a model takes a while to answer: by then the judge has measured the edit before (waited for,
        # not slept for: a busy machine judges slower)
        judged_all(tmp_path / "archive.sqlite")
        return reply(kernel, f"walk the columns in order, variant {i}.")

    server, _ = search(respond, tmp_path, 9)
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
        (run,) = store.runs()
        rows = {r.id: r for r in store.kernels(run_id=run.id)}
    listed = {}
    for text in prompts(server):
        job = text.rsplit("# Your job", 1)[-1]
        if "(c, kernel 1)" in job:  # a prompt that shows kernel 1 (mutate on it, reflect, crossover)
            listed.update({int(k): (op, idea, outcome) for k, op, idea, outcome in LINE.findall(job)
                           if rows[int(k)].parents == (1,)})
    judged = {k: v for k, v in listed.items() if v[2].startswith("correct, ")}
    assert judged, listed  # a later prompt on kernel 1 lists its judged children
    for kernel_id, (op, idea, outcome) in judged.items():
        row = rows[kernel_id]  # (slower edits: how much slower is the machine's business, not this test's)
        assert idea.startswith("walk the columns in order, variant ") and op == row.operator
        assert outcome == f"correct, {speedup_text(row.speedup_eager, row.speedup_eager_ci)} eager"
    # `archive show` lists the attempts on kernel 1, as the prompts do
    out = cli(["archive", "show", "1", "--archive", str(tmp_path / "archive.sqlite")], dict(os.environ))
    text = " ".join(out.stdout.split())
    assert out.returncode == 0 and "attempts on it, newest first:" in text, out.stderr[-2000:]
    assert all(f"kernel {k} (" in text for k in judged)
    assert speedup_text(rows[1].speedup_eager, rows[1].speedup_eager_ci) in text
