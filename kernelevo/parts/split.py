"""Split a recorded model into parts and write each as a KernelBench task file.

Which modules become parts: the model's children, with containers (ModuleList, ModuleDict,
Sequential) opened into theirs. A module that cannot be rebuilt standalone (constructor arguments
not seen or not plain values, a class defined inside a function, a call that passes something other
than tensors and numbers, an output that is not a tensor, a written file that does not give back its
call site's output) is opened into its children instead, and the reason is kept. Identical parts
(the same class, constructor arguments and input shapes: 24 transformer layers) fold into one task
whose time is the sum of its call sites. The N hottest tasks are written; split.json maps each task
to its call sites and their shares of the model's time.
"""
from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .record import Recording, Site
from .task_file import check, task_text

SPLIT_JSON = "split.json"


@dataclass
class Part:
    """One task: the call sites of identical parts, in model order."""
    sites: list[Site]
    params: tuple[str, ...]  # the constructor's parameters given positionally
    init: tuple  # their values
    inputs: tuple  # the first call site's forward arguments, positionally
    name: str = ""
    file: str = ""
    checked: str = ""  # how the written file matched its call site

    @property
    def cls(self) -> type:
        return type(self.sites[0].module)

    @property
    def ms(self) -> float:
        return sum(s.ms for s in self.sites)


def split_model(model: Path | str, out_dir: Path, device: str, top: int, seed: int = 0,
                inputs: str | None = None, headroom: bool = False, cache_dir: Path | None = None,
                on_status=lambda text: None) -> dict:
    """Build the model (a KernelBench-format file, or `pkg.module:make_model` with `inputs` naming
    `pkg.module:make_inputs`), record it on `device`, and write its `top` hottest parts into
    `out_dir`; with `headroom`, each part also timed under torch.compile against its speed of light,
    and the parts ranked by what the compiler leaves (headroom.py). TaskError (one line) for a model
    that cannot be used."""
    import torch

    from .record import build, record

    make, args, get_inputs, source = _model_of(str(model), inputs)
    torch.manual_seed(seed)
    built, inits = build(make, *args)
    recording = record(built, list(get_inputs()), device, inits)
    data = split(recording, source, str(model), out_dir, top)
    if headroom and data["tasks"]:
        from .headroom import measure

        data = measure(data, out_dir, device, cache_dir, seed, on_status)
        (out_dir / SPLIT_JSON).write_text(json.dumps(data, indent=1) + "\n")
    return data


def _model_of(spec: str, inputs: str | None) -> tuple[Any, tuple, Any, str]:
    """(factory, its arguments, inputs factory, the source part classes are copied from): a file's
    source, or "" for a factory in an importable module (its parts are imported from there)."""
    from kernelevo.tasks import TaskError, load_task

    if spec.endswith(".py") or Path(spec).is_file():
        task = load_task(spec)
        return task.model_cls, task.init_args, task.get_inputs, task.source
    if ":" not in spec or not inputs:
        raise TaskError(f"{spec}: give a KernelBench-format model file, or pkg.module:make_model with "
                        "--inputs pkg.module:make_inputs")
    return _named(spec), (), _named(inputs), ""


