"""`kernelevo optimize --show-settings`: a search's resolved settings, branch by branch, each with where its
value came from (a flag, kernelevo.toml, the environment, or the default), as the search would be given them."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator

from rich.console import Console
from rich.table import Table

# A leaf of the tree -> the command's parameter that sets it (click's parameter names).
FLAGS = {
    "run.models": "model", "run.model_for": "model_for", "run.devices": "device", "run.fmt": "fmt",
    "run.baseline": "baseline", "run.seed": "seed", "run.archive_path": "archive", "run.out_dir": "out",
    "run.cache_dir": "cache_dir", "run.resume": "resume", "run.seed_from": "seed_from", "run.force": "force",
    "search.children_per_generation": "children", "search.islands": "islands", "search.llm_concurrency": "concurrency",
    "search.profile_per_generation": "profile_top", "search.ncu": "ncu",
    "budget.max_cost_usd": "max_cost_usd", "budget.max_llm_calls": "max_llm_calls", "budget.max_wall_s": "max_wall_time",
    "budget.generations": "generations", "budget.plateau_generations": "plateau",
    "judge.policy": "policy", "judge.trials": "trials", "judge.shapes": "shapes",
    "judge.compile_baseline": "compile_baseline", "judge.timing.max_seconds": "timing_seconds",
    "judge.executor": "executor", "judge.ray_address": "ray_address",
}
# A leaf -> its key in kernelevo.toml, where it has one.
CONFIG_KEYS = {"run.models": "ensemble", "run.model_for": "model_for", "run.fmt": "format", "run.baseline": "baseline",
               "run.archive_path": "archive", "judge.executor": "executor"}
ENVIRONMENT = {"run.archive_path": "KERNELEVO_ARCHIVE", "run.cache_dir": "KERNELEVO_CACHE_DIR",
               "judge.ray_address": "RAY_ADDRESS"}
# Set when the judge starts, from the run: not settings of their own.
RUNS_OWN = {"judge.devices", "judge.seed", "judge.sol"}
RUN_FIELDS = ("task_path", "models", "model_for", "devices", "fmt", "baseline", "seed", "archive_path", "out_dir",
              "cache_dir", "resume", "seed_from", "force")


def leaves(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every plain value under a record, nested records opened."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from leaves(f"{prefix}.{f.name}", getattr(value, f.name))
    else:
        yield prefix, value


def settings_rows(options: Any, given: frozenset[str]) -> list[tuple[str, str, str]]:
    """(setting, value, where it came from) for a search's options (OptimizeOptions): the run's own, then the
    branches the search, the budget and the judge are handed. `given`: the parameters set on the command line."""
    tree = [(f"run.{name}", getattr(options, name)) for name in RUN_FIELDS]
    for branch, record in (("search", options.settings), ("budget", options.budget), ("judge", options.judge)):
        tree += [(path, value) for path, value in leaves(branch, record) if path not in RUNS_OWN]
    return [(path, _text(value), _origin(path, given, options.config)) for path, value in tree]


def _origin(path: str, given: frozenset[str], config: Any) -> str:
    flag = FLAGS.get(path)
    if path == "run.task_path":
        return "argument"
    if flag in given or (path == "run.devices" and "gpus" in given):
        return "flag"
    key = CONFIG_KEYS.get(path)
    if key and config.raw.get(key) not in (None, "", [], {}):
        return f"kernelevo.toml: {key} ="
    variable = ENVIRONMENT.get(path)
    if variable and os.environ.get(variable):
        return f"${variable}"
    return "default"


def _text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ", ".join(_text(v) if not isinstance(v, tuple) else "=".join(map(str, v)) for v in value) or "-"
    return "-" if value is None else str(value)


def print_settings(options: Any, given: frozenset[str]) -> None:
    path = options.config.path
    read = f"; kernelevo.toml read from {path}" if path else "; no kernelevo.toml found"
    table = Table(title=f"settings as the search is given them{read}", title_justify="left")
    for column in ("setting", "value", "from"):
        table.add_column(column, overflow="fold")
    for row in settings_rows(options, given):
        table.add_row(*row)
    Console().print(table)
