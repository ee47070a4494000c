"""A module's forward as traced, written again with regions of it as calls of their kernels.

Records (kept in split.json, read back by the assembly): `Forward` is an opened module's forward as
torch.fx traced it on the shapes of its first call, one statement per graph node, with the guard that
says when the trace holds (the tensor arguments' shapes, dtypes and device, the other arguments'
values, and the training mode where the trace depends on it); `Spot` is a region in it: its nodes, the
names it reads and writes, and where each of its tensors comes from in the module (None: a constant
the forward made). For the drop-in file (drop_in.py): `forward_text` writes the rewritten forward as
plain Python, which calls the module's own forward where the guard does not hold, so a kernel runs
only where it was verified; `region_op` a region task's custom op and calls; `regions_wiring` what
`apply(model)` installs. Text only: no torch here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Forward:
    """An opened module's forward as traced: its parameters and how they are passed on, the guard,
    the statements by node name, the value it returns, and the global names the statements read."""
    path: str
    params: tuple[tuple[str, str | None, bool], ...]  # (name, default as source or None, keyword-only)
    renames: tuple[tuple[str, str], ...]  # (traced name, parameter name) where the tracer renamed one
    tensors: tuple[tuple[str, tuple[int, ...], str], ...]  # (parameter, shape, dtype) the trace holds for
    values: tuple[tuple[str, str], ...]  # (parameter, its value as source) the trace holds for
    training: bool | None  # the training mode the trace holds for; None where the trace is the same in both
    statements: tuple[tuple[str, str], ...]  # (node name, its statement), in order
    returns: str
    names: tuple[tuple[str, str], ...]  # (global name, the source that binds it), e.g. ("inf", "float('inf')")
    device: str = "cpu"  # the device the trace holds for, "cuda:0" (a forward may check it, or move tensors to it)

    def as_json(self) -> dict:
        return {"params": [list(p) for p in self.params], "renames": [list(r) for r in self.renames],
                "tensors": [[n, list(s), d] for n, s, d in self.tensors], "values": [list(v) for v in self.values],
                "training": self.training, "statements": [list(s) for s in self.statements],
                "returns": self.returns, "names": [list(n) for n in self.names], "device": self.device}

    @staticmethod
    def of_json(path: str, data: dict) -> Forward:
        return Forward(path, tuple((n, d, bool(k)) for n, d, k in data["params"]),
                       tuple(map(tuple, data["renames"])), tuple((n, tuple(s), d) for n, s, d in data["tensors"]),
                       tuple(map(tuple, data["values"])), data["training"], tuple(map(tuple, data["statements"])),
                       data["returns"], tuple(map(tuple, data["names"])), data.get("device", "cpu"))


@dataclass(frozen=True)
class Spot:
    """A region of a traced forward: its nodes in order, the names it reads (its inputs) and writes
    (its outputs), and each of its tensors' source: (its name in the region, the module's attribute path,
    or None for a constant the forward made)."""
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    tensors: tuple[tuple[str, str | None], ...]

    def as_json(self, parent: str) -> dict:
        return {"parent": parent, "nodes": list(self.nodes), "inputs": list(self.inputs),
                "outputs": list(self.outputs), "tensors": [list(t) for t in self.tensors]}

    @staticmethod
    def of_json(data: dict) -> Spot:
        return Spot(tuple(data["nodes"]), tuple(data["inputs"]), tuple(data["outputs"]),
                    tuple((n, s) for n, s in data["tensors"]))


def signature(forward: Forward) -> str:
    """The parameters after self, as the module's forward declares them (annotations left out)."""
    out, starred = [], False
    for name, default, keyword in forward.params:
        if keyword and not starred:
            out.append("*")
            starred = True
        out.append(name if default is None else f"{name}={default}")
    return ", ".join(out)


def passed_on(forward: Forward) -> str:
    """The arguments of the call of the module's own forward, as received."""
    return ", ".join(f"{n}={n}" if keyword else n for n, _, keyword in forward.params)


def guard(forward: Forward) -> str:
    """The condition under which the traced forward is the module's own."""
    parts = [f"isinstance({n}, torch.Tensor) and {n}.shape == {tuple(shape)!r} and {n}.dtype == {dtype} "
             f"and {n}.device == torch.device({forward.device!r})" for n, shape, dtype in forward.tensors]
    parts += [f"{n} is {v}" if v in ("None", "True", "False") else f"{n} == {v}" for n, v in forward.values]
    if forward.training is not None:
        parts.append(f"self.training is {forward.training}")
    return " and ".join(f"({p})" for p in parts) or "True"


