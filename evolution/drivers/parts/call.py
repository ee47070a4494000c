"""A call site's forward call as a task states it, and as the assembled model makes it again.

The task's inputs are the call's tensors, wherever they sit (`lstm(x, (h0, c0))` takes x, h0 and c0),
one input per distinct tensor (self-attention's `attn(x, x, x)` takes x once: a kernel may use that
query, key and value are one). Everything else the site passed (None, flags, numbers, strings) is
written into the call as given; keywords equal to their defaults are left out. The output keeps its
structure: the task returns its tensors (one, or a flat tuple), less those the model never uses
(attention weights it discards, an RNN's final state), which are left out of the comparison and said
so; in the assembled model the call site gets None in their place.

Specs are nested tuples, so that split.json and the drop-in file can hold them as literals:
("in", k) the k-th input; ("const", value); ("tuple" | "list", (spec, ...)); ("dict", ((key, spec), ...));
in an output, ("out", j) the j-th tensor the task returns and ("unused",) one it leaves out.
"""
from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from typing import Any

from .construct import is_default, literal, plain


@dataclass(frozen=True)
class Call:
    args: tuple  # a spec per positional argument
    kwargs: tuple  # ((name, spec), ...)
    output: Any  # the output's spec
    names: tuple[str, ...]  # the inputs' names, in order
    left_out: tuple[str, ...] = ()  # the output tensors the model never uses, e.g. "output[1]: float32[2, 64, 64]"
    # ((name, default), ...): the forward's keywords left out of the call, with their plain defaults: the parent
    # may pass them so (nn.TransformerEncoder gives each layer src_mask=None), the kernel in place takes them there
    defaults: tuple = ()

    @property
    def plain(self) -> bool:
        """A call of tensors in order returning one tensor: the task needs no forward of its own."""
        return not self.kwargs and self.output == ("out", 0) and self.args == tuple(("in", k) for k in range(len(self.args)))

    @property
    def outputs(self) -> int:
        return len(_paths(self.output, ""))

    def spec(self) -> tuple:
        return (self.args, self.kwargs, self.output)


def of(fn, args: tuple, kwargs: dict, output: Any, unused: frozenset[int] = frozenset()) -> tuple[Call, list]:
    """(the call of `fn` with these arguments and this output, its input tensors); `unused` holds the
    indices, among the output's tensors in order, that the model never uses. ValueError (why) for a
    call a task cannot state."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names, tensors = [], []
    by_id: dict[int, int] = {}

    def walk(value, name):
        import torch

        if isinstance(value, torch.Tensor):
            if id(value) not in by_id:
                by_id[id(value)] = len(tensors)
                tensors.append(value)
                names.append(_unique(name, names))
            return ("in", by_id[id(value)])
        if type(value) in (tuple, list) and not plain(value):
            return (type(value).__name__, tuple(walk(v, f"{name}_{i}") for i, v in enumerate(value)))
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return ("dict", tuple((k, walk(v, f"{name}_{k}")) for k, v in value.items()))
        if plain(value) and not _dtype_in(value):
            return ("const", value)
        raise ValueError(f"takes a {type(value).__name__} (a task states tensors, numbers, strings and None)")

    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    specs = tuple(walk(v, positional[i].name if i < len(positional) else f"x{i}") for i, v in enumerate(args))
    defaults = {p.name: p.default for p in params}
    keywords = tuple((k, walk(v, k)) for k, v in kwargs.items() if not is_default(v, defaults.get(k, inspect.Parameter.empty)))
    if not tensors:
        raise ValueError("takes no tensor")
    out, left = _output(output, unused)
    if not _paths(out, ""):
        raise ValueError("returns no tensor the model uses")
    given = {k for k, _ in keywords} | {p.name for p in positional[:len(args)]}
    left_at = tuple((p.name, p.default) for p in params if p.name not in given and p.default is not p.empty
                    and plain(p.default) and not _dtype_in(p.default))
    return Call(specs, keywords, out, tuple(names), tuple(left), left_at), tensors


def _output(output: Any, unused: frozenset[int]) -> tuple[Any, list[str]]:
    import torch

    count, kept, left = [0], [0], []

    def walk(value, where):
        if isinstance(value, torch.Tensor):
            i, count[0] = count[0], count[0] + 1
            if i in unused:
                left.append(f"{where}: {describe(value)}")
                return ("unused",)
            j, kept[0] = kept[0], kept[0] + 1
            return ("out", j)
        if type(value) in (tuple, list) and not plain(value):
            return (type(value).__name__, tuple(walk(v, f"{where}[{i}]") for i, v in enumerate(value)))
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return ("dict", tuple((k, walk(v, f"{where}[{k!r}]")) for k, v in value.items()))
        if plain(value) and not _dtype_in(value):
            return ("const", value)
        raise ValueError(f"returns a {type(value).__name__} (a task returns tensors)")

    return walk(output, "output"), left


def tensors_of(value: Any) -> list:
    """The tensors in a (nested) value, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    return []


