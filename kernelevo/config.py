"""kernelevo.toml: named models and model-table overrides.

    [models.fast]
    model = "anthropic:claude-haiku-4-5"     # or openai:..., local:NAME@URL
    edit_format = "whole"                    # any field of prompts/models.toml overrides the table
    max_tokens = 16000                       # per call
    key_env = "WORK_ANTHROPIC_KEY"           # the environment variable holding the key
    max_retries = 2                          # the SDK's own retries of a failed call

    ensemble = ["fast", "smart"]             # a run's models when --model is not given (several: an ensemble)
    format = "auto"                          # --format when not given: nvrtc, inline, triton, c or auto
    baseline = "compile"                     # --baseline when not given: what kernels must beat (compile or eager)
    [model_for]
    reflect = "smart"                        # an operator pinned to one model (--model-for reflect=smart)

Keys are read only from the environment: a config that holds one is refused. The file is found at
--config PATH, else ./kernelevo.toml, else ~/.config/kernelevo/kernelevo.toml.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.formats import FORMAT_CHOICES

# The model used when none is named, by the key that is set (first match wins); both are in the
# shipped model table. Override with --model or `default_model = "..."` in kernelevo.toml.
DEFAULT_MODELS = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-5-5"), ("OPENAI_API_KEY", "openai:gpt-6.2-sol"))
# How to call, not fields of the model table.
CALL_FIELDS = ("max_tokens", "key_env", "sampling_temperature", "timeout_s", "max_retries")
# What --baseline and `baseline =` take: the speedup a search ranks kernels by, over torch.compile or eager.
BASELINE_CHOICES = ("compile", "eager")
# The sentence-transformers model for embeddings when `embed_model =` does not name one.
DEFAULT_SENTENCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # small (90 MB), fast on a CPU
_SECRETS = re.compile(r"^(key|token|secret|password)$|(api_?key|_secret|_token|_password)$", re.I)


def default_archive_path() -> Path:
    """$KERNELEVO_ARCHIVE, else $XDG_DATA_HOME/kernelevo/archive.sqlite (~/.local/share when unset)."""
    if os.environ.get("KERNELEVO_ARCHIVE"):
        return Path(os.environ["KERNELEVO_ARCHIVE"]).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "kernelevo" / "archive.sqlite"


class ConfigError(ValueError):
    """A config file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class ModelChoice:
    """A model to call: its spec string, table overrides and call settings."""

    spec: str  # "anthropic:claude-sonnet-4-5"
    alias: str = ""  # the [models.ALIAS] name, when chosen by alias
    overrides: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    key_env: str | None = None
    sampling_temperature: float | None = None
    timeout_s: float | None = None
    max_retries: int | None = None  # the SDK's own retries of a failed call (its default: 2)


@dataclass(frozen=True)
class Config:
    path: str | None = None  # the file read, if any
    models: dict[str, ModelChoice] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def archive_path(self, given: Path | None = None) -> Path:
        """The archive file: `given` (--archive), else `archive =` here, else the default location."""
        if given is not None:
            return Path(given)
        if self.raw.get("archive"):
            return Path(str(self.raw["archive"])).expanduser()
        return default_archive_path()

    def embed_model(self) -> str | None:
        """The sentence-transformers model for embeddings (`embed_model =`; "" for the built-in one)."""
        value = self.raw.get("embed_model", DEFAULT_SENTENCE_MODEL)
        return str(value) if value else None

    def ensemble(self) -> tuple[str, ...]:
        """`ensemble = [...]`: the models a run uses when --model is not given (() when unset)."""
        return tuple(self.raw.get("ensemble") or ())

    def model_for(self) -> dict[str, str]:
        """`[model_for]`: operator -> the model every call of that operator goes to."""
        return dict(self.raw.get("model_for") or {})

    def format(self) -> str | None:
        """`format = "auto"`: the candidate format asked for when --format is not given (None: the device's)."""
        value = self.raw.get("format")
        return str(value) if value else None

    def baseline(self) -> str | None:
        """`baseline = "eager"`: what kernels must beat when --baseline is not given (None: torch.compile)."""
        value = self.raw.get("baseline")
        return str(value) if value else None

    def model(self, name: str) -> ModelChoice:
        """An alias from [models.ALIAS], or a plain provider:model string."""
        return self.models.get(name) or ModelChoice(spec=name)


def default_paths() -> list[Path]:
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [Path("kernelevo.toml"), home / "kernelevo" / "kernelevo.toml"]


def load_config(path: str | Path | None = None) -> Config:
    """The config at `path` (which must exist), else the first default file found, else an empty one."""
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"{path}: no such config file")
    found = Path(path) if path is not None else next((p for p in default_paths() if p.is_file()), None)
    if found is None:
        return Config()
    try:
        data = tomllib.loads(found.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{found}: not valid TOML: {exc}") from None
    _refuse_secrets(data, found)
    if not isinstance(data.get("models") or {}, dict):  # `models = [...]` would read as the run's models
        raise ConfigError(f"{found}: models holds the [models.ALIAS] tables; list a run's models as "
                          "ensemble = [\"fast\", \"smart\"]")
    models = {alias: _choice(alias, table, found) for alias, table in (data.get("models") or {}).items()}
    _check_ensemble(data, found)
    if data.get("format") is not None and data["format"] not in FORMAT_CHOICES:
        raise ConfigError(f"{found}: format = {data['format']!r}: use {', '.join(FORMAT_CHOICES)}")
    if data.get("baseline") is not None and data["baseline"] not in BASELINE_CHOICES:
        raise ConfigError(f"{found}: baseline = {data['baseline']!r}: use {' or '.join(BASELINE_CHOICES)}")
    return Config(str(found), models, data)


def _check_ensemble(data: dict, path: Path) -> None:
    ensemble, pins = data.get("ensemble"), data.get("model_for")
    if ensemble is not None and (not isinstance(ensemble, list) or not ensemble
                                 or not all(isinstance(m, str) and m for m in ensemble)):
        raise ConfigError(f"{path}: ensemble must be a list of model names, e.g. ensemble = [\"fast\", \"smart\"]")
    if pins is not None and (not isinstance(pins, dict) or not all(isinstance(m, str) and m for m in pins.values())):
        raise ConfigError(f"{path}: [model_for] maps operators to model names, e.g. reflect = \"smart\"")


def _refuse_secrets(data: Any, path: Path, where: str = "") -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if _SECRETS.search(key):
                raise ConfigError(f"{path}: [{where or 'top level'}] {key}: keys are read only from environment "
                                  "variables; remove it and set key_env = \"VARIABLE\" or export the usual variable")
            _refuse_secrets(value, path, f"{where}.{key}" if where else key)


def _choice(alias: str, table: Any, path: Path) -> ModelChoice:
    if not isinstance(table, dict) or not isinstance(table.get("model"), str):
        raise ConfigError(f"{path}: [models.{alias}] needs model = \"provider:MODEL\"")
    settings = {k: table[k] for k in CALL_FIELDS if k in table}
    overrides = {k: v for k, v in table.items() if k not in CALL_FIELDS and k != "model"}
    return ModelChoice(spec=table["model"], alias=alias, overrides=overrides, **settings)