def forward_text(forward: Forward, factory: str, placed: list[tuple[Spot, str, int]]) -> str:
    """A function `factory()` that returns the module's forward with each placed region (its spot, the
    function that calls its kernel, its index in the module's `_kernelevo_regions`) as one call, where
    its last statement was: views the region leaves to the forward (region_cut.py) stand between its
    statements, and what it reads is made before its last one."""
    last = {spot.nodes[-1]: (spot, call, k) for spot, call, k in placed}
    gone = {node for spot, _, _ in placed for node in spot.nodes}
    body = [f"{traced} = {name}" for traced, name in forward.renames]
    for node, statement in forward.statements:
        if node in last:
            spot, call, k = last[node]
            body.append(f"{', '.join(spot.outputs)} = {call}(self, self._kernelevo_regions[{k}], {', '.join(spot.inputs)})")
        elif node not in gone:
            body.append(statement)
    body = _live([*body, f"return {forward.returns}"])
    names = "".join(f"    {_binding(name, source)}\n" for name, source in forward.names)
    where = forward.path or "the model"
    return (f"\n\ndef {factory}():\n"
            f"    \"\"\"{where}'s forward as traced, its regions as their kernels.\"\"\"\n{names}\n"
            f"    def forward(self, {signature(forward)}):\n"
            f"        if not ({guard(forward)}):  # not the shapes the kernels were verified at: the module's own\n"
            f"            return type(self).forward(self, {passed_on(forward)})\n"
            + "".join(f"        {line}\n" for line in body) +
            "    return forward\n")


def _live(body: list[str]) -> list[str]:
    """The statements less the fetches of the module's attributes (`w = self.fc.weight`) that nothing after
    them reads: a placed region takes its tensors by their paths, so the fetches the trace made for it are
    dead, and in eager each one costs a call its module attribute lookups. One pass from the end, each
    statement parsed once (a traced forward can hold hundreds)."""
    import ast

    kept, named_later = [], set()
    for line in reversed(body):
        node = ast.parse(line).body[0]
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and _of_self(node.value) and node.targets[0].id not in named_later:
            continue
        kept.append(line)
        named_later |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return kept[::-1]


def _of_self(value) -> bool:
    """Whether an expression is an attribute chain on `self` (self.a.b)."""
    import ast

    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name) and value.id == "self"


def _binding(name: str, source: str) -> str:
    return source if source.startswith("import ") else f"{name} = {source}"


def statements(src: str, known: dict) -> tuple[list[tuple[str, str]] | None, tuple, str]:
    """torch.fx code's forward as (node name, statement) pairs, the last ("", returned value), without the
    statements that free names; the global names it reads with how to bind them. (None, (), why) where
    a global cannot be written."""
    import ast
    import builtins

    tree = ast.parse(src)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    out: list[tuple[str, str]] = []
    for stmt in function.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
            continue  # a name freed early
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            out.append((stmt.targets[0].id, ast.unparse(stmt)))
        elif isinstance(stmt, ast.Return):
            out.append(("", ast.unparse(stmt.value) if stmt.value else "None"))
        else:
            return None, (), f"the traced code has a statement of another kind: {ast.unparse(stmt)[:80]}"
    bound = {a.arg for a in function.args.args} | {name for name, _ in out}
    used = sorted({n.id for s in function.body for n in ast.walk(s) if isinstance(n, ast.Name)} - bound)
    names = []
    for name in used:
        if name == "torch" or (name not in known and hasattr(builtins, name)):
            continue
        source = global_source(name, known.get(name))
        if source is None:
            return None, (), f"its traced code reads {name}, which a file cannot name"
        names.append((name, source))
    return out, tuple(names), ""


def global_source(name: str, value: Any) -> str | None:
    """How a file binds a global name torch.fx's code reads: an import, inf or nan, or a function of
    torch, math or operator by its qualified name; None where it cannot be written."""
    import math
    import types

    if isinstance(value, types.ModuleType):
        top = value.__name__.split(".")[0]
        if top in ("torch", "math", "operator") and value.__name__ == name:
            return f"import {name}"
        return None
    if isinstance(value, float):
        return f"float({str(value)!r})" if not math.isfinite(value) else repr(value)
    module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if module in ("math", "operator", "_operator") and "." not in qual:
        return f"__import__({module.lstrip('_')!r}).{qual}"
    if module and module.split(".")[0] == "torch" and _reaches(value, module, qual):
        return f"{module}.{qual}"
    return None


