"""`--model replay:SOURCE` end to end on the CPU: a scripted run is recorded in the archive, then replayed with
no server to reach (the same replies, nothing sent, nothing paid) and a call more allowed than it holds, where
it stops and writes that call's prompt; from a folder holding one reply, with `,then:MODEL`, it goes on with the
scripted server (tested on the replaying model itself). The pieces (spec, folder, matching, resume) are tested
without a run."""
import itertools
import shutil
import socket
from pathlib import Path

import pytest
from kernelevo.agent.client import prompt_form, prompt_hash
from kernelevo.agent.providers import Message
from kernelevo.agent.replay import (Recorded, ReplayEnded, ReplayLLM, ReplaySpec, parse_spec, read_folder,
                                   write_prompt)
from kernelevo.archive.store import Archive
from llm_server import ScriptedServer, kernel_replies
from test_optimize import KERNELS, TASK, USAGE, environment


def _messages(text: str) -> list[Message]:
    return [Message("system", "You write kernels."), Message("user", text)]


def test_a_replay_spec_names_its_source_and_what_goes_on_after_it():
    assert parse_spec("openai:gpt-5") is None
    spec = parse_spec("replay:r20261129-1200-ab12,then:scripted")
    assert (spec.source, spec.then) == ("r20261129-1200-ab12", "scripted")
    assert parse_spec("replay:rounds/prompts").then == ""
    with pytest.raises(ValueError, match="replay:SOURCE needs"):
        parse_spec("replay:")


def test_each_operator_gets_its_own_recorded_replies_in_order_the_same_prompt_first(tmp_path):
    recorded = [Recorded(1, "translate", "T1", prompt_hash(_messages("a"))), Recorded(2, "mutate", "M1", prompt_hash(_messages("m1"))),
                Recorded(3, "mutate", "M2", prompt_hash(_messages("m2"))), Recorded(4, "translate", "T2")]
    calls = []
    llm = ReplayLLM(parse_spec("replay:r1"), recorded, tmp_path / "prompts")
    llm.on_call = calls.append
    assert llm.ask("mutate", _messages("m2")).text == "M2"  # its own prompt, though M1 came first
    assert llm.ask("translate", _messages("a")).text == "T1"
    assert llm.ask("mutate", _messages("other")).text == "M1"
    assert llm.ask("translate", _messages("changed")).text == "T2"
    assert [c.provider for c in calls] == ["replay"] * 4 and {c.cost_usd for c in calls} == {0.0}
    assert llm.served == 4 and llm.changed == 1  # M1 went to another prompt; T2 had none: not counted
    with pytest.raises(ReplayEnded, match=r"replay ended at call 5 \(mutate\)"):
        llm.ask("mutate", _messages("next"))
    written = tmp_path / "prompts" / "0005.prompt.md"
    assert written.is_file() and "next" in written.read_text()
    with pytest.raises(ReplayEnded):  # ended: no second prompt is written
        llm.ask("translate", _messages("after"))
    assert sorted(p.name for p in (tmp_path / "prompts").iterdir()) == ["0005.prompt.md"]


def test_a_folder_round_trip_matches_a_reply_to_the_prompt_written_for_it(tmp_path):
    folder = tmp_path / "task_scale"
    path = write_prompt(folder, 1, "translate", "c", _messages("write a kernel"))
    path.with_name("0001.reply.md").write_text("the answer")
    (folder / "notes.reply.md").write_text("not numbered: not a reply")
    (found,) = read_folder(folder)
    assert (found.number, found.operator, found.reply) == (1, "translate", "the answer")
    assert found.prompt_hash == prompt_hash(_messages("write a kernel"))
    assert found.prompt_form == prompt_form(_messages("write a kernel"))
    assert read_folder(tmp_path / "missing") == []