def used(call: Call, output: Any) -> list:
    """The tensors of a forward's `output` that the task returns, in order."""
    found: list = []

    def walk(spec, value):
        if spec[0] == "out":
            found.append(value)
        elif spec[0] in ("tuple", "list"):
            for s, v in zip(spec[1], value):
                walk(s, v)
        elif spec[0] == "dict":
            for k, s in spec[1]:
                walk(s, value[k])

    walk(call.output, output)
    return found


def forward_text(call: Call) -> str:
    """The task Model's forward: the call as the site made it, returning the tensors the model uses."""
    args = [expr(s, call.names) for s in call.args] + [f"{k}={expr(s, call.names)}" for k, s in call.kwargs]
    head = f"    def forward(self, {', '.join(call.names)}):\n"
    made = f"super().forward({', '.join(args)})"
    if call.output == ("out", 0):
        return head + f"        return {made}\n"
    paths = _paths(call.output, "out")
    note = "".join(f"        # left out, the model never uses it: {what}\n" for what in call.left_out)
    return head + f"        out = {made}\n" + note + f"        return {', '.join(paths)}\n"


def expr(spec, names: tuple[str, ...]) -> str:
    kind = spec[0]
    if kind == "in":
        return names[spec[1]]
    if kind == "const":
        return literal(spec[1])
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {expr(s, names)}" for k, s in spec[1]) + "}"
    inner = [expr(s, names) for s in spec[1]]
    if kind == "tuple":
        return f"({inner[0]},)" if len(inner) == 1 else "(" + ", ".join(inner) + ")"
    return "[" + ", ".join(inner) + "]"


def _paths(spec, base: str) -> list[str]:
    """Where each returned tensor sits in the output: ["out[0]", "out[1][1]"] (base "out")."""
    kind = spec[0]
    if kind == "out":
        return [base]
    if kind in ("tuple", "list"):
        return [p for i, s in enumerate(spec[1]) for p in _paths(s, f"{base}[{i}]")]
    if kind == "dict":
        return [p for k, s in spec[1] for p in _paths(s, f"{base}[{k!r}]")]
    return []


def parse(text: str | None, inputs: int) -> tuple:
    """A spec written by `literal(call.spec())` read back; a plain call of `inputs` inputs where none
    was written (a split.json from before calls were recorded)."""
    if not text:
        return (tuple(("in", k) for k in range(inputs)), (), ("out", 0))
    return ast.literal_eval(text)


def parse_defaults(text: str | None) -> tuple:
    """Call.defaults written by `literal` read back; none where none was written (a split.json from before)."""
    return ast.literal_eval(text) if text else ()


def describe(x: Any) -> str:
    return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"


def _unique(name: str, taken: list[str]) -> str:
    name = re.sub(r"\W", "_", name)
    name = name if name.isidentifier() and name not in ("self", "out") else f"x_{name}"
    found, n = name, 2
    while found in taken:
        found, n = f"{name}_{n}", n + 1
    return found


def _dtype_in(value: Any) -> bool:
    import torch

    if isinstance(value, torch.dtype):
        return True
    return isinstance(value, (tuple, list)) and any(_dtype_in(v) for v in value)
