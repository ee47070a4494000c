"""A search's settings tree, resolved once and only here: the records' own defaults, then kernelevo.toml, then the
environment, then the caller's overrides (the CLI's flags). Each leaf keeps where its value came from, which
`kernelevo optimize --show-settings` prints. The tree is OptimizeOptions (options.py): the run's own leaves
(`run.*`), and the branches each component is handed whole: `search.*` (SearchSettings), `budget.*`
(BudgetLimits) and `judge.*` (the judge's JudgeOptions).

An override is a leaf's dotted path and its value, e.g. ("judge.trials", 3). Two more paths are requests rather
than leaves: `run.device` and `run.gpus` (where to judge) become `run.devices` once the executor is known. A
caller turns its own syntax into values (a wall time "30m" into seconds); what a value may be is checked here."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelevo.config import BASELINE_CHOICES, DEFAULT_MODELS, Config, load_config
from kernelevo.formats import FORMAT_CHOICES

from .options import OptimizeOptions

# A branch of the tree -> the OptimizeOptions field holding it; "run" is the record's own fields.
BRANCHES = {"search": "settings", "budget": "budget", "judge": "judge"}
RUN_FIELDS = tuple(f.name for f in dataclasses.fields(OptimizeOptions) if f.name not in (*BRANCHES.values(), "config"))
REQUESTS = ("run.device", "run.gpus")  # where to judge, resolved into run.devices
# A leaf -> its key in kernelevo.toml, where it has one.
CONFIG_KEYS = {"run.models": "ensemble", "run.model_for": "model_for", "run.fmt": "format", "run.baseline": "baseline",
               "run.archive_path": "archive", "judge.executor": "executor"}
# A leaf whose default reads the environment -> the variable.
ENVIRONMENT = {"run.archive_path": "KERNELEVO_ARCHIVE", "run.cache_dir": "KERNELEVO_CACHE_DIR",
               "judge.ray_address": "RAY_ADDRESS"}
# Set by the run as the judge starts, not settings of their own.
RUNS_OWN = {"judge.devices", "judge.sol"}
EXECUTORS = ("local", "ray")


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line that says what to give instead."""


@dataclass(frozen=True)
class Resolved:
    """A search's options and, for each leaf, where its value came from: "argument", "flag",
    "kernelevo.toml: KEY =", "$VARIABLE" or "default"."""

    options: OptimizeOptions
    origins: tuple[tuple[str, str], ...]

    def rows(self) -> list[tuple[str, Any, str]]:
        """(leaf, value, origin): the run's own, then each branch as its component is handed it."""
        origin = dict(self.origins)
        return [(path, value, origin.get(path, "default")) for path, value in tree(self.options)
                if path not in RUNS_OWN]


