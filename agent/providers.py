"""LLM providers behind one small protocol, on the official SDKs (imported on first use).

Model strings: `anthropic:MODEL`, `openai:MODEL` (the SDK itself honours OPENAI_BASE_URL and
ANTHROPIC_BASE_URL) and `local:MODEL@http://host:port/v1` for OpenAI-compatible local servers
(vLLM, Ollama, SGLang, llama.cpp), which get a placeholder key unless LOCAL_API_KEY is set.
Keys come only from the environment. Retries are the SDKs' own (`max_retries`); nothing here
loops. (The SDKs honour Retry-After while retrying: the OpenAI one up to 2 minutes, the
Anthropic one however long it says, so a long limit from Anthropic pauses inside the call.) Failures become a ProviderError whose `kind` tells the caller what to do:
- "auth", "bad_request": stop the run with the one-line message;
- "rate_limit": pause (for `retry_after` seconds when the server said) and go on;
- "unreachable" (the connection could not be made: nothing sent, nothing billed), "transient"
  (timeout, connection lost, 5xx after the SDK's retries), "malformed": record a failed call.
"""
from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Protocol

from kernelevo.tasks import first_line

KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "local": "LOCAL_API_KEY"}
_SPEC = re.compile(r"^(?P<provider>openai|anthropic|local):(?P<model>[^@\s]+)(?:@(?P<url>\S+))?$")


@dataclass(frozen=True)
class ModelRef:
    provider: str  # "openai", "anthropic" or "local" (OpenAI protocol)
    model: str
    base_url: str | None = None


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str
    cache: bool = False  # the stable prompt prefix ends here (Anthropic cache_control)


@dataclass(frozen=True)
class Usage:
    input: int = 0  # uncached input tokens
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0  # including reasoning
    reasoning: int = 0


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage
    request_id: str
    latency_s: float
    stop_reason: str


class ProviderError(Exception):
    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None,
                 request_id: str = ""):
        super().__init__(message)
        self.kind, self.status, self.retry_after, self.request_id = kind, status, retry_after, request_id


class Provider(Protocol):
    ref: ModelRef

    def complete(self, messages: list[Message], max_tokens: int, temperature: float | None = None,
                 extra: dict | None = None) -> Completion:
        ...


def parse_model(spec: str) -> ModelRef:
    """`provider:model[@base_url]`; a ValueError names the accepted forms."""
    match = _SPEC.match(spec.strip())
    if not match or (match["provider"] == "local") != bool(match["url"]):
        raise ValueError(f"model {spec!r}: use anthropic:MODEL, openai:MODEL or local:MODEL@http://host:port/v1")
    return ModelRef(match["provider"], match["model"], match["url"])


def make_provider(ref: ModelRef, timeout_s: float = 600.0, max_retries: int = 2,
                  key_env: str | None = None) -> Provider:
    """A provider for `ref`; its key comes from `key_env`, else the provider's usual variable."""
    if ref.provider == "anthropic":
        return AnthropicProvider(ref, timeout_s, max_retries, key_env)
    return OpenAIProvider(ref, timeout_s, max_retries, key_env)


def _key(ref: ModelRef, key_env: str | None = None) -> str:
    variable = key_env or KEY_VARIABLES[ref.provider]
    key = os.environ.get(variable)
    if ref.provider == "local":
        return key or "not-needed"  # local servers accept any key; the SDK insists on one
    if not key:
        raise ProviderError("auth", f"{variable} is not set: export it (keys are read only from the environment)")
    return key


def _never_sent(exc: Exception) -> bool:
    """The connection itself failed (refused, no route, unknown host): the request never reached
    a server, so nothing was billed. A connection lost later may have been. The SDKs' transport
    (httpx, or httpx2 in newer SDKs) names that failure ConnectError; it is matched by name so
    that either transport is recognised."""
    cause, depth = exc.__cause__, 0
    while cause is not None and depth < 5:
        if type(cause).__name__ == "ConnectError" or isinstance(cause, (ConnectionRefusedError, socket.gaierror)):
            return True
        cause, depth = cause.__cause__ or cause.__context__, depth + 1
    return False


def _classify(sdk, exc: Exception, ref: ModelRef) -> ProviderError:
    """Map an SDK exception (openai or anthropic; same class names) to a ProviderError."""
    status = getattr(exc, "status_code", None)
    request_id = getattr(exc, "request_id", None) or ""
    first = first_line(exc)[:300]
    where = f"{ref.provider}:{ref.model}"
    if isinstance(exc, (sdk.AuthenticationError, sdk.PermissionDeniedError)):
        return ProviderError("auth", f"{where}: the API key was refused ({status}); check "
                             f"{KEY_VARIABLES[ref.provider]}", status, request_id=request_id)
    if isinstance(exc, sdk.RateLimitError):
        return ProviderError("rate_limit", f"{where}: rate limited (429): {first}", status,
                             _retry_after(getattr(exc, "response", None)), request_id)
    if isinstance(exc, sdk.APIConnectionError) and not isinstance(exc, sdk.APITimeoutError) and _never_sent(exc):
        return ProviderError("unreachable", f"{where}: cannot connect: {first_line(exc.__cause__ or exc)[:200]}")
    if isinstance(exc, (sdk.APITimeoutError, sdk.APIConnectionError, sdk.InternalServerError)):
        return ProviderError("transient", f"{where}: {type(exc).__name__}: {first}", status, request_id=request_id)
    if isinstance(exc, sdk.APIResponseValidationError):
        return ProviderError("malformed", f"{where}: unreadable response: {first}", status, request_id=request_id)
    if isinstance(exc, sdk.APIStatusError) and status is not None and status >= 500:
        return ProviderError("transient", f"{where}: server error {status}: {first}", status, request_id=request_id)
    if isinstance(exc, sdk.APIStatusError):
        return ProviderError("bad_request", f"{where}: request refused ({status}): {first}", status,
                             request_id=request_id)
    raise exc