def _named(spec: str) -> Any:
    """The object `pkg.module:name` names; TaskError (one line) when it cannot be imported."""
    import importlib

    from kernelevo.tasks import TaskError

    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise TaskError(f"{spec}: cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not callable(found):
        raise TaskError(f"{spec}: is a {type(found).__name__}, not a function that builds the model or its inputs")
    return found


def split(recording: Recording, source: str, model_path: str, out_dir: Path, top: int) -> dict:
    """Write the `top` hottest parts of `recording` into `out_dir` with split.json; returns its data."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frontier = list(recording.sites[""].children)
    written: list[Part] = []
    notes: list[str] = []
    candidates: list[Part] = []
    while frontier:
        site = recording.sites[frontier.pop(0)]
        part, why = _as_part(site)
        if part is None:
            if why:
                notes.append(f"{site.path} ({type(site.module).__name__}): {why}" +
                             ("; split into its children" if site.children else "; left out"))
            frontier[:0] = site.children
            continue
        candidates.append(part)
    for part in sorted(_fold(candidates), key=lambda p: -p.ms):
        if len(written) >= top:
            break
        reason = _write(part, recording, source, out_dir, {p.name for p in written})
        if reason:  # the file does not rebuild its call site: open the first site into its children
            notes.append(f"{part.sites[0].path} ({part.cls.__name__}): {reason}; left out")
            continue
        written.append(part)
    data = _split_data(recording, model_path, written, notes)
    (out_dir / SPLIT_JSON).write_text(json.dumps(data, indent=1) + "\n")
    return data


def _as_part(site: Site) -> tuple[Part | None, str]:
    """The site as a part, or (None, why not); why is "" for what is only opened (containers, unused)."""
    import torch

    module = site.module
    if isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Sequential)):
        return None, ""
    if site.calls == 0:
        return None, "" if site.children else "never called"
    cls = type(module)
    if "<locals>" in cls.__qualname__:
        return None, "its class is defined inside a function"
    if cls.__name__ == "Model":
        return None, "its class is named Model, the name a task gives its reference"
    if site.init is None:
        return None, "its constructor was not seen (built outside the model's constructor)"
    try:
        params, init = _positional(cls.__init__, site.init[0], site.init[1], constructor=True)
    except ValueError as exc:
        return None, f"constructor {exc}"
    try:
        _, inputs = _positional(module.forward, site.args, site.kwargs, constructor=False)
    except ValueError as exc:
        return None, f"forward {exc}"
    bad_in = [x for x in inputs if not isinstance(x, (torch.Tensor, int, float, bool))]
    if bad_in:
        return None, f"forward takes a {type(bad_in[0]).__name__} (a task's inputs are tensors and numbers)"
    if not any(isinstance(x, torch.Tensor) for x in inputs):
        return None, "forward takes no tensor"
    if not isinstance(site.output, torch.Tensor):
        return None, f"forward returns a {type(site.output).__name__}, not a tensor"
    return Part([site], params, init, inputs), ""


def _positional(fn, args: tuple, kwargs: dict, constructor: bool) -> tuple[tuple[str, ...], tuple]:
    """(names, values) of the arguments bound to `fn`'s parameters, in order, all positional;
    ValueError when they cannot be (keyword-only or **kwargs parameters; for a constructor, values
    that are not plain: a task's get_init_inputs() writes them out)."""
    signature = inspect.signature(fn)
    self_name = next(iter(signature.parameters), None) if constructor else None
    try:
        bound = signature.bind(*((None,) if constructor else ()), *args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"arguments do not bind to its signature: {exc}") from exc
    names, values = [], []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if name == self_name:
            continue
        if kind == inspect.Parameter.VAR_KEYWORD and value:
            raise ValueError(f"takes {', '.join(value)} through **{name}")
        if kind == inspect.Parameter.KEYWORD_ONLY:
            if _plain(value) and value == signature.parameters[name].default:
                continue  # its default: nothing to pass
            raise ValueError(f"takes {name} by keyword only")
        if kind == inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}_{i}" for i in range(len(value))]
            values += list(value)
        elif kind != inspect.Parameter.VAR_KEYWORD:
            names.append(name)
            values.append(value)
    # the trailing arguments that are their parameters' defaults need not be given
    while names and names[-1] in signature.parameters and _plain(values[-1]) and \
            values[-1] == signature.parameters[names[-1]].default:
        names.pop()
        values.pop()
    if constructor:
        for name, value in zip(names, values):
            if not _plain(value):
                raise ValueError(f"argument {name} is a {type(value).__name__}, not a plain value")
    return tuple(names), tuple(values)


def _plain(value: Any) -> bool:
    import torch

    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return True
    return isinstance(value, (tuple, list)) and all(_plain(v) for v in value)


def _signature(part: Part) -> tuple:
    import torch

    shapes = tuple((tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x) for x in part.inputs)
    return (part.cls.__module__, part.cls.__qualname__, repr(part.init), shapes)


def _fold(parts: list[Part]) -> list[Part]:
    groups: dict[tuple, Part] = {}
    for part in parts:
        key = _signature(part)
        if key in groups:
            groups[key].sites += part.sites
        else:
            groups[key] = part
    return list(groups.values())


def _write(part: Part, recording: Recording, source: str, out_dir: Path, taken: set[str]) -> str:
    """Write the part's task file and check it rebuilds its first call site; "" or why not."""
    name = _name(part.cls.__name__, taken)
    path = out_dir / f"{name}.py"
    path.write_text(task_text(part, recording, source))
    reason, how = check(path, part)
    if reason:
        path.unlink()
        return reason
    part.name, part.file, part.checked = name, path.name, how
    return ""


def _name(class_name: str, taken: set[str]) -> str:
    base = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name).lower().strip("_") or "part"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _split_data(recording: Recording, model_path: str, parts: list[Part], notes: list[str]) -> dict:
    """split.json: the model's time (alone, and with a wait around every module: the basis of the
    shares), then each task with its call sites, then the notes."""
    return {
        "model": model_path, "device": recording.device, "device_name": recording.device_name,
        "model_ms": round(recording.total_ms, 4), "model_ms_waiting": round(recording.sites[""].ms, 4),
        "tasks": [{"task": p.file, "class": p.cls.__qualname__, "init": list(map(repr, p.init)),
                   "inputs": _describe(p.inputs), "ms": round(p.ms, 4), "share": _round(recording.share(p.ms)),
                   "checked": p.checked,
                   "call_sites": [{"path": s.path, "calls": s.calls, "ms": round(s.ms, 4),
                                   "share": _round(recording.share(s.ms))}
                                  for s in p.sites]} for p in parts],
        "notes": notes,
    }


def _describe(values: tuple) -> list[str]:
    import torch

    return [f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)
            for x in values]
