"""How a live submodule is built again: its class and constructor arguments, and where they came from.

Three sources, tried in order, each named in split.json:
- "constructor": the arguments its own `__init__` received while the model was built (record.py);
- "copy": a module made by `copy.deepcopy` never runs `__init__` (nn.TransformerEncoder clones the layer
  it is given, and so do model files that stack copies of one block); its arguments are those of the
  instance built in the constructor it is a copy of: one of the same class, attribute values and
  parameter and buffer shapes, all the way down;
- "attributes": torch's modules keep most constructor arguments as attributes of the same name
  (`in_features`, `hidden_size`, `batch_first`); where every parameter without a default is found so,
  the arguments are read back (a tensor in a flag's place, such as `bias`, means True; None means False).

Arguments are written as the call gave them: positionally, or by keyword (keyword-only parameters and
`**kwargs`), defaults left out. A module given as an argument (a residual block's `downsample`, a
Sequential's layers, the layer a TransformerEncoder clones) is written as its own construction, with
its sizes as written; plain values at the top level become the task's constructor arguments. Whatever
the source, split's check rebuilds the part from the written file and compares it with its call site,
so an argument read wrongly leaves the part out with its reason and never writes a wrong task.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

HOW = {"constructor": "its constructor's arguments", "copy": "a copy of an instance built in the constructor",
       "attributes": "constructor arguments read back from its attributes"}


@dataclass(frozen=True)
class Arg:
    """One argument of a constructor call: a plain value, or a module as its own Construction."""
    name: str  # the parameter's name; `args_0`... for the elements of *args
    value: Any
    keyword: bool  # passed by keyword (a keyword-only parameter, or through **kwargs)
    lifted: str = ""  # inside a module argument: the task's constructor parameter this value is (fold.py)


@dataclass(frozen=True)
class Construction:
    cls: type
    args: tuple[Arg, ...]
    how: str  # a key of HOW

    @property
    def params(self) -> tuple[str, ...]:
        """The task Model's constructor parameters: the plain arguments given at the top level, then the
        values inside module arguments lifted to parameters (a folded part's sizes)."""
        return tuple(a.lifted or a.name for path, a in self.leaves() if len(path) == 1 or a.lifted)

    @property
    def values(self) -> tuple:
        return tuple(a.value for path, a in self.leaves() if len(path) == 1 or a.lifted)

    def leaves(self, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Arg]]:
        """Every plain argument with its path of argument names: its own first, then those inside its
        module arguments, depth first."""
        own = [((*path, a.name), a) for a in self.args if not isinstance(a.value, Construction)]
        return own + [leaf for a in self.args if isinstance(a.value, Construction)
                      for leaf in a.value.leaves((*path, a.name))]

    def classes(self) -> list[type]:
        """Every class the construction names, this one first."""
        found = [self.cls]
        for a in self.args:
            if isinstance(a.value, Construction):
                found += [c for c in a.value.classes() if c not in found]
        return found


class Constructions:
    """How each module of a built model is constructed, from what the build saw (`seen`: constructor
    arguments by id of the module, with the instances themselves in `seen.instances`)."""

    def __init__(self, seen: dict):
        self.seen = seen
        self._prints: dict[int, tuple] = {}

    def of(self, module) -> tuple[Construction | None, str]:
        """(the module's construction, "") or (None, why it cannot be rebuilt standalone)."""
        init, how = self.seen.get(id(module)), "constructor"
        if init is None:
            init, how = self._copied_from(module), "copy"
        if init is None:
            init, how = _from_attributes(module), "attributes"
        if init is None:
            return None, "its constructor was not seen and its arguments are not kept as attributes"
        try:
            return Construction(type(module), self._args(type(module).__init__, *init), how), ""
        except ValueError as exc:
            return None, f"constructor {exc}"

    def _args(self, init_fn, args: tuple, kwargs: dict) -> tuple[Arg, ...]:
        found = []
        for arg in bound_args(init_fn, args, kwargs):
            value = arg.value
            if _is_module(value):
                inner, why = self.of(value)
                if inner is None:
                    raise ValueError(f"argument {arg.name} is a {type(value).__name__}: {why}")
                value = inner
            elif not plain(value):
                raise ValueError(f"argument {arg.name} is a {type(value).__name__}, not a plain value or a module")
            found.append(Arg(arg.name, value, arg.keyword))
        return tuple(found)

    def _copied_from(self, module) -> tuple[tuple, dict] | None:
        """The constructor arguments of the one instance `module` is a copy of (several with the same
        arguments count as one); None when none, or several built differently, look the same."""
        mine = self._print(module)
        twins = {repr(self.seen[id(m)]): self.seen[id(m)] for m in getattr(self.seen, "instances", ())
                 if m is not module and type(m) is type(module) and self._print(m) == mine}
        return next(iter(twins.values())) if len(twins) == 1 else None

    def _print(self, module) -> tuple:
        key = id(module)
        if key not in self._prints:
            self._prints[key] = fingerprint(module)
        return self._prints[key]


