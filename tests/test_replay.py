"""A realistic search replayed on the CPU: how every paid reply is spent.

The scripted model answers like a real one: small real edits of a parent, a copy that changes only
comments and layout, a renamed copy, a broken kernel, a slower kernel; then its server goes away
mid-run. The run is checked through the archive and the server's own log: every reply that
changed code was judged, copies were skipped with their reason, no two identical prompts were in
flight at once, tune only worked on the fastest kernels, and the outage stopped the run in a few
calls with its own exit code and one line naming the endpoint."""
import itertools
import re
import threading

from kernelevo.agent import client
from kernelevo.agent.profile_block import FAR
from kernelevo.archive.store import Archive
from kernelevo.evolution.novelty import fingerprints
from kernelevo.evolution.tune import has_tunables
from llm_server import ScriptedServer, Step, request_text
from test_optimize import GOOD, KERNELS, USAGE, cli, environment, optimize_args

CHUNKED = KERNELS["chunked"]
EDITS = {
    "chunked": CHUNKED,
    # comments and layout only: the same code
    "cosmetic": CHUNKED.replace('"""Flat loop', '"""A flat loop').replace("#include <stdint.h>",
                                                                       "#include <stdint.h>  // int64_t")
                       .replace("float v = x[i] * w[c] + b[c];", "float v   =   x[i] * w[c]  +  b[c];"),
    # a real one-line change (no OpenMP): similarity to `chunked` above 0.98, judged all the same
    "serial": CHUNKED.replace("    #pragma omp parallel for schedule(static)\n", ""),
    # the same code with its loop variables renamed
    "renamed": CHUNKED.replace("start", "first").replace("int64_t end", "int64_t last")
                      .replace("i < end", "i < last").replace("? start + CHUNK : n", "? first + CHUNK : n"),
    "broken": CHUNKED.replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v > 0.0f ? v : 0.0f"),
    "slow": KERNELS["slow"],
}
OUTAGE_AT = 12  # the server answers at least this many requests, then goes away
OUTAGE_BY = 28  # ... at the latest (the 6 failures that stop the run fit in --max-llm-calls 40)


def replaying_model(server_box: list, outage: list):
    """The scripted replies; the outage comes with the first request from OUTAGE_AT on once a
    crossover prompt was answered (its number goes to `outage`): whether crossover is drawn within
    a fixed number of calls depends on how fast the judge makes a second kernel correct."""
    translations = itertools.chain([KERNELS["broken"], GOOD], itertools.repeat(GOOD))
    edits = itertools.cycle(EDITS.values())
    answered = itertools.count(1)
    crossed: list = []

    def respond(body: dict) -> Step:
        n = next(answered)
        job = request_text(body).rsplit("# Your job", 1)[-1]
        if "combines their strengths" in job:
            crossed.append(n)
        if not outage and (n >= OUTAGE_AT and crossed or n >= OUTAGE_BY):
            outage.append(n)  # this reply still arrives; the server is gone right after
            threading.Timer(0.1, server_box[0].close).start()
        if "Write `ModelNew` for this task" in job:
            kernel = next(translations)
        elif "This kernel failed the judge" in job:
            kernel = GOOD  # a repair that returns the kernel already judged: a copy
        else:
            kernel = next(edits)
        analysis = "## Analysis\nThe fastest one streams each row once.\n\n## Kernel\n" if "measured kernels" in job else ""
        return Step(text=f"{analysis}Here it is.\n\n```python\n{kernel}```\n", usage=USAGE, delay_s=0.4)
    return respond