def _reaches(value: Any, module: str, qual: str) -> bool:
    import importlib

    try:
        found: Any = importlib.import_module(module)
        for part in qual.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is value


@dataclass(frozen=True)
class Placement:
    """A region task in place: where it sits in its modules' forwards (a Spot and a Forward per call
    site, in the order of the task's call sites) and its task file's text (its reference, for torch.compile)."""
    spots: tuple[Spot, ...]
    forwards: tuple[Forward, ...]
    reference: str


_TYPES = {"tensor": ("torch.Tensor", "Tensor"), "int": ("int", "SymInt"), "float": ("float", "float"),
          "bool": ("bool", "bool")}  # an op input's kind: its annotation, its type in an op schema


def custom_op_text(name: str, kinds: tuple[str, ...], outputs: int, run: str) -> str:
    """The drop-in's two ops for `name` (a module part's or a region's), each returning `run` (the kernel
    on x0, x1 ..., of `kinds`) as `_own` hands it back. `name` is a torch.library custom op, which refuses
    a backward (the kernel has none) and is taken with autograd on. `name`_nograd, taken under no_grad,
    is the same kernel registered as one plain kernel of the dispatcher: a custom op's call goes through
    Python layers of its own (its autograd function, its output checks, dynamo's guard), which a compiled
    model without CUDA graphs pays at every site. Both fakes run the original on the meta device (`_shape_only`), so
    torch.compile traces around them."""
    args = ", ".join(f"x{j}" for j in range(len(kinds)))
    typed = ", ".join(f"x{j}: {_TYPES[k][0]}" for j, k in enumerate(kinds))
    schema = ", ".join(f"{_TYPES[k][1]} x{j}" for j, k in enumerate(kinds))
    returns, made, result = ("list[torch.Tensor]", f"[_own(t, weights, {args}) for t in {run}]", "Tensor[]") \
        if outputs > 1 else ("torch.Tensor", f"_own({run}, weights, {args})", "Tensor")
    return (f"\n\ndef _impl_{name}(site: int, weights: list[torch.Tensor], {typed}) -> {returns}:\n"
            f"    return {made}\n\n\n"
            f"def _shape_{name}(site, weights, {args}):\n"
            f"    return _shape_only(site, weights, {args})\n\n\n"
            f"torch.library.custom_op(_SPACE + \"::{name}\", _impl_{name}, mutates_args=()).register_fake(_shape_{name})\n"
            f"_LIB.define(\"{name}_nograd(SymInt site, Tensor[] weights, {schema}) -> {result}\")\n"
            f"_LIB.impl(\"{name}_nograd\", _impl_{name}, \"CompositeExplicitAutograd\")\n"
            f"torch.library.register_fake(_SPACE + \"::{name}_nograd\", _shape_{name}, lib=_LIB)\n"
            f"_OP_{name} = getattr(torch.ops, _SPACE).{name}\n"
            f"_NOGRAD_{name} = getattr(torch.ops, _SPACE).{name}_nograd\n\n\n")


def op_call(name: str, args: str) -> str:
    """The expression calling part `name`'s op on `args` (custom_op_text's): the plain kernel under
    no_grad, the custom op (refusing a backward) with autograd on. Under torch.compile the choice is
    made while tracing, and grad mode is among what dynamo guards."""
    return f"(_OP_{name} if torch.is_grad_enabled() else _NOGRAD_{name})({args})"


