"""Run a model once with eyes on every submodule: the arguments each was constructed with, what its
first call received and returned, how often it is called and how long its calls take.

Constructor arguments are read while the model is built: for that time a profile hook sees each
module's own `__init__` entered and keeps its arguments (a module built outside the model's
constructor has none, and cannot be rebuilt standalone). Times are inclusive (a module's
children count in its own), per model forward, medians of timed forwards in which every module's
start and end wait for the device: that wait makes small modules look slower than they are, so the
figures rank parts; the model's own time is measured without hooks.
"""
from __future__ import annotations

import contextlib
import inspect
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

TIMED_FORWARDS = 5


@dataclass
class Site:
    """One submodule of the live model (`path` as named_modules gives it; "" is the model)."""
    path: str
    module: Any
    init: tuple[tuple, dict] | None = None  # (args, kwargs) as the constructor was called
    calls: int = 0  # calls per model forward
    args: tuple | None = None  # the first call's positional arguments, copied
    kwargs: dict | None = None  # and its keyword arguments
    output: Any = None  # what the first call returned, copied
    ms: float = 0.0  # inclusive time per model forward, median
    children: list[str] = field(default_factory=list)


@dataclass
class Recording:
    model: Any
    sites: dict[str, Site]
    total_ms: float  # the model's forward alone, no hooks: median of TIMED_FORWARDS
    device: str
    device_name: str

    def share(self, ms: float) -> float | None:
        """`ms` as a share of the model's time measured the same way (with every module's wait)."""
        root = self.sites[""].ms
        return ms / root if root else None


@contextlib.contextmanager
def constructor_args() -> Iterator[dict[int, tuple[tuple, dict]]]:
    """While open, the arguments of every nn.Module's constructor, by id of the module: the first
    `__init__` entered for an instance is its own class's, called with what the caller passed."""
    import torch.nn as nn

    seen: dict[int, tuple[tuple, dict]] = {}
    alive: list = []  # the instances, so that no id is reused while the map is in use

    def watch(frame, event, arg):
        code = frame.f_code
        if event != "call" or code.co_name != "__init__" or not code.co_argcount:
            return
        names, values = code.co_varnames, frame.f_locals
        instance = values.get(names[0])
        if not isinstance(instance, nn.Module) or id(instance) in seen:
            return
        n, k = code.co_argcount, code.co_kwonlyargcount
        args = [values[name] for name in names[1:n]]
        kwargs = {name: values[name] for name in names[n:n + k]}
        if code.co_flags & inspect.CO_VARARGS:
            args += list(values[names[n + k]])
        if code.co_flags & inspect.CO_VARKEYWORDS:
            kwargs.update(values[names[n + k + bool(code.co_flags & inspect.CO_VARARGS)]])
        seen[id(instance)] = (tuple(args), kwargs)
        alive.append(instance)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


def build(make, *args) -> tuple[Any, dict[int, tuple[tuple, dict]]]:
    """`make(*args)` with the constructor arguments of every module it built, by id of the module."""
    with constructor_args() as seen:
        model = make(*args)
    return model, dict(seen)


def copy(value: Any) -> Any:
    """A detached copy of tensors, also inside tuples, lists and dicts; other values as they are."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(copy(v) for v in value)
    if isinstance(value, dict):
        return {k: copy(v) for k, v in value.items()}
    return value


def record(model, inputs: list, device: str, inits: dict[int, tuple[tuple, dict]]) -> Recording:
    """Every submodule's site: constructor arguments, first call, calls and time per forward."""
    import torch

    model = model.to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    sites = {path: Site(path, m, inits.get(id(m))) for path, m in model.named_modules()}
    for path, site in sites.items():
        site.children = [f"{path}.{name}" if path else name for name, _ in site.module.named_children()]
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    with torch.no_grad():
        model(*inputs)  # warm-up: lazy initialisation, allocator, kernels loaded
        _first_calls(model, sites, inputs)
        _time_sites(model, sites, inputs, sync)
        total = []
        for _ in range(TIMED_FORWARDS):
            sync()
            start = time.perf_counter()
            model(*inputs)
            sync()
            total.append((time.perf_counter() - start) * 1e3)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return Recording(model, sites, statistics.median(total), device, name)


def _first_calls(model, sites: dict[str, Site], inputs: list) -> None:
    by_module = {id(s.module): s for s in sites.values()}

    def before(module, args, kwargs):
        site = by_module[id(module)]
        site.calls += 1
        if site.calls == 1:
            site.args, site.kwargs = copy(tuple(args)), copy(dict(kwargs))

    def after(module, args, kwargs, output):
        site = by_module[id(module)]
        if site.calls == 1 and site.output is None:
            site.output = copy(output)

    with _hooks(model, before, after):
        model(*inputs)


def _time_sites(model, sites: dict[str, Site], inputs: list, sync) -> None:
    by_module = {id(s.module): s for s in sites.values()}
    started: dict[int, list[float]] = {}
    spent: dict[int, float] = {}

    def before(module, args, kwargs):
        sync()
        started.setdefault(id(module), []).append(time.perf_counter())

    def after(module, args, kwargs, output):
        sync()
        key = id(module)
        spent[key] = spent.get(key, 0.0) + (time.perf_counter() - started[key].pop()) * 1e3

    per_forward: dict[int, list[float]] = {}
    with _hooks(model, before, after):
        for _ in range(TIMED_FORWARDS):
            spent.clear()
            model(*inputs)
            for key in by_module:
                per_forward.setdefault(key, []).append(spent.get(key, 0.0))
    for key, site in by_module.items():
        site.ms = statistics.median(per_forward[key])


@contextlib.contextmanager
def _hooks(model, before, after) -> Iterator[None]:
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