def test_a_reply_served_to_its_prompt_with_other_figures_is_told_from_one_served_to_another_prompt(tmp_path):
    """A search run again asks the same prompts with other measured figures (each of the yardstick's rounds did);
    the prompt's form leaves its numbers out, so the replay counts the replies that went to another prompt. A
    prompt file written before the header named its form gets the form of the body it holds."""
    first = _messages("kernel 12 runs in 0.1283 ms, 1.52x torch.compile; make it faster")
    again = _messages("kernel 14 runs in 0.1291 ms, 1.49x torch.compile; make it faster")
    other = _messages("kernel 12 is incorrect at index 3; repair it")
    assert prompt_form(first) == prompt_form(again) != prompt_form(other)
    folder = tmp_path / "prompts"
    for number, messages in ((1, first), (2, first)):
        write_prompt(folder, number, "mutate", "triton", messages).with_name(f"{number:04d}.reply.md").write_text(f"R{number}")
    old = folder / "0002.prompt.md"  # as files were written before the form: no form= in its header
    old.write_text(old.read_text().replace(f" form={prompt_form(first)}", ""))
    recorded = read_folder(folder)
    assert [r.prompt_form for r in recorded] == [prompt_form(first)] * 2
    calls = []
    llm = ReplayLLM(parse_spec("replay:r1"), recorded, tmp_path / "next")
    llm.on_call = calls.append
    assert [llm.ask("mutate", again).text, llm.ask("mutate", other).text] == ["R1", "R2"]
    assert (llm.served, llm.changed, llm.reshaped) == (2, 2, 1)
    assert "2 of them to a prompt that has changed since (1 in more than its figures)" in llm.note()
    assert [c.prompt_form for c in calls] == [prompt_form(again), prompt_form(other)]  # stored with each call


def _search(tmp_path, monkeypatch, server, model: str = "scripted", calls: int = 2, offline: bool = False,
            concurrency: int = 1, generations: int = 1):
    """A small search (`calls` calls, `concurrency` at a time, at most `generations` of 4 children) of `model` on the
    CPU, in this process, where the judge's zygote serves every run: (its outcome, its calls as the archive holds
    them)."""
    from kernelevo.evolution.budget import BudgetLimits
    from kernelevo.evolution.loop import optimize
    from kernelevo.config import load_config
    from kernelevo.evolution.options import OptimizeOptions, SearchSettings
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    for key, value in environment(server, tmp_path).items():
        monkeypatch.setenv(key, value)
    if offline:  # nothing listens there: a call that went out would fail
        monkeypatch.setenv("OPENAI_BASE_URL", _unreachable_url())
    options = OptimizeOptions(task_path=TASK, models=(model,), devices=("cpu",), archive_path=tmp_path / "archive.sqlite",
                              out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                              config=load_config(tmp_path / "kernelevo.toml"),
                              judge=JudgeOptions(seed=1, trials=2, timing=TimingConfig(max_seconds=0.2), compile_baseline=False, bounds="off"),
                              settings=SearchSettings(children_per_generation=4, llm_concurrency=concurrency),
                              budget=BudgetLimits(max_llm_calls=calls, generations=generations, plateau_generations=9))
    outcome = optimize(options)
    return outcome, _calls(tmp_path / "archive.sqlite", outcome.run_id)


def _unreachable_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def _calls(archive_path, run_id: str) -> list[dict]:
    with Archive.open_readonly(archive_path) as archive:
        return archive._db.read("SELECT provider, operator, reply, cost_usd FROM llm_calls WHERE run_id = ? ORDER BY id",
                             (run_id,))


def test_a_recorded_run_replays_without_a_server_and_a_missing_reply_ends_it_or_goes_on(tmp_path, monkeypatch):
    from kernelevo.cli.views.progress import summary_rows
    from kernelevo.evolution.outcome import EXIT_BUDGET

    k = KERNELS
    server = ScriptedServer(responder=kernel_replies(itertools.chain([k["broken"]], itertools.repeat(k["good"])),
                                                     itertools.repeat(k["chunked"]), k["good"], USAGE))
    try:
        recorded, original = _search(tmp_path, monkeypatch, server)
        assert len(original) == 2 and all(c["provider"] == "openai" for c in original)

        # 1. the recording alone, no server to reach, a call more allowed than it holds: the same replies, nothing
        # paid, and at the third call the replay ends and writes that call's prompt
        replayed, again = _search(tmp_path, monkeypatch, server, f"replay:{recorded.run_id}", calls=3, offline=True)
        assert [(c["operator"], c["reply"]) for c in again] == [(c["operator"], c["reply"]) for c in original]
        assert {c["provider"] for c in again} == {"replay"} and {c["cost_usd"] for c in again} == {0.0}
        assert replayed.exit_code == EXIT_BUDGET and replayed.reason.startswith("replay ended at call 3")
        shown = dict(summary_rows(replayed))
        assert "2 of them replayed" in shown["LLM calls"] and shown[f"replay replay:{recorded.run_id}"]
        (prompt,) = (tmp_path / "out" / "prompts" / "task_scale").glob("0003.prompt.md")
        assert "kernelevo prompt: operator=" in prompt.read_text()
    finally:
        server.close()