def test_replayed_search_spends_every_reply_and_stops_on_an_outage(tmp_path):
    box: list = []
    outage: list = []
    server = ScriptedServer(responder=replaying_model(box, outage))
    box.append(server)
    env = environment(server, tmp_path)
    done = cli(optimize_args(tmp_path, "--islands", "1", "--concurrency", "3", "--generations", "40",
                             "--plateau", "40", "--max-llm-calls", "40"), env)
    server.close()

    # the outage: stopped within a few calls, its own exit code, one line naming the endpoint
    assert done.returncode == 4, done.stderr[-3000:]
    stop_line = [line for line in done.stderr.splitlines() if "model unreachable" in line]
    assert stop_line and server.url.split("//")[1] in "".join(done.stderr.split())
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        (run,) = archive.runs()
        kernels = archive.kernels(run_id=run.id)
        spend = archive.spend(run.id)
        calls = archive.call_yield(run.id)
        details = {k.id: archive.kernel(k.id) for k in kernels}
    answered = len(server.requests)  # up to the outage, and any that arrived before the socket closed
    assert run.status == "stopped" and outage and outage[0] <= answered <= outage[0] + 3
    unreachable = spend.calls - answered
    # STOP_AFTER in a row; calls already on the wire then (up to --concurrency 3) may still fail
    assert client.STOP_AFTER <= unreachable <= client.STOP_AFTER + 2 and spend.failed_calls == unreachable
    assert spend.unknown_cost_calls == 0  # refused connections cost 0, not "unknown"

    # every reply that changed code went to the judge; copies were skipped, each with its reason
    seen: dict[tuple, int] = {}
    for k in sorted(kernels, key=lambda k: k.id):
        if not k.source:
            continue
        prints = fingerprints(k.source)
        earlier = seen.get(prints[0]) or seen.get(prints[1])
        if earlier is None:
            assert k.verdict, (k.id, k.operator, k.problem)  # a real change: judged
            seen.setdefault(prints[0], k.id)
            seen.setdefault(prints[1], k.id)
        else:
            assert not k.verdict and k.problem.startswith(("copy:", "renamed_copy:")), k
    sources = {k.source: k for k in kernels if k.verdict}
    assert EDITS["serial"] in sources  # the small real edit was judged
    assert sources[EDITS["broken"]].verdict == "compile_error"
    problems = {k.problem.split(":")[0] for k in kernels if k.problem}
    assert {"copy", "renamed_copy"} <= problems
    crossed = [frozenset(k.parents) for k in kernels if k.operator == "crossover"]
    assert len(crossed) == len(set(crossed))  # no crossover prompt sent twice

    # yield and share of calls per operator, in the archive and the summary
    assert sum(c.judged for c in calls.values()) == sum(1 for k in kernels if k.verdict and k.operator != "tune")
    assert "calls per operator" in done.stdout and "replies judged" in done.stdout

    # never two identical prompts in flight at once
    requests = server.requests
    for a, b in itertools.combinations(requests, 2):
        if a["body"] == b["body"]:
            assert a["t1"] <= b["t0"] or b["t1"] <= a["t0"], "the same prompt twice in flight"

    # what the prompts showed: approaches in words, eager beside each time, earlier analyses' letters
    jobs = [request_text(r["body"]).rsplit("# Your job", 1)[-1] for r in requests]
    crossovers = [j for j in jobs if "combines their strengths" in j]
    assert crossovers and all("Approach: 1 compiled-function call per forward" in j for j in crossovers)
    assert not any(re.search(r"(?m)^L\d", j) for j in jobs)  # no bare niche codes
    assert any("in the same measurement)" in j for j in jobs)
    with_insights = [j for j in jobs if "What earlier analyses of this task found" in j]
    assert all("Its letters named the kernels of that earlier prompt" in j for j in with_insights)

    # tune worked only on the two fastest tunable kernels known when it started, leaving those its
    # profile puts far from the bound to new replies. Which profiles had come in by then is a race, so
    # what holds whatever the order: of the kernels faster than the parent, at most one (the other of
    # the two) is not far by the end (profiles only add, so far by the end covers far back then)
    searched = {k.id: next(e for e in details[k.id].evaluations if e.purpose == "search")
                for k in kernels if k.verdict == "ok"}  # what the loop saw (the final re-judgement came later)
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        far = {kid for kid, p in archive.profiles(run.id).items()
               if p.sol is not None and p.sol.candidate_pct is not None and p.sol.candidate_pct < FAR}
    tuned = [k for k in kernels if k.operator == "tune"]
    assert tuned, "no tune child in the replay"
    for t in tuned:
        known = sorted((e for kid, e in searched.items() if e.created_at < t.created_at
                        and has_tunables(details[kid].source)), key=lambda e: -e.speedup_eager)
        parent = next(e for e in known if e.kernel_id == t.parents[0])
        faster_near = [e.kernel_id for e in known
                       if e.speedup_eager > parent.speedup_eager and e.kernel_id not in far]
        assert len(faster_near) <= 1, (t.id, t.parents, faster_near, far)