def region_op(name: str, inputs: int, outputs: int, prefix: str, reference: str) -> str:
    """The drop-in's text for one region task: its custom op, whose fake runs `reference` (the task's
    Model, as named in the file) on the meta device; the kernel run on its module's tensors; and the
    call the rewritten forward makes."""
    args = ", ".join(f"x{j}" for j in range(inputs))
    run = f"_stateless(_SITES[site](), _run_{name}, site, weights, {args})"  # keeping nothing of the call
    return (custom_op_text(name, ("tensor",) * inputs, outputs, run) +
            f"def _run_{name}(site, weights, {args}):\n"
            f"    \"\"\"The kernel on its module's tensors, bound at each call: the module owns them (its state_dict,\n"
            f"    .to() and loads stay the model's).\"\"\"\n"
            f"    kernel = _SITES[site]()\n"
            f"    _bind(kernel, _SHADOWS[site][1], weights)\n"
            f"    return {prefix}ModelNew.forward(kernel, {args})\n\n\n"
            f"def _call_{name}(parent, where, {args}):\n"
            f"    site, paths = where\n"
            + "".join(f"    x{j} = x{j}.contiguous()  # as the task's inputs are, where its kernel was verified\n"
                      for j in range(inputs)) +
            f"    weights = [_tensor_at(parent, path) for path in paths]\n"
            f"    if _direct():  # eager without autograd: the kernel, called directly\n"
            f"        return _run_{name}(site, weights, {args})\n"
            f"    return {op_call(name, f'site, weights, {args}')}\n"
            f"\n\n_REFERENCE_{name} = {reference}\n")


def regions_wiring(placed: list[tuple[str, str, Placement, tuple]]) -> str:
    """The rewritten forwards of the modules with regions in place, and what installs them: `placed`
    holds each region task's name, its kernel's prefix, its placement and its call spec."""
    from .construct import literal

    by_path: dict[str, list] = {}
    forwards: dict[str, Forward] = {}
    for name, prefix, placement, call in placed:
        for forward, spot in zip(placement.forwards, placement.spots):
            by_path.setdefault(forward.path, []).append((name, prefix, spot, call))
            forwards[forward.path] = forward
    text, rows = ["\n\n# ---- module forwards rewritten with their regions in place ----"], []
    for j, (path, here) in enumerate(by_path.items()):
        spots = [(spot, f"_call_{name}", k) for k, (name, _, spot, _) in enumerate(here)]
        text.append(forward_text(forwards[path], f"_forward_{j}", spots))
        regions = "".join(f"        ({name!r}, {prefix}ModelNew, _REFERENCE_{name}, {literal(spot.tensors)}, "
                          f"{literal(call)}),\n" for name, prefix, spot, call in here)
        rows.append(f"    ({path!r}, _forward_{j}, (\n{regions}    )),\n")
    text.append("\n\n_REGION_FORWARDS = (  # (module path, its forward's factory, its regions)\n" + "".join(rows) + ")\n")
    return "".join(text) + _REGION_HELPERS


_REGION_HELPERS = '''

def _bind(kernel, names, weights):
    """A region's tensors, as its module holds them now, in its kernel under the task's names."""
    for name, tensor in zip(names, weights):
        if name in kernel._parameters:
            kernel._parameters[name] = tensor
        elif name in kernel._buffers:
            kernel._buffers[name] = tensor


def _tensor_at(module, path):
    for name in path.split("."):
        module = getattr(module, name)
    return module


def _regions_in_place(model):
    """Rewrite the forward of each module with regions in place (types.MethodType on the instance) and
    give each region its kernel, held by the module outside its submodules (its state_dict stays the
    model's); a constant the forward made is kept as a buffer outside its state_dict. Returns where."""
    import types

    done = []
    for path, make, regions in _REGION_FORWARDS:
        parent = model.get_submodule(path)
        like = next(iter([*parent.parameters(), *parent.buffers()]), None)
        where = []
        for name, kernel_cls, reference_cls, tensors, call in regions:
            reference, kernel = reference_cls(), kernel_cls()
            if like is not None:
                kernel.to(like.device)
            site = len(_SITES)
            _SITES.append(weakref.ref(kernel))
            parent.__dict__[f"_kernelevo_kernel_{site}"] = kernel
            paths = []
            for mine, theirs in tensors:
                if theirs is None:
                    theirs = f"_kernelevo_{site}_{mine}"
                    made = getattr(reference, mine)
                    parent.register_buffer(theirs, made.to(like.device) if like is not None else made, persistent=False)
                paths.append(theirs)
            _SHADOWS.append((reference.to("meta"), [mine for mine, _ in tensors], call))
            _DEFAULTS.append({})  # one entry a site, as a module part's
            where.append((site, tuple(paths)))
            done.append(f"{path}:{name}")
        parent._kernelevo_regions = tuple(where)
        parent.forward = types.MethodType(make(), parent)
    return done
'''

NO_REGIONS = '''

def _regions_in_place(model):
    return []
'''
