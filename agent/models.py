"""The model table: prices, limits, edit format and request quirks per model.

Shipped in prompts/models.toml; a user's kernelevo.toml overrides or extends entries through its
`[models.ALIAS]` tables. A model missing from both has an unknown price: its calls record a cost
of None, with one warning per model, never a guessed 0.
"""
from __future__ import annotations

import functools
import re
import tomllib
import warnings
from dataclasses import dataclass, field
from typing import Any

from .prompting import template_text
from .providers import ModelRef, Usage

PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")
_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")  # claude-x-20250929, gpt-x-2025-08-07
_warned: set[str] = set()


@dataclass(frozen=True)
class ModelInfo:
    provider: str
    name: str
    input: float | None = None  # USD per million tokens
    cached_input: float | None = None
    cache_write: float | None = None
    output: float | None = None
    context: int | None = None
    max_output: int | None = None
    edit_format: str = "whole"  # "whole" or "diff" (SEARCH/REPLACE)
    temperature: bool = True  # False: the model refuses a temperature
    reasoning: dict[str, Any] = field(default_factory=dict)  # extra request parameters
    source: str = ""


@functools.cache
def shipped_table() -> dict[str, dict[str, dict]]:
    return tomllib.loads(template_text("models.toml"))


def _entry(table: dict, ref: ModelRef) -> dict | None:
    models = table.get(ref.provider, {})
    for name in (ref.model, _DATED.sub("", ref.model)):
        if name in models:
            return models[name]
        for entry in models.values():
            if name in entry.get("aliases", ()):
                return entry
    return models.get("*")


def lookup(ref: ModelRef, overrides: dict[str, Any] | None = None) -> ModelInfo:
    """The table's entry for a model (dated snapshots match their base name), with overrides on top."""
    entry = dict(_entry(shipped_table(), ref) or {})
    entry.update(overrides or {})
    known = {f for f in ModelInfo.__dataclass_fields__} - {"provider", "name"}
    unknown = set(entry) - known - {"aliases"}
    if unknown:
        raise ValueError(f"model {ref.provider}:{ref.model}: unknown field(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(known))}")
    if entry.get("edit_format", "whole") not in ("whole", "diff"):
        raise ValueError(f"model {ref.provider}:{ref.model}: edit_format must be \"whole\" or \"diff\"")
    return ModelInfo(ref.provider, ref.model, **{k: v for k, v in entry.items() if k in known})


def cost(usage: Usage, info: ModelInfo) -> float | None:
    """USD for one call, or None when a price it needs is unknown (one warning per model and field).

    A missing cache price is not replaced by the input price: that would be a guess."""
    counts = {"input": usage.input, "cached_input": usage.cache_read, "cache_write": usage.cache_write,
              "output": usage.output}
    missing = [f for f, n in counts.items() if n and getattr(info, f) is None]
    if missing:
        key = f"{info.provider}:{info.name}: {', '.join(missing)}"
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"{info.provider}:{info.name}: no {' or '.join(missing)} price known, so the cost of "
                          "its calls is recorded as unknown; add it (USD per million tokens) to the model's "
                          "[models.ALIAS] table in kernelevo.toml", stacklevel=2)
        return None
    return sum(n * getattr(info, f) for f, n in counts.items() if n) / 1e6


def table_rows(config) -> list[dict]:
    """Every model of the shipped table, then each alias of the user's config, as plain rows."""
    from dataclasses import asdict

    from .providers import parse_model

    rows = []
    for provider, entries in shipped_table().items():
        for name in entries:
            rows.append({"alias": "", "spec": f"{provider}:{name}", **asdict(lookup(ModelRef(provider, name)))})
    for alias, choice in config.models.items():
        rows.append({"alias": alias, "spec": choice.spec, **asdict(lookup(parse_model(choice.spec), choice.overrides))})
    return rows