def test_a_replay_asks_each_call_once_every_earlier_kernel_is_judged(tmp_path, monkeypatch):
    """A recorded reply comes back at once, where the model took a minute: with two calls allowed at a time, the
    replay still asks each call only once the kernels of the calls before it are judged, so that its prompt
    carries their verdicts (a replay raced ahead and its prompt left out the best kernel, still on the judge)."""
    k = KERNELS
    serial = k["chunked"].replace("    #pragma omp parallel for schedule(static)\n", "")  # a real change: judged
    wider = serial.replace("CHUNK 4096", "CHUNK 8192")
    assert len({k["good"], k["slow"], k["chunked"], serial, wider}) == 5
    translations = itertools.chain([k["good"], k["slow"]], itertools.repeat(k["good"]))
    edits = itertools.chain([k["chunked"], serial, wider], itertools.repeat(k["chunked"]))
    server = ScriptedServer(responder=kernel_replies(translations, edits, k["good"], USAGE))
    try:
        # the call cap ends both runs: a `tune` child (no call) counts toward a generation, and where the search drew
        # one (as it does depending on what is judged when it plans), one generation of 4 children ended it at 3 calls
        recorded, original = _search(tmp_path, monkeypatch, server, calls=4, generations=4)
        replayed, again = _search(tmp_path, monkeypatch, server, f"replay:{recorded.run_id}", calls=4, offline=True,
                                  concurrency=2, generations=4)
        assert len(original) == 4, (original, recorded.reason)
        assert len(again) == 4 and {c["provider"] for c in again} == {"replay"}, replayed.reason
        with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
            asked = archive._db.read("SELECT id, started_at FROM llm_calls WHERE run_id = ? ORDER BY id",
                                     (replayed.run_id,))
            judged = archive._db.read("SELECT k.llm_call_id AS call, MIN(e.created_at) AS at FROM kernels k "
                                      "JOIN evaluations e ON e.kernel_id = k.id WHERE k.run_id = ? "
                                      "AND k.llm_call_id IS NOT NULL GROUP BY k.id", (replayed.run_id,))
        assert judged and all(j["at"] <= c["started_at"] for c in asked for j in judged if j["call"] < c["id"])
    finally:
        server.close()

    from types import SimpleNamespace
    from kernelevo.evolution.ensemble import Ensemble

    alone = ReplayLLM(ReplaySpec("x"), [Recorded(1, "", "a reply")], tmp_path / "prompts")
    then = ReplayLLM(ReplaySpec("x", "m"), [Recorded(1, "", "a reply")], tmp_path / "prompts",
                     then=SimpleNamespace(edit_format="whole", choice=None, label="m"))
    assert alone.instant and then.instant and Ensemble({"r": alone}).instant  # a recorded reply comes at once
    for llm in (alone, then):
        llm.ask("translate", _messages("write a kernel"))
    assert alone.instant and not then.instant  # the replay's end comes at once; the model after it takes its time
    other = ReplayLLM(ReplaySpec("x"), [Recorded(1, "mutate", "a mutation")], tmp_path / "prompts")
    assert other.ask("crossover", _messages("combine them")).text == "a mutation"  # no paid reply left unserved


def test_past_its_recording_a_replay_goes_on_with_the_model_it_names(tmp_path, monkeypatch):
    """`replay:FOLDER,then:scripted`: the folder's one reply, then the scripted server through the real SDK."""
    from kernelevo.config import load_config
    from kernelevo.evolution.replays import ReplayPlace, member

    server = ScriptedServer(responder=kernel_replies(itertools.repeat(KERNELS["good"]), itertools.repeat(KERNELS["chunked"]),
                                                     KERNELS["good"], USAGE))
    try:
        for key, value in environment(server, tmp_path).items():
            monkeypatch.setenv(key, value)
        folder = tmp_path / "replies" / "task_scale"
        write_prompt(folder, 1, "translate", "c", _messages("recorded elsewhere"))
        (folder / "0001.reply.md").write_text("recorded")
        place = ReplayPlace("task_scale", tmp_path / "archive.sqlite", tmp_path / "prompts")
        llm = member(parse_spec(f"replay:{tmp_path / 'replies'},then:scripted"), load_config(tmp_path / "kernelevo.toml"),
                     place)
        calls = []
        llm.on_call = calls.append
        assert llm.ask("translate", _messages("write a kernel")).text == "recorded"
        went_on = llm.ask("translate", _messages("write another"))
        assert "ModelNew" in went_on.text and len(server.requests) == 1
        assert [c.provider for c in calls] == ["replay", "openai"] and calls[1].cost_usd > 0
        assert llm.label == "replay:" + str(tmp_path / "replies") + ",then:scripted"
        assert not (tmp_path / "prompts").exists()  # nothing ended: no prompt written
    finally:
        server.close()


