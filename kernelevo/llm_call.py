"""The record of one call to a model, shared by the agent (which makes it), the search (which
settles its cost) and the archive (which stores it). A frozen dataclass of JSON-friendly values."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LLMCall:
    """One request to a model and what it cost; stored before its reply is judged."""

    provider: str  # "openai", "anthropic" or "local"
    model: str
    operator: str  # translate, functional, repair, mutate, crossover, reflect, edit_followup
    outcome: str  # "ok", or the failure kind: auth, bad_request, rate_limit, transient, malformed, cancelled
    input_tokens: int = 0  # uncached input
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0  # including reasoning
    reasoning_tokens: int = 0
    cost_usd: float | None = None  # None: the model's price is unknown (never guessed as 0)
    latency_s: float = 0.0
    request_id: str = ""
    started_at: float = 0.0  # unix time
    prompt_hash: str = ""  # sha256 of the messages sent
    reply: str = ""  # the full reply text, reasoning sections included
    stop_reason: str = ""
    error: str = ""  # one line, for failed calls
    label: str = ""  # the name the run knows the model by: its [models.ALIAS], else provider:model
    format: str = ""  # the candidate format the call asked for (nvrtc, inline, c, triton); "" when none
    prompt_form: str = ""  # agent.client.prompt_form: the prompt's hash with its numbers left out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
