"""Run a model once with eyes on every submodule: the arguments each was constructed with, what its
first call received and returned, how often it is called and how long its calls take.

Constructor arguments are read while the model is built: for that time a profile hook sees each
module's own `__init__` entered and keeps its arguments (construct.py finds them for modules built
otherwise: copies, or from their attributes). A module that returns its input unchanged, or a view
of it (Dropout in eval, Identity, Flatten), does no work and is marked so. Which tensors of a
site's output the model uses is found on demand: each is replaced by NaN, and one the model's output
does not turn NaN with is not used (an RNN's final state, attention weights it discards). Times are inclusive (a module's
children count in its own), per model forward, the fastest of timed forwards (other work on the
machine only ever adds time) in which every module's
start and end wait for the device: that wait makes small modules look slower than they are, so the
figures rank parts; the model's own time is measured without hooks.
"""
from __future__ import annotations

import contextlib
import inspect
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
    no_work: bool = False  # the first call returned its input unchanged, or a view of it
    ms: float = 0.0  # inclusive time per model forward, the fastest
    children: list[str] = field(default_factory=list)


@dataclass
class Recording:
    model: Any
    sites: dict[str, Site]
    total_ms: float  # the model's forward alone, no hooks: the fastest of TIMED_FORWARDS
    device: str
    device_name: str
    inputs: list = field(default_factory=list)  # the model's forward inputs, on the device
    seen: dict = field(default_factory=dict)  # constructor arguments by id of the module (Seen)

    def share(self, ms: float) -> float | None:
        """`ms` as a share of the model's time measured the same way (with every module's wait)."""
        root = self.sites[""].ms
        return ms / root if root else None

    def layers(self, path: str) -> int:
        """Modules under `path` (itself included) that do work and call no module that does."""
        site = self.sites[path]
        below = sum(self.layers(c) for c in site.children)
        return below or int(bool(site.calls) and not site.no_work)

    def unused_outputs(self, site: Site) -> frozenset[int]:
        """Indices, among the tensors of the site's output in order, of those the model never uses:
        replaced by NaN at every call, the model's output stays free of NaN. Only floating tensors
        are tried (the others count as used), and none where the model's own output has NaN."""
        import torch

        from .call import tensors_of

        leaves = tensors_of(site.output)
        if len(leaves) < 2:
            return frozenset()
        base = self._seeded_forward(site.module, None)
        if any(torch.isnan(t).any() for t in tensors_of(base) if t.is_floating_point()):
            return frozenset()
        unused = set()
        for i, leaf in enumerate(leaves):
            if leaf.is_floating_point():
                out = self._seeded_forward(site.module, i)
                if not any(torch.isnan(t).any() for t in tensors_of(out) if t.is_floating_point()):
                    unused.add(i)
        return frozenset(unused)

    def _seeded_forward(self, module, poisoned: int | None) -> Any:
        """The model's forward from a fixed seed (a model may draw random numbers), with the
        `poisoned`-th tensor of `module`'s output filled with NaN at each call."""
        import torch

        def poison(mod, args, output):
            return _replaced(output, poisoned, [0])

        handle = module.register_forward_hook(poison) if poisoned is not None else None
        devices = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                torch.manual_seed(0)
                return self.model(*self.inputs)
        finally:
            if handle is not None:
                handle.remove()


def _replaced(value: Any, index: int, count: list[int]) -> Any:
    """`value` with its `index`-th tensor (in order) filled with NaN."""
    import torch

    if isinstance(value, torch.Tensor):
        count[0] += 1
        return torch.full_like(value, float("nan")) if count[0] - 1 == index else value
    if type(value) in (tuple, list):
        return type(value)(_replaced(v, index, count) for v in value)
    if isinstance(value, dict):
        return {k: _replaced(v, index, count) for k, v in value.items()}
    return value


class Seen(dict):
    """Constructor arguments by id of the module, and the instances themselves (kept alive, so that
    no id is reused, and so that a copy can be matched with the instance it was copied from)."""

    def __init__(self):
        super().__init__()
        self.instances: list = []


@contextlib.contextmanager
def constructor_args() -> Iterator[Seen]:
    """While open, the arguments of every nn.Module's constructor, by id of the module: the first
    `__init__` entered for an instance is its own class's, called with what the caller passed."""
    import torch.nn as nn

    seen = Seen()
    alive = seen.instances

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


