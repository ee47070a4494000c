"""Providers on the real openai and anthropic SDKs, against the scripted server on 127.0.0.1."""
import pytest
from kernelevo.agent.providers import (
    Message,
    ModelRef,
    ProviderError,
    Usage,
    make_provider,
    parse_model,
)
from llm_server import Step

PROMPT = [Message("system", "rules and formats", cache=True), Message("user", "write a kernel")]


@pytest.fixture(params=["openai", "anthropic"])
def provider(request, server, monkeypatch):
    """A provider of each protocol, pointed at the server the way a user would point it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    if request.param == "anthropic":
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)  # read by the SDK itself
        ref = parse_model("anthropic:claude-test")
    else:
        ref = parse_model(f"local:qwen-test@{server.url}/v1")
    return make_provider(ref, timeout_s=1.0, max_retries=1)


@pytest.mark.parametrize("spec, ref", [
    ("anthropic:claude-x", ModelRef("anthropic", "claude-x")),
    ("openai:gpt-x", ModelRef("openai", "gpt-x")),
    ("local:qwen2.5-coder:32b@http://127.0.0.1:8000/v1", ModelRef("local", "qwen2.5-coder:32b", "http://127.0.0.1:8000/v1")),
])
def test_model_strings(spec, ref):
    assert parse_model(spec) == ref


@pytest.mark.parametrize("spec", ["gpt-4", "local:model", "openai:m@http://x", "mystery:m"])
def test_bad_model_strings_say_what_is_accepted(spec):
    with pytest.raises(ValueError, match="use anthropic:MODEL"):
        parse_model(spec)


def test_missing_key_is_a_one_line_auth_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY is not set") as info:
        make_provider(parse_model("anthropic:claude-test"))
    assert info.value.kind == "auth"


def test_reply_and_token_accounting(server, provider):
    server.steps.append(Step(text="```python\nclass ModelNew: pass\n```", usage=dict(
        input=120, cache_read=900, cache_write=300,
        output=80, reasoning=30 if provider.ref.provider != "anthropic" else 0)))
    done = provider.complete(PROMPT, max_tokens=1000)
    assert "class ModelNew" in done.text and done.request_id == "req-1" and done.latency_s > 0
    if provider.ref.provider == "anthropic":
        assert done.usage == Usage(input=120, cache_read=900, cache_write=300, output=80)
        sent = server.requests[0]["body"]
        assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}  # the stable prefix is cached
        assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "write a kernel"}]}]
    else:
        assert done.usage == Usage(input=120, cache_read=900, cache_write=300, output=80, reasoning=30)
        assert server.requests[0]["body"]["max_tokens"] == 1000


@pytest.mark.parametrize("step, kind, calls", [
    (Step(status=401), "auth", {1}),
    (Step(status=400, text="messages: field required"), "bad_request", {1}),
    (Step(status=429, headers={"retry-after": "1"}), "rate_limit", {2}),  # the SDK waited 1 s and retried
    # A long wait the server says not to retry: it reaches the caller, which pauses the run.
    (Step(status=429, headers={"retry-after": "600", "x-should-retry": "false"}), "rate_limit", {1}),
    (Step(status=500), "transient", {2}),  # the SDK's one retry, then the failure
    (Step(raw=b"<html>proxy error</html>"), "malformed", {1}),
    (Step(text="late", delay_s=2.5), "transient", {2}),
])
def test_failures_are_classified(server, provider, step, kind, calls):
    server.steps += [step, step]
    with pytest.raises(ProviderError) as info:
        provider.complete(PROMPT, max_tokens=100)
    error = info.value
    assert error.kind == kind and "\n" not in str(error)
    assert len(server.requests) in calls
    if kind == "rate_limit":
        assert error.retry_after == float(step.headers["retry-after"]) and error.status == 429


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_max_retries_from_the_config_reaches_the_sdk(monkeypatch, tmp_path, protocol):
    """`max_retries` in a [models.ALIAS] table is the SDK's own retry count; nothing retries on top."""
    from kernelevo.agent.client import LLM
    from kernelevo.config import load_config

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    config = tmp_path / "kernelevo.toml"
    config.write_text(f'[models.patient]\nmodel = "{protocol}:m-test"\nmax_retries = 5\n')
    choice = load_config(config).model("patient")
    assert choice.max_retries == 5 and "max_retries" not in choice.overrides
    assert LLM(choice).provider._client.max_retries == 5
    assert LLM(load_config(config).model(f"{protocol}:m-test")).provider._client.max_retries == 2  # the default