def _call(sdk, base_error: type, ref: ModelRef, create, body: dict):
    """(response, seconds) of one SDK call, its failures turned into ProviderError."""
    started = time.monotonic()
    try:
        response = create(**body)
    except base_error as exc:
        raise _classify(sdk, exc, ref) from exc
    except ValueError as exc:  # a body that is not the JSON it claims to be
        raise ProviderError("malformed", f"{ref.provider}:{ref.model}: unreadable response: "
                            f"{type(exc).__name__}") from exc
    return response, time.monotonic() - started


def _retry_after(response) -> float | None:
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from LLM APIs; the caller pauses by its own rule


class OpenAIProvider:
    """OpenAI Chat Completions, for OpenAI and every OpenAI-compatible server."""

    def __init__(self, ref: ModelRef, timeout_s: float, max_retries: int, key_env: str | None = None):
        import openai

        self.ref, self._sdk = ref, openai
        self._client = openai.OpenAI(api_key=_key(ref, key_env), base_url=ref.base_url, timeout=timeout_s,
                                     max_retries=max_retries)

    @property
    def endpoint(self) -> str:
        return str(self._client.base_url)

    def complete(self, messages: list[Message], max_tokens: int, temperature: float | None = None,
                 extra: dict | None = None) -> Completion:
        body = {"model": self.ref.model, "messages": [{"role": m.role, "content": m.content} for m in messages]}
        # OpenAI's own reasoning models take only max_completion_tokens; local servers know max_tokens.
        body["max_tokens" if self.ref.provider == "local" else "max_completion_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        body.update(extra or {})  # reasoning parameters from the model table
        response, latency = _call(self._sdk, self._sdk.OpenAIError, self.ref, self._client.chat.completions.create, body)
        choices = getattr(response, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise ProviderError("malformed", f"{self.ref.provider}:{self.ref.model}: a reply without choices",
                                request_id=getattr(response, "_request_id", None) or "")
        return Completion(choices[0].message.content or "", _openai_usage(response.usage),
                          getattr(response, "_request_id", None) or "", latency, choices[0].finish_reason or "")


def _openai_usage(usage) -> Usage:
    if usage is None:
        return Usage()
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    written = getattr(details, "cache_write_tokens", 0) or 0  # reported where writes are billed
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0
    return Usage(input=max(0, prompt - cached - written), cache_read=cached, cache_write=written,
                 output=getattr(usage, "completion_tokens", 0) or 0, reasoning=reasoning)


class AnthropicProvider:
    """Anthropic Messages, with cache_control at the end of the stable prefix."""

    def __init__(self, ref: ModelRef, timeout_s: float, max_retries: int, key_env: str | None = None):
        import anthropic

        self.ref, self._sdk = ref, anthropic
        self._client = anthropic.Anthropic(api_key=_key(ref, key_env), base_url=ref.base_url, timeout=timeout_s,
                                           max_retries=max_retries)

    @property
    def endpoint(self) -> str:
        return str(self._client.base_url)

    def complete(self, messages: list[Message], max_tokens: int, temperature: float | None = None,
                 extra: dict | None = None) -> Completion:
        system = [_block(m) for m in messages if m.role == "system"]
        body = {"model": self.ref.model, "max_tokens": max_tokens, "messages": _turns(messages)}
        if system:
            body["system"] = system
        if temperature is not None:
            body["temperature"] = temperature
        body.update(extra or {})  # e.g. extended thinking from the model table
        response, latency = _call(self._sdk, self._sdk.AnthropicError, self.ref, self._client.messages.create, body)
        content = getattr(response, "content", None)
        if content is None:
            raise ProviderError("malformed", f"anthropic:{self.ref.model}: a reply without content",
                                request_id=getattr(response, "_request_id", None) or "")
        text = "".join(getattr(part, "text", "") for part in content if getattr(part, "type", "") == "text")
        thinking = "".join(getattr(part, "thinking", "") for part in content if getattr(part, "type", "") == "thinking")
        if thinking:
            text = f"<think>{thinking}</think>\n{text}"  # kept apart again by replies.split_thinking
        u = response.usage
        usage = Usage(input=u.input_tokens or 0, cache_read=getattr(u, "cache_read_input_tokens", 0) or 0,
                      cache_write=getattr(u, "cache_creation_input_tokens", 0) or 0, output=u.output_tokens or 0)
        return Completion(text, usage, getattr(response, "_request_id", None) or "", latency,
                          response.stop_reason or "")


def _turns(messages: list[Message]) -> list[dict]:
    """Messages API turns: consecutive messages of one role become blocks of one turn, so that the
    cached task block and the job after it travel as one user turn."""
    turns: list[dict] = []
    for m in messages:
        if m.role == "system":
            continue
        if turns and turns[-1]["role"] == m.role:
            turns[-1]["content"].append(_block(m))
        else:
            turns.append({"role": m.role, "content": [_block(m)]})
    return turns


def _block(message: Message) -> dict:
    block = {"type": "text", "text": message.content}
    if message.cache:
        block["cache_control"] = {"type": "ephemeral"}
    return block