def tree(options: OptimizeOptions) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf, nested records opened."""
    for name in RUN_FIELDS:
        yield f"run.{name}", getattr(options, name)
    for branch, name in BRANCHES.items():
        yield from _leaves(branch, getattr(options, name))


def _leaves(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _leaves(f"{prefix}.{f.name}", getattr(value, f.name))
    else:
        yield prefix, value


def put(options: OptimizeOptions, path: str, value: Any) -> OptimizeOptions:
    """The options with the leaf at `path` replaced; an unknown path is a SettingsError."""
    head, _, rest = path.partition(".")
    if head == "run" and rest in RUN_FIELDS:
        return dataclasses.replace(options, **{rest: value})
    if head not in BRANCHES or not rest:
        raise SettingsError(f"no setting {path}: settings are run.*, search.*, budget.* and judge.*")
    return dataclasses.replace(options, **{BRANCHES[head]: _put(getattr(options, BRANCHES[head]), rest, value, path)})


def _put(record: Any, rest: str, value: Any, path: str) -> Any:
    name, _, deeper = rest.partition(".")
    if name not in {f.name for f in dataclasses.fields(record)}:
        raise SettingsError(f"no setting {path}")
    return dataclasses.replace(record, **{name: _put(getattr(record, name), deeper, value, path) if deeper else value})


def resolve(task: Path, overrides: Mapping[str, Any] = {}, config: Path | None = None,
            search: bool = True) -> Resolved:
    """The search of `task` with every setting resolved, the overrides (a caller's flags) last. kernelevo.toml
    is `config`, else found where load_config looks; its errors are ConfigErrors. Without
    `search` (the judge alone: an assembly, a rejudge) no model is chosen where none is named and the candidate
    format, which only a search asks for, is not checked against the devices."""
    read = load_config(config)
    given = dict(overrides)
    options = OptimizeOptions(task_path=Path(task), models=(), devices=(), archive_path=read.archive_path(),
                              out_dir=Path("."), cache_dir=_cache_dir(), config=read)
    origins = {path: f"${variable}" for path, variable in ENVIRONMENT.items() if os.environ.get(variable)}
    origins["run.task_path"] = "argument"
    resuming = bool(given.get("run.resume"))
    for path, key in CONFIG_KEYS.items():
        value = _from_config(read, key, resuming)
        if value is not None:
            options, origins[path] = put(options, path, value), f"kernelevo.toml: {key} ="
    requests = {path: given.pop(path) for path in REQUESTS if path in given}
    for path, value in given.items():
        options, origins[path] = put(options, path, value), "flag"
    _check(options)
    options = _derived(options, read, requests, resuming, given, search)
    if requests:
        origins["run.devices"] = "flag"
    if options.models and "run.models" not in origins:  # chosen by kernelevo.toml's default_model or the key set
        origins["run.models"] = _model_origin(read)
    return Resolved(options, tuple(sorted(origins.items())))


def _from_config(config: Config, key: str, resuming: bool) -> Any:
    """A kernelevo.toml key's value as its leaf holds it, or None where unset (a resumed run keeps its own models)."""
    if key == "ensemble":
        return None if resuming else (config.ensemble() or None)
    if key == "model_for":
        return None if resuming else (tuple(config.model_for().items()) or None)
    if key == "archive":
        return config.archive_path() if config.raw.get("archive") else None
    return config.raw.get(key) or None


def _derived(options: OptimizeOptions, config: Config, requests: dict[str, Any], resuming: bool,
             given: dict[str, Any], search: bool) -> OptimizeOptions:
    """The leaves that follow from others: the judge's devices, the model chosen by the key that is set."""
    judge = options.judge
    if "run.devices" not in given:
        gpus = requests.get("run.gpus", "all")
        devices = judge_devices(judge.executor, requests.get("run.device"), gpus, judge.ray_address)
        options = dataclasses.replace(options, devices=devices)
    if search and options.devices == ("cpu",) and options.fmt in ("nvrtc", "inline"):
        raise SettingsError(f"--format {options.fmt} needs a GPU; on the CPU kernels are written in C (--format c), "
                            "or in Triton (--format triton or auto: checked in Triton's interpreter, not timed)")
    if not resuming:  # a resumed run keeps its own models and pins where none are given
        models = options.models or ((default_model(config),) if search else ())
        options = dataclasses.replace(options, models=models, model_for=options.model_for or ())
    return options


def _check(options: OptimizeOptions) -> None:
    """The values a leaf may hold, checked before anything is looked for (devices, a model by its key)."""
    if options.fmt is not None and options.fmt not in FORMAT_CHOICES:
        raise SettingsError(f"--format {options.fmt}: use {', '.join(FORMAT_CHOICES[:-1])} or {FORMAT_CHOICES[-1]}")
    if options.baseline not in BASELINE_CHOICES:
        raise SettingsError(f"--baseline {options.baseline}: use {' or '.join(BASELINE_CHOICES)}")
    if options.judge.executor not in EXECUTORS:
        raise SettingsError(f"--executor {options.judge.executor}: use local or ray")
    if options.judge.policy not in ("mixed", "strict"):
        raise SettingsError(f"--policy {options.judge.policy}: use mixed or strict")
    if options.judge.shapes not in ("general", "exact"):
        raise SettingsError(f"--shapes {options.judge.shapes}: use general or exact")


def _cache_dir() -> Path:
    from kernelevo import runtime

    return runtime.cache_dir()


def default_model(config: Config) -> str:
    """The model a run calls when none is named: kernelevo.toml's default_model, else the provider whose key is set."""
    chosen = config.raw.get("default_model")
    if chosen:
        return str(chosen)
    for variable, spec in DEFAULT_MODELS:
        if os.environ.get(variable):
            return spec
    raise SettingsError("no model and no API key: export ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass "
                        "--model local:MODEL@http://host:port/v1 for a local server")


def _model_origin(config: Config) -> str:
    if config.raw.get("default_model"):
        return "kernelevo.toml: default_model ="
    return next((f"${variable}" for variable, _ in DEFAULT_MODELS if os.environ.get(variable)), "default")


def device_of(device: str | None) -> str:
    """A device as the judge takes it, cuda:N or cpu, checked against the devices this machine has."""
    import torch

    if device in (None, "auto"):
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        device = "cuda:0"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SettingsError("no CUDA device is visible here; use --device cpu to judge C/C++ candidates on the CPU")
        index = device.split(":", 1)[1] if ":" in device else "0"
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            raise SettingsError(f"{device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return device
    if device != "cpu":
        raise SettingsError(f"--device {device}: use cuda, cuda:N or cpu")
    return device


def local_devices(device: str | None, gpus: str) -> tuple[str, ...]:
    """This machine's judge devices: the CPU, the one GPU `device` names (cuda:N), or the `gpus` list."""
    dev = device_of(device)
    if dev == "cpu":
        return ("cpu",)
    if device not in (None, "auto", "cuda") and gpus == "all":
        return (dev,)
    import torch

    count = torch.cuda.device_count()
    if gpus == "all":
        return tuple(f"cuda:{i}" for i in range(count))
    picked = [g.strip() for g in gpus.split(",") if g.strip()]
    if not picked or not all(g.isdigit() and int(g) < count for g in picked):
        raise SettingsError(f"--gpus {gpus}: use all, or indices below {count} such as 0,1")
    return tuple(f"cuda:{g}" for g in picked)


def judge_devices(executor: str, device: str | None, gpus: str, address: str | None) -> tuple[str, ...]:
    """The judge's devices: this machine's (local_devices), or on a Ray cluster one per GPU of it (the CPU
    backend: "cpu", its jobs spread over the nodes' CPUs)."""
    if executor == "local":
        return local_devices(device, gpus)
    if device not in (None, "auto", "cuda", "cpu"):
        raise SettingsError(f"--device {device}: with --executor ray use cuda or cpu; Ray places each job on a free "
                            "GPU")
    if gpus != "all":
        raise SettingsError("--gpus picks this machine's GPUs; with --executor ray every GPU of the cluster is used")
    from kernelevo.judge.api import ray_connect, ray_slots

    try:
        ray_connect(address)
        return ray_slots("cpu" if device == "cpu" else "cuda")
    except RuntimeError as exc:
        raise SettingsError(str(exc)) from None
