"""One model, called with accounting: every call becomes an LLMCall record, paid replies included.

The client adds no retries (the SDK's own happen inside each call). What it adds is policy:
- a refused key or request raises `Stop`, which ends the run with the provider's one-line message;
- a rate limit pauses every call of this client until the server's Retry-After has passed (the
  caller tries again later as part of the search: the failed call is recorded, not repeated here);
- a timeout, a server error or an unreadable body is recorded as a failed call and returns None;
- transport failures in a row (no connection, timeouts, server errors) pause every call, longer
  each time, and after STOP_AFTER of them the client raises `Unreachable`, naming the endpoint and
  the error: a server that is gone must not burn the call budget in seconds.
Records reach `on_call` as soon as a reply arrives, before anything is done with it, so a crash
afterwards loses no paid reply.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kernelevo.config import ModelChoice
from kernelevo.llm_call import LLMCall

from .models import ModelInfo, cost, lookup
from .providers import Completion, Message, Provider, ProviderError, make_provider, parse_model

DEFAULT_PAUSE_S = 30.0  # a 429 without Retry-After
DEFAULT_MAX_TOKENS = 16384
BACKOFF_AFTER = 3  # transport failures in a row before calls pause
BACKOFF_S = 2.0  # the first pause; it doubles with each further failure in a row
STOP_AFTER = 6  # transport failures in a row that end the run (about 14 s of pauses)
TRANSPORT = ("unreachable", "transient")


class Stop(Exception):
    """The run cannot go on with this model (bad key, refused request); the message is one line.
    `call`: the record of the failed call that raised it (None when no call was sent)."""

    def __init__(self, message: str, call: LLMCall | None = None):
        super().__init__(message)
        self.call = call


class Unreachable(Stop):
    """The model server did not answer STOP_AFTER calls in a row; the message names it and the error."""


class NotSent(Exception):
    """A further call of one operation was not sent: the run's budget refused it (the message says why)."""


@dataclass(frozen=True)
class Answer:
    """A completed call: the reply (None when the call failed) and its record."""

    completion: Completion | None
    call: LLMCall

    @property
    def text(self) -> str:
        return self.completion.text if self.completion else ""


class LLM:
    """A model and its table entry; thread-safe, so that several calls can be in flight."""

    def __init__(self, choice: ModelChoice, on_call: Callable[[LLMCall], None] | None = None,
                 provider: Provider | None = None, max_retries: int = 2):
        self.ref = parse_model(choice.spec)
        self.info: ModelInfo = lookup(self.ref, choice.overrides)
        self.choice = choice
        self.on_call = on_call or (lambda call: None)
        try:
            retries = max_retries if choice.max_retries is None else int(choice.max_retries)
            self.provider = provider or make_provider(self.ref, choice.timeout_s or 600.0, retries, choice.key_env)
        except ProviderError as exc:
            raise Stop(str(exc)) from exc
        self._paused_until = 0.0
        self._failures_in_row = 0
        self._gone = ""  # why the server was given up on; calls after that are not sent
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"{self.ref.provider}:{self.ref.model}"

    @property
    def label(self) -> str:
        """The name the run knows this model by: its [models.ALIAS], else provider:model."""
        return label_of(self.choice)

    @property
    def edit_format(self) -> str:
        return self.info.edit_format

    def paused_for(self) -> float:
        """Seconds left of a rate-limit pause (0 when calls may go)."""
        return max(0.0, self._paused_until - time.monotonic())

    def _request(self) -> tuple[int, float | None, dict]:
        max_tokens = self.choice.max_tokens or self.info.max_output or DEFAULT_MAX_TOKENS
        if self.info.max_output:
            max_tokens = min(max_tokens, self.info.max_output)
        extra = dict(self.info.reasoning)
        budget = (extra.get("thinking") or {}).get("budget_tokens")
        if budget and budget >= max_tokens:  # the Messages API wants room for the answer after thinking
            max_tokens = budget + max_tokens
        temperature = self.choice.sampling_temperature if self.info.temperature else None
        if extra.get("thinking"):
            temperature = None  # extended thinking takes no temperature
        return max_tokens, temperature, extra

    def ask(self, operator: str, messages: list[Message], fmt: str = "") -> Answer:
        """One call; never raises for a failed call except `Stop`. `fmt`: the candidate format it
        asks for, recorded with the call."""
        wait = self.paused_for()
        if wait:
            time.sleep(wait)
        if self._gone:  # given up on while this call waited: it is not sent
            raise Unreachable(self._gone)
        max_tokens, temperature, extra = self._request()
        started = time.time()
        base = dict(provider=self.ref.provider, model=self.ref.model, operator=operator, started_at=started,
                    prompt_hash=prompt_hash(messages), label=self.label, format=fmt, prompt_form=prompt_form(messages))
        try:
            done = self.provider.complete(messages, max_tokens, temperature, extra)
        except ProviderError as exc:
            # A refused request (an HTTP status) or one that never connected is not billed; a
            # timeout or an unreadable body may have been, for an amount nobody told us: unknown, not 0.
            paid = 0.0 if (exc.status is not None and exc.kind != "malformed") or exc.kind == "unreachable" else None
            call = LLMCall(outcome=exc.kind, error=str(exc), request_id=exc.request_id,
                           latency_s=time.time() - started, cost_usd=paid, **base)
            self.on_call(call)
            if exc.kind in ("auth", "bad_request"):
                raise Stop(str(exc), call) from exc
            if exc.kind == "rate_limit":
                with self._lock:
                    pause = exc.retry_after if exc.retry_after is not None else DEFAULT_PAUSE_S
                    self._paused_until = max(self._paused_until, time.monotonic() + pause)
            self._transport_failed(exc, call)
            return Answer(None, call)
        with self._lock:
            self._failures_in_row = 0
        u = done.usage
        call = LLMCall(outcome="ok", input_tokens=u.input, cache_read_tokens=u.cache_read,
                       cache_write_tokens=u.cache_write, output_tokens=u.output, reasoning_tokens=u.reasoning,
                       cost_usd=cost(u, self.info), latency_s=done.latency_s, request_id=done.request_id,
                       reply=done.text, stop_reason=done.stop_reason, **base)
        self.on_call(call)
        return Answer(done, call)


    def _transport_failed(self, exc, call: LLMCall) -> None:
        """Count transport failures in a row: pause all calls after BACKOFF_AFTER, stop after STOP_AFTER."""
        if exc.kind not in TRANSPORT:
            return
        with self._lock:
            self._failures_in_row += 1
            n = self._failures_in_row
            if BACKOFF_AFTER <= n < STOP_AFTER:
                pause = BACKOFF_S * 2 ** (n - BACKOFF_AFTER)
                self._paused_until = max(self._paused_until, time.monotonic() + pause)
        if n >= STOP_AFTER:
            endpoint = getattr(self.provider, "endpoint", "") or self.name
            self._gone = self._gone or f"the model server at {endpoint} failed {n} calls in a row: {exc}"
            raise Unreachable(self._gone, call) from exc