def fingerprint(module) -> tuple:
    """What a copy keeps of a module: its class, public attribute values, parameter and buffer shapes
    and names, and the same of its children."""
    attrs = tuple(sorted((k, _attr(v)) for k, v in vars(module).items() if not k.startswith("_") and k != "training"))
    tensors = tuple((n, tuple(t.shape)) for n, t in [*module._parameters.items(), *module._buffers.items()]
                    if t is not None)
    children = tuple((n, fingerprint(c)) for n, c in module.named_children())
    return (type(module).__module__, type(module).__qualname__, attrs, tensors, children)


def _attr(value: Any) -> Any:
    import torch

    if plain(value):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape))
    if callable(value) and not _is_module(value):
        return ("callable", id(value))  # a copy keeps functions by reference
    return ("object", type(value).__qualname__)


def _from_attributes(module) -> tuple[tuple, dict] | None:
    """Constructor arguments read back from attributes named as the parameters; None where a
    parameter without a default is not kept (defaults stand for the others)."""
    import torch

    try:
        signature = inspect.signature(type(module).__init__)
    except (TypeError, ValueError):
        return None
    args, kwargs = [], {}
    for name, p in list(signature.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in vars(module) or name in module._parameters or name in module._buffers or name in module._modules:
            value = getattr(module, name)
            if isinstance(value, torch.Tensor) and isinstance(p.default, bool):
                value = True
            elif value is None and isinstance(p.default, bool):
                value = False
        elif p.default is not p.empty:
            value = p.default
        else:
            return None
        if p.kind == p.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


@dataclass(frozen=True)
class Bound:
    name: str
    value: Any
    keyword: bool


def bound_args(fn, args: tuple, kwargs: dict) -> list[Bound]:
    """A constructor call's arguments bound to `fn`'s parameters (self left out), in order, each
    positional or by keyword as the parameter requires; trailing positional arguments equal to their
    defaults and keywords equal to theirs left out. ValueError where they do not bind."""
    signature = inspect.signature(fn)
    params = signature.parameters
    self_name = next(iter(params), None)
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"arguments do not bind to its signature: {exc}") from exc
    positional, keyword = [], []
    skipped = False  # a default that cannot be written (a function) was left out: what follows goes by keyword
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if name == self_name:
            continue
        if kind == inspect.Parameter.VAR_POSITIONAL:
            positional += [Bound(f"{name}_{i}", v, False) for i, v in enumerate(value)]
        elif kind == inspect.Parameter.VAR_KEYWORD:
            keyword += [Bound(k, v, True) for k, v in value.items()]
        elif kind == inspect.Parameter.KEYWORD_ONLY:
            if not is_default(value, params[name].default):
                keyword.append(Bound(name, value, True))
        elif kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and not plain(value) and \
                is_default(value, params[name].default):
            skipped = True
        elif skipped and kind == inspect.Parameter.POSITIONAL_OR_KEYWORD:
            if not is_default(value, params[name].default):
                keyword.append(Bound(name, value, True))
        else:
            positional.append(Bound(name, value, False))
    while positional and positional[-1].name in params and \
            is_default(positional[-1].value, params[positional[-1].name].default):
        positional.pop()
    return positional + keyword


def is_default(value: Any, default: Any) -> bool:
    """`value` is the parameter's default (the same object, or an equal plain value of its type)."""
    if default is inspect.Parameter.empty:
        return False
    if value is default:
        return True
    return plain(value) and plain(default) and type(value) is type(default) and value == default


def _is_module(value: Any) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)


def plain(value: Any) -> bool:
    """A value a task file writes as a literal: numbers, strings, None, dtypes, tuples and lists of them."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return True
    return isinstance(value, (tuple, list)) and all(plain(v) for v in value)


def literal(value: Any) -> str:
    """Python source for a plain value (numbers, strings, None, dtypes, tuples and lists of them)."""
    import torch

    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, tuple):
        return f"({literal(value[0])},)" if len(value) == 1 else "(" + ", ".join(literal(v) for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    return repr(value)
