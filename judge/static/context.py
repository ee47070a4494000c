"""What every static check reads: the candidate's syntax tree walked once, each name resolved through
the file's imports (`nn.Module` reads as `torch.nn.Module`, an unbound `open` as `builtins.open`; a
name the file binds itself is never taken for a module), the kernel source in its string literals
(cuda.py), and facts of the reference task; plus the small helpers the check families share."""
from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterable
from dataclasses import dataclass

from . import cuda as cu


@dataclass(frozen=True)
class Finding:
    reason: str   # stable id: a key of CHECKS
    message: str  # "line N: <what> — <what to do>"
    line: int     # 1-based line of the candidate file


@dataclass
class Context:
    tree: ast.Module
    nodes: list[ast.AST]                 # every node, walked once
    lines: list[str]
    parents: dict[ast.AST, ast.AST]
    names: dict[ast.AST, str]            # dotted name of each Name/Attribute rooted at an import or a builtin
    refs: list[tuple[str, ast.AST]]      # (dotted name, node) for those and for every imported name
    literals: list[cu.Literal]
    task_params: tuple[list[str], bool] | None  # reference Model.__init__ parameters, and whether it has *args
    task_kept: frozenset[str]            # self attributes the reference Model.forward assigns
    task_unread: frozenset[int]          # positions of reference Model.__init__ parameters it never reads


# --- context ---------------------------------------------------------------------------------------

_BUILTINS = frozenset(dir(builtins))