class Metered:
    """One operation's calls to `llm`, passed to an operator where an LLM goes. Its caller reserved
    the first call; each further one (an edit follow-up) is sent only once `more()` grants it:
    `more` returns "" or why not, and then NotSent is raised instead of sending. A user's call cap
    is a hard cap, even for a follow-up of a reply already paid for. `calls`: the records of every
    call sent, failed ones included, for the caller to settle its reservation with."""

    def __init__(self, llm: LLM, more: Callable[[], str], fmt: str = ""):
        self.llm, self.more, self.fmt = llm, more, fmt  # fmt: the candidate format these calls ask for
        self.calls: list[LLMCall] = []

    @property
    def edit_format(self) -> str:
        return self.llm.edit_format

    def ask(self, operator: str, messages: list[Message]) -> Answer:
        if self.calls:
            why = self.more()
            if why:
                raise NotSent(why)
        try:
            answer = self.llm.ask(operator, messages, self.fmt)
        except Stop as exc:
            if exc.call is not None:  # sent and failed: it counts
                self.calls.append(exc.call)
            raise
        self.calls.append(answer.call)
        return answer


def label_of(choice: ModelChoice) -> str:
    """The name a run knows a model by: its [models.ALIAS], else provider:model (a local server's
    URL left out). ValueError for a malformed model name."""
    if choice.alias:
        return choice.alias
    ref = parse_model(choice.spec)
    return f"{ref.provider}:{ref.model}"


def prompt_hash(messages: list[Message]) -> str:
    data = json.dumps([[m.role, m.content, m.cache] for m in messages], separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


_FIGURE = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # a number: a time, a speedup, a kernel's id, a size


def prompt_body(messages: list[Message]) -> str:
    """The messages as a prompt file shows them (agent/replay.write_prompt): each role's heading, then its text."""
    return "\n".join(part for m in messages for part in (f"## {m.role}", "", m.content, ""))


def prompt_form(messages: list[Message]) -> str:
    """The prompt's form: the hash of its body with every number in it made '#'. A search run again asks prompts
    of the same form that differ in their figures (times, speedups, kernel ids); another form is another prompt."""
    return form_of(prompt_body(messages))


def form_of(body: str) -> str:
    """The form of a prompt's body (prompt_body's text, as a prompt file holds it)."""
    return hashlib.sha256(_FIGURE.sub("#", body).encode()).hexdigest()