def test_a_resumed_replay_is_not_served_again_what_its_run_was_served(tmp_path):
    """The run being resumed holds its replayed calls (request id replay:SOURCE#N): those replies are left out, and
    the call where the recording ends is numbered after them."""
    from kernelevo.config import Config
    from kernelevo.evolution.replays import ReplayPlace, member
    from kernelevo.llm_call import LLMCall

    archive_path = tmp_path / "archive.sqlite"
    with Archive.open(archive_path) as archive:
        task = archive.add_task("task_scale", "source", "hash")
        recorded = archive.start_run(task, {}, 1, "cpu", "", "", "")
        for op, reply in (("translate", "T1"), ("mutate", "M1"), ("translate", "T2")):
            archive.add_llm_call(recorded, LLMCall(provider="openai", model="gpt-5", operator=op, outcome="ok", reply=reply))
        resumed = archive.start_run(task, {}, 1, "cpu", "", "", "")
        archive.add_llm_call(resumed, LLMCall(provider="replay", model=recorded, operator="translate", outcome="ok",
                                              reply="T1", request_id=f"replay:{recorded}#1"))
    place = ReplayPlace("task_scale", archive_path, tmp_path / "prompts", resumed)
    llm = member(parse_spec(f"replay:{recorded}"), Config(), place)
    assert llm.ask("translate", _messages("again")).text == "T2"
    assert llm.ask("mutate", _messages("m")).text == "M1"
    with pytest.raises(ReplayEnded, match="replay ended at call 4"):
        llm.ask("translate", _messages("past the end"))
    assert (tmp_path / "prompts" / "0004.prompt.md").is_file()
    with pytest.raises(ValueError, match="searched task 'task_scale', not 'other'"):
        member(parse_spec(f"replay:{recorded}"), Config(), ReplayPlace("other", archive_path, tmp_path))


def test_a_resumed_replay_from_a_folder_copied_elsewhere_is_not_served_again_what_it_was_served(tmp_path):
    """The yardstick's rounds copy the folder of replies to a new place each round, so the run being resumed was
    served from another path: its replies are still known by their text (a text served once leaves out one copy),
    and the next calls get the replies not served yet, not the first ones again."""
    from kernelevo.config import Config
    from kernelevo.evolution.replays import ReplayPlace, member
    from kernelevo.llm_call import LLMCall

    folder = tmp_path / "round2" / "prompts"
    for number, op, reply in ((1, "translate", "T1"), (2, "translate", "same"), (3, "mutate", "same"),
                              (4, "mutate", "M2")):
        write_prompt(folder / "task_scale", number, op, "", _messages(f"p{number}"))
        (folder / "task_scale" / f"{number:04d}.reply.md").write_text(reply)
    archive_path = tmp_path / "archive.sqlite"
    with Archive.open(archive_path) as archive:
        task = archive.add_task("task_scale", "source", "hash")
        resumed = archive.start_run(task, {}, 1, "cpu", "", "", "")
        for n, op, reply in ((1, "translate", "T1"), (2, "translate", "same")):
            archive.add_llm_call(resumed, LLMCall(provider="replay", model="x", operator=op, outcome="ok", reply=reply,
                                                  request_id=f"replay:{tmp_path / 'round1' / 'prompts'}#{n}"))
    llm = member(parse_spec(f"replay:{folder}"), Config(), ReplayPlace("task_scale", archive_path, tmp_path / "out",
                                                                        resumed))
    assert llm.ask("mutate", _messages("m")).text == "same"  # its own copy of the text, not yet served
    assert llm.ask("mutate", _messages("m")).text == "M2"
    with pytest.raises(ReplayEnded, match="replay ended at call 5"):
        llm.ask("translate", _messages("past the end"))


