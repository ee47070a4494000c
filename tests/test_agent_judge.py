"""The agent and the judge together: a scripted model returns hand-written kernels for the starter
tasks, `translate` turns the replies into candidates, the judge says ok; a reply that does not
compile goes back to the model through `repair` with the compiler's own message, and the fixed
reply is accepted. On the CPU backend (C kernels) in CI, on every starter task on a GPU."""
from pathlib import Path

import pytest
from kernelevo.agent import operators
from kernelevo.agent.client import LLM
from kernelevo.agent.pool import CallPool
from kernelevo.agent.prompting import Context, feedback_from, target_for, task_view, variant_from
from kernelevo.config import ModelChoice
from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.run.executor import WorkerLimits
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.tasks import load_task
from llm_server import Step

from conftest import FIXTURES, ROOT

TASKS = ROOT / "benchmarks" / "tasks"
STARTER = [(p, TASKS / "candidates" / f"{p.stem}__nvrtc.py") for p in sorted(TASKS.glob("*.py"))]
# Small tasks with their honest C kernels: CI's CPU judges them in seconds.
CPU_PAIRS = [(FIXTURES / "cpu" / "task_scale.py", FIXTURES / "cpu" / "ok_c.py"),
             (FIXTURES / "cpu" / "task_offset.py", FIXTURES / "cpu" / "offset_ok_c.py")]
# A typo per format that the compiler refuses: an undeclared function, an undeclared variable.
BREAK = {"nvrtc": ("expf(", "expff("), "c": ("float v = ", "float v = undeclared_name + ")}


def reply_with(source: str) -> str:
    return f"The plan: one pass per row, fused.\n\n```python\n{source}```\n"


@pytest.fixture
def llm(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    calls = []
    client = LLM(ModelChoice("openai:scripted", overrides=dict(input=1.0, cached_input=0.1, output=2.0)),
                 on_call=calls.append)
    client.server, client.calls = server, calls
    return client


def translate_judge_repair(llm, device: str, fmt: str, pairs: list[tuple[Path, Path]], tmp_path: Path,
                           timing: TimingConfig):
    """Translate every task (the scripted model answers with the paired kernel), judge them all,
    then break the first task's kernel and repair it."""
    tasks = {task.stem: load_task(task) for task, _ in pairs}
    names = list(tasks)
    contexts = {name: Context(task_view(task), target_for(device)) for name, task in tasks.items()}
    for task, kernel in pairs:
        llm.server.steps.append(Step(text=reply_with(kernel.read_text()), usage=dict(input=2000, output=900),
                                     when=f"The task: {task.stem}\\n"))
    with CallPool(cap=4) as pool:  # several translations in flight, as in a real run
        proposals = {name: pool.submit(operators.translate, llm, contexts[name]) for name in names}
        proposals = {name: f.result() for name, f in proposals.items()}
    options = JudgeOptions(devices=(device,), compile_baseline=device != "cpu", timing=timing,
                           limits=WorkerLimits(build=300, run=60), concurrency=4)
    results = {}
    with Judge(tmp_path / "cache", options) as judge:
        futures = {}
        for name, proposal in proposals.items():
            assert proposal.ok, f"{name}: {proposal.problem}"
            path = tmp_path / f"{name}.py"
            path.write_text(proposal.source)
            futures[name] = judge.submit(tasks[name], path)
        results = {name: f.result(timeout=600) for name, f in futures.items()}
        # A reply that does not compile, judged, then repaired with the judge's words.
        name = names[0]
        good = proposals[name].source
        broken = good.replace(*BREAK[fmt], 1)
        assert broken != good
        (tmp_path / "broken.py").write_text(broken)
        failed = judge.evaluate(tasks[name], tmp_path / "broken.py")
        llm.server.steps.append(Step(text=reply_with(good), usage=dict(input=2500, output=900)))
        repaired = operators.repair(llm, contexts[name], variant_from(broken, fmt, failed), feedback_from(failed))
        (tmp_path / "repaired.py").write_text(repaired.source or "")
        fixed = judge.evaluate(tasks[name], tmp_path / "repaired.py")
    return results, failed, repaired, fixed


def check(llm, results, failed, repaired, fixed):
    bad = {name: (e.verdict, e.reason, e.message) for name, e in results.items() if not e.ok}
    assert not bad
    assert failed.verdict == "compile_error" and failed.excerpt
    error_line = next(line for line in failed.excerpt.splitlines() if "error" in line)
    assert error_line.strip() in llm.server.requests[-1]["body"]["messages"][-1]["content"]
    assert repaired.ok and fixed.ok, (fixed.verdict, fixed.reason, fixed.message)
    assert all(c.outcome == "ok" and c.cost_usd > 0 for c in llm.calls)


def test_translate_and_repair_on_the_cpu(llm, tmp_path):
    fast = TimingConfig(min_reps=10, max_seconds=0.3, target_rel_ci=0.05)
    check(llm, *translate_judge_repair(llm, "cpu", "c", CPU_PAIRS, tmp_path, fast))


@pytest.mark.gpu
def test_translate_and_repair_every_starter_task_on_the_gpu(llm, tmp_path):
    starter = sorted(STARTER, key=lambda pair: pair[0].stem != "row_softmax")  # repair: row_softmax
    results, failed, repaired, fixed = translate_judge_repair(llm, "cuda:0", "nvrtc", starter, tmp_path,
                                                               TimingConfig(max_seconds=0.5))
    check(llm, results, failed, repaired, fixed)
    assert len(results) == len(STARTER)  # every starter task
    for name, e in sorted(results.items()):  # the record for the closing note
        print(f"{name}: {e.verdict} {e.speedup_eager:.2f}x eager, {e.speedup_compile or 0:.2f}x compile")
