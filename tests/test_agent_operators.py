"""Operators end to end on the real SDKs against the scripted server: prompts out, candidates and
call records back, with the failures a real model and a real API produce."""
import time
import warnings

import pytest
from kernelevo.agent import operators
from kernelevo.agent.client import LLM, Stop
from kernelevo.agent.pool import CallPool
from kernelevo.agent.prompting import Context, Target, TaskView
from kernelevo.evaluation import Failure
from kernelevo.config import ModelChoice
from conftest import variant_of
from llm_server import Step, request_text

PRICES = dict(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)
CTX = Context(TaskView("scale", "class Model: ...\n", "float32[8]", "[2.0]"), Target("c", "test CPU", cores=4))
PARENT = '''import torch
import torch.nn as nn

SRC = r"""
#define CHUNK 64  // tune: 32 64
void run(const float* x, float* out, long n) { for (long i = 0; i < n; ++i) out[i] = x[i] * 2.0f; }
"""


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''
WHOLE = "Here it is.\n\n```python\n" + PARENT + "```\n"


def sent(request: dict) -> str:
    return request_text(request["body"])


@pytest.fixture(params=["openai", "anthropic"])
def make_llm(request, server, monkeypatch):
    """LLM clients of each protocol pointed at the server; calls are collected as they arrive."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    protocol = request.param

    def make(edit_format="whole", prices=PRICES, model="m-test", **settings):
        calls = []
        overrides = dict(prices, edit_format=edit_format)
        settings.setdefault("timeout_s", 5.0)
        llm = LLM(ModelChoice(f"{protocol}:{model}", overrides=overrides, **settings),
                  on_call=calls.append, max_retries=0)
        llm.calls = calls
        return llm

    make.protocol = protocol
    return make


def test_translate_whole_file_and_its_cost(server, make_llm):
    server.steps.append(Step(text=WHOLE, usage=dict(input=1000, cache_read=4000, cache_write=2000, output=500)))
    llm = make_llm()
    proposal = operators.translate(llm, CTX)
    assert proposal.ok and proposal.source == PARENT
    (call,) = llm.calls
    assert call.outcome == "ok" and call.operator == "translate" and call.reply == WHOLE
    assert (call.input_tokens, call.cache_read_tokens, call.cache_write_tokens) == (1000, 4000, 2000)
    expected = (1000 * 3.0 + 4000 * 0.3 + 2000 * 3.75 + 500 * 15.0) / 1e6
    if make_llm.protocol == "anthropic":
        turns = server.requests[0]["body"]["messages"]
        assert len(turns) == 1 and turns[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" not in turns[0]["content"][1]  # the job is after the cached prefix
    assert call.cost_usd == pytest.approx(expected) and proposal.cost_usd == pytest.approx(expected)
    assert call.request_id == "req-1" and call.prompt_hash and call.latency_s > 0


def test_reply_without_code_is_an_outcome(server, make_llm):
    server.steps.append(Step(text="<think>hmm</think>I would fuse the loops, but I am not sure."))
    proposal = operators.translate(make_llm(), CTX)
    assert proposal.outcome == "no_code" and proposal.source is None
    assert proposal.problem == "the reply has no code block" and proposal.thinking == "hmm"


def test_repair_sends_the_judges_words_and_applies_edits(server, make_llm):
    edit = ("The loop reads past the end.\n\n<<<<<<< SEARCH\n        return x\n=======\n"
            "        return x * 2\n>>>>>>> REPLACE\n")
    server.steps.append(Step(text=edit, usage=dict(input=10, output=5)))
    feedback = Failure("compile_error", "compile_error", "the C compiler refused the source",
                       excerpt="candidate.c:2:5: error: 'lon' undeclared")
    proposal = operators.repair(make_llm("diff"), CTX, variant_of(PARENT, "c"), feedback)
    assert proposal.ok and proposal.edited and proposal.source == PARENT.replace("return x\n", "return x * 2\n")
    text = sent(server.requests[0])
    assert "error: 'lon' undeclared" in text and "compile_error" in text and "<<<<<<< SEARCH" in text


def test_failed_blocks_are_shown_with_the_real_lines_then_fixed(server, make_llm):
    wrong = "<<<<<<< SEARCH\n    def forward(self, y):\n        return y\n=======\n    pass\n>>>>>>> REPLACE\n"
    right = "<<<<<<< SEARCH\n    def forward(self, x):\n        return x\n=======\n" \
            "    def forward(self, x):\n        return x + 1\n>>>>>>> REPLACE\n"
    server.steps += [Step(text=wrong), Step(text=right)]
    llm = make_llm("diff")
    proposal = operators.mutate(llm, CTX, variant_of(PARENT, "c", speedup_eager=1.2, speedup_compile=1.0, ms=0.5))
    assert proposal.ok and proposal.source.endswith("return x + 1\n")
    assert [c.operator for c in llm.calls] == ["mutate", "mutate_edit_followup"]
    text = sent(server.requests[1]).split("<<<<<<< SEARCH")[-1]  # the follow-up, after the failed reply
    assert "Block 1: its SEARCH text matches no lines" in text
    assert "def forward(self, x):\n        return x" in text and "from line 11" in text


def test_blocks_that_fail_twice_end_as_edit_failed(server, make_llm):
    wrong = "<<<<<<< SEARCH\nnot in the file\n=======\nx\n>>>>>>> REPLACE\n"
    server.steps += [Step(text=wrong), Step(text=wrong)]
    proposal = operators.mutate(make_llm("diff"), CTX, variant_of(PARENT, "c"))
    assert proposal.outcome == "edit_failed" and "block 1: no match" in proposal.problem
    assert len(proposal.calls) == 2


def test_a_follow_up_the_budget_refuses_is_not_sent(server, make_llm):
    """A hard call cap: blocks that fail to apply are not followed up past it; the reply says why."""
    from kernelevo.agent.client import Metered
    from kernelevo.evolution.budget import Budget, BudgetLimits, StopKind

    wrong = "<<<<<<< SEARCH\nnot in the file\n=======\nx\n>>>>>>> REPLACE\n"
    server.steps += [Step(text=wrong), Step(text=WHOLE)]
    budget = Budget(BudgetLimits(max_llm_calls=1))
    reservation = budget.reserve(0.01)
    llm = Metered(make_llm("diff"), lambda: budget.extend(reservation, 0.01))
    proposal = operators.mutate(llm, CTX, variant_of(PARENT, "c"))
    assert len(server.requests) == 1 and [c.operator for c in llm.calls] == ["mutate"]
    assert proposal.outcome == "edit_failed" and proposal.unsent.startswith("max-llm-calls reached")
    assert "block 1: no match" in proposal.problem and "follow-up not sent: max-llm-calls" in proposal.problem
    budget.settle(reservation, proposal.cost_usd, len(llm.calls))
    assert budget.calls == 1 and budget.exhausted(0, 0).kind is StopKind.MAX_LLM_CALLS

    budget = Budget(BudgetLimits(max_llm_calls=2))  # room for the follow-up: it is sent and counted
    reservation = budget.reserve(0.01)
    server.steps.insert(0, Step(text=wrong))
    llm = Metered(make_llm("diff"), lambda: budget.extend(reservation, 0.01))
    assert operators.mutate(llm, CTX, variant_of(PARENT, "c")).ok and len(server.requests) == 3
    budget.settle(reservation, None, len(llm.calls))
    assert budget.calls == 2 and budget.spent_usd == pytest.approx(0.02)


def test_unfinished_block_is_named(server, make_llm):
    server.steps.append(Step(text="<<<<<<< SEARCH\n        return x\n=======\n        return x * 2\n"))
    proposal = operators.mutate(make_llm("diff"), CTX, variant_of(PARENT, "c"))
    assert proposal.outcome == "no_code" and "never reach their >>>>>>> REPLACE" in proposal.problem


def test_reflect_returns_the_analysis_as_data(server, make_llm):
    reply = ("## Analysis\nB is fastest because it reads x once; A makes two passes.\n\n## Kernel\n" + WHOLE)
    server.steps.append(Step(text=reply))
    variants = [variant_of(PARENT, "c", "A", speedup_eager=1.1), variant_of(PARENT, "c", "B", speedup_eager=2.0)]
    proposal = operators.reflect(make_llm(), CTX, variants)
    assert proposal.ok and proposal.analysis == "B is fastest because it reads x once; A makes two passes."
    text = sent(server.requests[0])
    assert text.index("## Kernel B") < text.index("## Kernel A")  # fastest first


def test_crossover_and_functional_translate(server, make_llm):
    functional = "```python\ndef module_fn(x, scale):\n    return x * scale\n```\n"
    server.steps += [Step(text=WHOLE), Step(text=functional), Step(text=WHOLE)]
    llm = make_llm()
    parents = [variant_of(PARENT, "c", "A", notes="vectorised"), variant_of(PARENT, "c", "B", notes="one pass")]
    assert operators.crossover(llm, CTX, parents).ok
    proposal, code = operators.translate_via_functional(llm, CTX)
    assert proposal.ok and "def module_fn" in code and len(proposal.calls) == 2
    assert "def module_fn(x, scale)" in sent(server.requests[2])


def test_server_error_is_a_failed_call_with_no_charge(server, make_llm):
    server.steps.append(Step(status=500))
    llm = make_llm()
    proposal = operators.translate(llm, CTX)
    assert proposal.outcome == "failed_call" and llm.calls[0].outcome == "transient"
    assert llm.calls[0].cost_usd == 0.0


def test_timeout_costs_unknown(server, make_llm):
    server.steps.append(Step(text=WHOLE, delay_s=3.0))
    llm = make_llm(timeout_s=1.0)
    assert operators.translate(llm, CTX).outcome == "failed_call"
    assert llm.calls[0].outcome == "transient" and llm.calls[0].cost_usd is None


def test_a_server_gone_costs_nothing_backs_off_then_stops(server, make_llm, monkeypatch):
    from kernelevo.agent import client

    monkeypatch.setattr(client, "BACKOFF_S", 0.05)  # the pauses' shape, not their length, is tested
    server.steps.append(Step(text=WHOLE, usage=dict(input=5, output=5)))
    llm = make_llm()
    assert operators.translate(llm, CTX).ok
    url = server.url
    server.close()  # connection refused from now on
    paused = []
    for _ in range(client.STOP_AFTER - 1):
        assert operators.translate(llm, CTX).outcome == "failed_call"
        paused.append(llm.paused_for() > 0)
    with pytest.raises(client.Unreachable) as info:
        operators.translate(llm, CTX)
    failed = llm.calls[1:]
    assert [c.outcome for c in failed] == ["unreachable"] * client.STOP_AFTER
    assert all(c.cost_usd == 0.0 for c in failed)  # never connected: nothing billed, not "unknown"
    # calls pause once BACKOFF_AFTER have failed in a row
    assert paused == [False] * (client.BACKOFF_AFTER - 1) + [True] * (client.STOP_AFTER - client.BACKOFF_AFTER)
    message = str(info.value)
    assert "\n" not in message and url.split("//")[1] in message and f"{client.STOP_AFTER} calls in a row" in message


@pytest.mark.parametrize("status", [401, 400])
def test_refused_key_or_request_stops_the_run(server, make_llm, status):
    server.steps.append(Step(status=status))
    llm = make_llm()
    with pytest.raises(Stop) as info:
        operators.translate(llm, CTX)
    assert "\n" not in str(info.value) and llm.calls[0].outcome in ("auth", "bad_request")


def test_long_rate_limit_pauses_the_client(server, make_llm):
    server.steps.append(Step(status=429, headers={"retry-after": "600", "x-should-retry": "false"}))
    llm = make_llm()
    assert operators.translate(llm, CTX).outcome == "failed_call"
    assert llm.calls[0].outcome == "rate_limit" and 590 < llm.paused_for() <= 600


def test_unknown_price_is_null_with_one_warning(server, make_llm):
    server.steps += [Step(text=WHOLE, usage=dict(input=5, output=5)), Step(text=WHOLE, usage=dict(input=5, output=5))]
    llm = make_llm(prices={}, model=f"unpriced-{make_llm.protocol}")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        operators.translate(llm, CTX)
        operators.translate(llm, CTX)
    assert [c.cost_usd for c in llm.calls] == [None, None]
    assert len([w for w in seen if "no input or output price known" in str(w.message)]) == 1


def test_calls_in_flight_are_capped_and_ctrl_c_keeps_paid_replies(server, make_llm):
    server.steps += [Step(text=WHOLE, delay_s=1.0) for _ in range(5)]
    llm = make_llm()
    pool = CallPool(cap=2)
    futures = [pool.submit(operators.translate, llm, CTX) for _ in range(5)]
    time.sleep(0.3)
    still_running = pool.shutdown(grace_s=0.0)  # what the loop does on Ctrl-C
    assert still_running == 2 and sum(f.cancelled() for f in futures) == 3
    deadline = time.monotonic() + 5
    while len(llm.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [c.outcome for c in llm.calls] == ["ok", "ok"]  # replies that were paid for are recorded
    assert server.most_active == 2 and len(server.requests) == 2