def test_a_bench_replayed_in_rounds_waits_for_each_answer_and_goes_on_from_it(tmp_path):
    """A suite searched by replay rounds, as the yardstick runs: no reply recorded yet, so the task's run stops at its
    first call with that prompt written, waiting (no final, the bench row pending); answered, `--resume` serves the
    answer (judged once, not again) and waits at the next call; answered again, the task's two calls are spent and it
    finishes with its best re-judged. Nothing is sent anywhere: there is no server."""
    import dataclasses
    
    from kernelevo.archive.reports.bench_data import bench_table
    from kernelevo.config import Config
    from kernelevo.evolution.budget import BudgetLimits
    from kernelevo.evolution.drivers.bench import BenchOptions, run_bench
    from kernelevo.evolution.options import OptimizeOptions, SearchSettings
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    (tmp_path / "suite").mkdir()
    shutil.copy(TASK, tmp_path / "suite" / "scale.py")
    prompts = tmp_path / "out" / "prompts" / "scale"
    search = OptimizeOptions(task_path=TASK, models=(f"replay:{tmp_path / 'out' / 'prompts'}",), devices=("cpu",),
                             archive_path=tmp_path / "archive.sqlite", out_dir=tmp_path / "out",
                             cache_dir=tmp_path / "cache", config=Config(),
                             judge=JudgeOptions(seed=1, trials=2, timing=TimingConfig(max_seconds=0.2), compile_baseline=False, bounds="off"),
                             settings=SearchSettings(children_per_generation=1, llm_concurrency=1),
                             budget=BudgetLimits(max_llm_calls=2, plateau_generations=9))
    first = run_bench(BenchOptions(suite=tmp_path / "suite", search=search))
    assert (first.status, first.waiting) == ("stopped", 1)
    assert sorted(p.name for p in prompts.iterdir()) == ["0001.prompt.md"]

    def row() -> dict:
        with Archive.open_readonly(tmp_path / "archive.sqlite") as store:
            (found,) = store.bench_tasks(first.bench_id)
            return dataclasses.asdict(found) | {"finals": store._db.read("SELECT COUNT(*) AS n FROM evaluations WHERE purpose = 'final'")[0]["n"],
                            "kernels": store._db.read("SELECT COUNT(*) AS n FROM kernels")[0]["n"]}

    waiting = row()
    assert (waiting["status"], waiting["run_status"], waiting["finals"], waiting["calls"]) == ("pending", "stopped", 0, 0)
    assert waiting["stop_reason"].startswith("replay ended at call 1 (translate)")

    resumed = dataclasses.replace(BenchOptions(suite=tmp_path / "suite", search=search), resume=first.bench_id)
    (prompts / "0001.reply.md").write_text(f"Idea: scale in one pass.\n\n```python\n{KERNELS['good']}```\n")
    second = run_bench(resumed)
    assert (second.status, second.waiting) == ("stopped", 1)
    assert sorted(p.name for p in prompts.glob("*.prompt.md")) == ["0001.prompt.md", "0002.prompt.md"]
    middle = row()
    assert (middle["status"], middle["run_id"], middle["calls"], middle["kernels"]) == ("pending", waiting["run_id"], 1, 1)
    assert middle["stop_reason"].startswith("replay ended at call 2")
    with Archive.open_readonly(tmp_path / "archive.sqlite") as store:  # its best so far, though nothing is final
        (shown,) = bench_table(store, first.bench_id)["tasks"]
        latest = store._db.read("SELECT speedup_eager FROM evaluations ORDER BY id DESC LIMIT 1")[0]  # its re-measurement
    assert shown["search_speedup_eager"] == latest["speedup_eager"] > 0 and shown["speedup_eager"] is None

    (prompts / "0002.reply.md").write_text(f"Idea: the same, in chunks.\n\n```python\n{KERNELS['chunked']}```\n")
    third = run_bench(resumed)
    assert (third.status, third.waiting) == ("finished", 0)
    done = row()
    assert (done["status"], done["run_id"], done["calls"], done["replayed"]) == ("done", waiting["run_id"], 2, 2)
    assert done["finals"] >= 1 and done["verdict"] == "ok" and done["kernels"] == 2
    assert sorted(p.name for p in prompts.glob("*.prompt.md")) == ["0001.prompt.md", "0002.prompt.md"]