def build(make, *args) -> tuple[Any, Seen]:
    """`make(*args)` with the constructor arguments of every module it built, by id of the module."""
    with constructor_args() as seen:
        model = make(*args)
    return model, seen


def copy(value: Any, memo: dict | None = None) -> Any:
    """A detached copy of tensors, also inside tuples, lists and dicts; other values as they are. One
    tensor met twice is copied once (self-attention's query, key and value stay one tensor)."""
    import torch

    memo = {} if memo is None else memo
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = value.detach().clone()
        return memo[id(value)]
    if type(value) in (tuple, list):
        return type(value)(copy(v, memo) for v in value)
    if isinstance(value, dict):
        return {k: copy(v, memo) for k, v in value.items()}
    return value


def record(model, inputs: list, device: str, inits: dict[int, tuple[tuple, dict]]) -> Recording:
    """Every submodule's site: constructor arguments, first call, calls and time per forward."""
    import torch

    model = model.to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    sites = {path: Site(path, m, inits.get(id(m))) for path, m in model.named_modules()}
    for path, site in sites.items():
        site.children = [f"{path}.{name}" if path else name for name, _ in site.module.named_children()]
    sync = device_sync(device)
    with torch.no_grad():
        model(*inputs)  # warm-up: lazy initialisation, allocator, kernels loaded
        _first_calls(model, sites, inputs)
        _time_sites(model, sites, inputs, sync)
        total = fastest_ms(lambda: model(*inputs), sync, TIMED_FORWARDS)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return Recording(model, sites, total, device, name, inputs, inits)


def device_sync(device: str):
    """A function that waits for `device`'s queued work (nothing to wait for on the CPU)."""
    import torch

    return (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)


def fastest_ms(run, sync, times: int) -> float:
    """The fastest of `times` calls of `run`, in ms, each between two waits for the device (other work
    on the machine only ever adds time)."""
    best = float("inf")
    for _ in range(times):
        sync()
        start = time.perf_counter()
        run()
        sync()
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best


def _first_calls(model, sites: dict[str, Site], inputs: list) -> None:
    by_module = {id(s.module): s for s in sites.values()}

    def before(module, args, kwargs):
        site = by_module[id(module)]
        site.calls += 1
        if site.calls == 1:
            memo: dict = {}
            site.args, site.kwargs = copy(tuple(args), memo), copy(dict(kwargs), memo)

    def after(module, args, kwargs, output):
        site = by_module[id(module)]
        if site.calls == 1 and site.output is None:
            site.output = copy(output)
            site.no_work = _returns_input(args, kwargs, output, site)

    with _hooks(model, before, after):
        model(*inputs)


def _returns_input(args, kwargs, output, site: Site) -> bool:
    """Every tensor the call returned is one of its inputs, or a view of one, with the values it
    had before the call (an in-place ReLU returns its input too, changed: that is work)."""
    from .call import tensors_of

    before = tensors_of((site.args, site.kwargs))
    given = tensors_of((tuple(args), dict(kwargs)))
    returned = tensors_of(output)
    if not returned:
        return False
    for t in returned:
        match = [(g, b) for g, b in zip(given, before) if g.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()]
        if not match or not all(g.shape == b.shape and g.dtype == b.dtype and g.equal(b) for g, b in match):
            return False
    return True


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
    _fastest_parts(sites, per_forward, "")


def _fastest_parts(sites: dict[str, Site], per_forward: dict[int, list[float]], path: str) -> float:
    """A site's ms: the fastest of its own time (outside its submodules) plus its submodules' ms, bottom up.
    Each part counts its fastest forward and a parent is the sum of its parts: on a loaded machine a whole
    forward seldom runs without another process taking its core somewhere, while each small part often
    does, so the fastest whole forward against the fastest parts read 0.49 of a model covered (2 cores,
    one kept busy) where a quiet run read over 0.8."""
    site = sites[path]
    children = [c for c in site.children if c in sites]
    parts = sum(_fastest_parts(sites, per_forward, c) for c in children)
    mine = per_forward[id(site.module)]
    inside = [sum(per_forward[id(sites[c].module)][f] for c in children) for f in range(len(mine))]
    if site.calls and all(i <= t for t, i in zip(mine, inside)):  # its submodules ran within its calls
        site.ms = min(t - i for t, i in zip(mine, inside)) + parts
    else:  # a container never called, or submodules called from elsewhere too: its own fastest forward
        site.ms = min(mine)
    return site.ms


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