def _task_params(task: ast.Module | None) -> tuple[list[str], bool] | None:
    model = next((n for n in task.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None) if task else None
    if model is None:
        return None
    init = _method(model, "__init__")
    a = init.args if init else None
    return ([p.arg for p in (a.posonlyargs + a.args)[1:]], bool(a.vararg or a.kwarg)) if a else ([], False)


def _task_unread(task: ast.Module | None) -> frozenset[int]:
    """Positions of the reference constructor's parameters that its body never reads: a candidate
    that ignores them ignores nothing (KernelBench passes `groups` to some models that drop it)."""
    model = next((n for n in task.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None) if task else None
    init = _method(model, "__init__")
    if init is None:
        return frozenset()
    read = {n.id for s in init.body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    params = (init.args.posonlyargs + init.args.args)[1:]
    return frozenset(i for i, p in enumerate(params) if p.arg not in read)


def _task_kept(task: ast.Module | None) -> frozenset[str]:
    """Attributes the reference's forward assigns on self: state the task itself carries from one call
    to the next (KernelBench's RNN tasks keep self.hidden), which an honest candidate mirrors."""
    model = next((n for n in task.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None) if task else None
    forward = _method(model, "forward")
    return frozenset(name for n in ast.walk(forward) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                     for t in _flat(n.targets if isinstance(n, ast.Assign) else [n.target])
                     if (name := _self_attr(t))) if forward else frozenset()


def _resolve(node: ast.AST, aliases: dict[str, str], bound: set[str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    base = aliases.get(node.id) or (f"builtins.{node.id}" if node.id in _BUILTINS and node.id not in bound else None)
    return ".".join([base, *reversed(parts)]) if base else None


def build_context(source: str, task_source: str | None) -> Context:
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    try:
        task = ast.parse(task_source) if task_source else None
    except (SyntaxError, ValueError):
        task = None
    aliases, refs = {"__builtins__": "builtins"}, []
    for node in nodes:
        for a in getattr(node, "names", []) if isinstance(node, (ast.Import, ast.ImportFrom)) else []:
            if isinstance(node, ast.Import):
                full = a.name
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            else:
                module = "." * node.level + (node.module or "")
                full = module + ("." if module and not module.endswith(".") else "") + a.name
                aliases[a.asname or a.name] = full
            refs.append((full, node))
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)} | \
        {n.arg for n in nodes if isinstance(n, ast.arg)} | {getattr(n, "name", "") for n in nodes if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    # `T = torch.Tensor` makes T an alias too, so `T.__add__ = f` still reads as torch.
    for node in sorted((n for n in nodes if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(root, ast.Name) \
                and root.id in aliases:
            aliases[node.targets[0].id] = _resolve(node.value, aliases, bound) or ""
    names = {node: name for node in nodes
             if isinstance(node, (ast.Name, ast.Attribute)) and (name := _resolve(node, aliases, bound))}
    parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
    return Context(tree, nodes, source.splitlines(), parents, names, refs + [(v, k) for k, v in names.items()],
                   cu.literals(tree), _task_params(task), _task_kept(task), _task_unread(task))


# --- helpers -----------------------------------------------------------------------------------------

def _findings(reason: str, hits: Iterable[tuple[int, str, str]]) -> list[Finding]:
    """One finding per line, in line order, from (line, what, what to do)."""
    out, seen = [], set()
    for line, what, todo in sorted(hits, key=lambda h: h[0]):
        if line not in seen:
            seen.add(line)
            out.append(Finding(reason, f"line {line}: {what} — {todo}", line))
    return out


def _refs(ctx: Context, pattern: str, outer: bool = False) -> list[tuple[int, str]]:
    """(line, name) of the refs whose name matches; `outer`: not as the prefix of a longer name."""
    rx = re.compile(pattern)
    return [(node.lineno, name) for name, node in ctx.refs if rx.fullmatch(name)
            and not (outer and isinstance(ctx.parents.get(node), ast.Attribute))]


def _attr_call(node: ast.AST, names: Iterable[str]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names


def _name_of(ctx: Context, node: ast.AST | None) -> str:
    return ctx.names.get(node, "") if node is not None else ""


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None) if cls else None


def _model_new(ctx: Context) -> ast.ClassDef | None:
    return next((n for n in ctx.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)


def _in_model(ctx: Context, node: ast.AST) -> bool:
    """Whether `node` is inside a pasted `class Model` (its `super(Model, self)` is no use of the reference)."""
    while (node := ctx.parents.get(node)) is not None:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return True
    return False


def _flat(targets: list[ast.AST]) -> list[ast.AST]:
    return [e for t in targets for e in (_flat(t.elts) if isinstance(t, (ast.Tuple, ast.List)) else
                                          [t.value] if isinstance(t, ast.Starred) else [t])]


def _self_attr(node: ast.AST) -> str | None:
    """`x` for a target under self.x (self.x, self.x[i], self.x.y), else None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "self":
            return node.attr
        node = node.value
    return None


def _in_strings(ctx: Context, pattern: re.Pattern, what: str, todo: str) -> list[tuple[int, str, str]]:
    return [(line, f"{text} in the kernel source {what}", todo) for line, text in cu.find(ctx.literals, ctx.lines,
                                                                                           pattern)]


_COMPUTE = frozenset({"forward", "matmul", "mm", "bmm", "addmm", "relu", "relu_", "gelu", "sigmoid", "tanh",
                      "softmax", "log_softmax", "sum", "mean", "exp", "mul", "add", "sub", "div", "clamp",
                      "clamp_min", "clamp_", "conv2d", "linear", "layer_norm", "norm", "pow", "sqrt", "einsum",
                      "addcmul", "baddbmm", "maximum", "minimum", "where", "abs"})


def _per_call(ctx: Context) -> list[ast.FunctionDef]:
    """forward and __call__ of every class, and what they call by name, transitively: `helper(x)` of a
    module-level def, `self.helper(x)` of a method of the same class. Calls by any other route are
    not followed: this reads the usual shapes of a candidate, it does not prove reachability."""
    module_fns = {n.name: n for n in ctx.tree.body if isinstance(n, ast.FunctionDef)}
    methods_of, todo = {}, []
    for cls in (n for n in ctx.nodes if isinstance(n, ast.ClassDef)):
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        methods_of |= {m: methods for m in methods.values()}
        todo += [methods[name] for name in ("forward", "__call__") if name in methods]
    seen: list[ast.FunctionDef] = []
    while todo:
        if (fn := todo.pop()) in seen:
            continue
        seen.append(fn)
        for f in (n.func for n in ast.walk(fn) if isinstance(n, ast.Call)):
            if isinstance(f, ast.Name) and f.id in module_fns:
                todo.append(module_fns[f.id])
            elif isinstance(f, ast.Attribute) and getattr(f.value, "id", None) == "self" and \
                    f.attr in methods_of.get(fn, {}):
                todo.append(methods_of[fn][f.attr])
    return seen