def test_a_waiting_replay_ends_where_it_is_when_resumed_with_the_calls_it_made(tmp_path, monkeypatch):
    """`optimize` on a folder holding one reply and a cap of 2 waits at call 2 (stopped, nothing re-judged, nothing
    written); resumed with the cap at the one call it made, its folder gone, it stops on its budget and writes its
    best, re-judged from the source the archive holds."""
    import dataclasses

    from kernelevo.evolution.budget import BudgetLimits
    from kernelevo.evolution.loop import optimize
    from kernelevo.evolution.outcome import EXIT_BUDGET

    folder, options = _one_reply_and_a_cap_of_two(tmp_path)
    waiting = optimize(options)
    assert waiting.waiting and waiting.exit_code == EXIT_BUDGET and waiting.best is None and waiting.written is None
    assert waiting.reason.startswith("replay ended at call 2")
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        assert archive.run(waiting.run_id).status == "stopped"
    shutil.rmtree(tmp_path / "runs")  # resumed on another machine: the run's kernel files are the archive's alone
    ended = optimize(dataclasses.replace(options, resume=waiting.run_id, budget=BudgetLimits(max_llm_calls=1)))
    assert not ended.waiting and ended.reason.startswith("max-llm-calls") and ended.best.verdict == "ok"
    assert ended.written.is_file() and ended.run_id == waiting.run_id
    assert [c["provider"] for c in _calls(tmp_path / "archive.sqlite", ended.run_id)] == ["replay"]


def test_a_resumed_replay_asks_first_the_call_it_waited_at(tmp_path, monkeypatch):
    """The answer to the prompt a replay stopped at is served to that call: resumed, the search asks the same
    operator on the same parents first, though its own draw would now be another operator (a resumed search
    once drew a crossover where a mutation's answer waited, and the answer went unserved)."""
    import dataclasses

    from kernelevo.evolution import scheduling
    from kernelevo.evolution.loop import optimize

    folder, options = _one_reply_and_a_cap_of_two(tmp_path)
    waiting = optimize(options)
    assert waiting.waiting and waiting.reason.startswith("replay ended at call 2")
    header = Path(waiting.reason.split("its prompt is in ")[1]).read_text().splitlines()[0]
    op = header.split("operator=")[1].split()[0]
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        (event,) = archive.events(waiting.run_id, kind="waits_for")
    assert event.data["op"] == op and event.data["calls"] == 1

    (folder / "0002.reply.md").write_text(f"Idea: the same, in chunks.\n\n```python\n{KERNELS['chunked']}```\n")
    other = "mutate" if op == "translate" else "translate"  # what the resumed search would draw instead
    monkeypatch.setattr(scheduling, "choose_operator", lambda *args, **kwargs: other)
    ended = optimize(dataclasses.replace(options, resume=waiting.run_id))
    assert not ended.waiting and ended.reason.startswith("max-llm-calls"), ended.reason
    assert [c["operator"] for c in _calls(tmp_path / "archive.sqlite", ended.run_id)] == ["translate", op]
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        child = [k for k in archive.kernels(run_id=ended.run_id) if k.operator == op and k.source][-1]
    assert child.parents == tuple(event.data["parents"])


def _one_reply_and_a_cap_of_two(tmp_path):
    """A replay folder holding one answered translation, and `optimize`'s options with a cap of 2 calls: the run
    waits at call 2."""
    from kernelevo.config import Config
    from kernelevo.evolution.budget import BudgetLimits
    from kernelevo.evolution.options import OptimizeOptions, SearchSettings
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    folder = tmp_path / "replies" / "task_scale"
    write_prompt(folder, 1, "translate", "c", _messages("recorded elsewhere"))
    (folder / "0001.reply.md").write_text(f"Idea: scale in one pass.\n\n```python\n{KERNELS['good']}```\n")
    return folder, OptimizeOptions(
        task_path=TASK, models=(f"replay:{tmp_path / 'replies'}",), devices=("cpu",),
        archive_path=tmp_path / "archive.sqlite", out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
        config=Config(),
        judge=JudgeOptions(seed=1, trials=2, timing=TimingConfig(max_seconds=0.2), compile_baseline=False, bounds="off"),
        settings=SearchSettings(children_per_generation=1, llm_concurrency=1),
        budget=BudgetLimits(max_llm_calls=2, plateau_generations=9))
