"""Static anti-cheat checks: read a candidate's source (never run it) for the obvious ways to fool
the judge. Each check is a small function in `CHECKS`, registered under its stable reason id; the
dynamic checks (guards.py, correctness, the kernel policy) catch what reading cannot. Any finding
rejects the candidate unrun, so a pattern is a finding only where it can never be honest; where it is
merely suspicious (a half type, a try around the build, state on self), the dynamic checks decide.

Names resolve through the file's imports, so `nn.Module` reads as `torch.nn.Module` and an unbound
`open` as `builtins.open`; a name the file binds itself is never taken for a module. Kernel source
in string literals is matched by the patterns in static_cuda.py.
"""
from __future__ import annotations

import ast
import builtins
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import static_cuda as cu


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


CHECKS: dict[str, Callable[[Context], list[Finding]]] = {}
# On a line both flag, the more specific reason wins (a TF32 flag is also an assignment into torch).
_SUPERSEDED_BY = {"monkeypatch": ("precision_downgrade", "io_access")}


def check_named(reason: str) -> Callable:
    def register(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        CHECKS[reason] = fn
        return fn
    return register


def check(source: str, *, task_source: str | None = None) -> list[Finding]:
    """All findings, in registry order then line order. A source that does not parse returns [] (the
    judge reports syntax errors itself). No check depends on the task's dtype: its tolerance judges
    lower-precision compute."""
    try:
        ctx = _context(source, task_source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found = {reason: fn(ctx) for reason, fn in CHECKS.items()}
    for reason, specific in _SUPERSEDED_BY.items():
        taken = {f.line for s in specific for f in found[s]}
        found[reason] = [f for f in found[reason] if f.line not in taken]
    return [f for fs in found.values() for f in fs]


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


def _context(source: str, task_source: str | None) -> Context:
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


# --- checks, in reporting order ----------------------------------------------------------------------

@check_named("side_stream")
def _side_stream(ctx: Context) -> list[Finding]:
    # Work on a stream the current stream never waits for runs on after the timer's end event.
    hits = []
    if not any(_attr_call(c, ("wait_stream", "wait_event", "synchronize")) for c in ctx.nodes):
        hits += [(line, f"{name} creates or selects a stream or event that is never joined to the current stream",
                  "launch on torch.cuda.current_stream(), or join with current_stream().wait_stream(s)")
                 for line, name in _refs(ctx, r"torch\.(cuda\.)?(Stream|stream|Event|ExternalStream|set_stream|"
                                              r"StreamContext|streams\.\w+)", outer=True)]
    if not cu.find(ctx.literals, ctx.lines, cu.STREAM_JOIN):
        hits += _in_strings(ctx, cu.SIDE_STREAM, "queues work the caller's stream never waits for",
                            "launch on at::cuda::getCurrentCUDAStream(), or cudaStreamSynchronize before returning")
    return _findings("side_stream", hits)


@check_named("threads")
def _threads(ctx: Context) -> list[Finding]:
    # A thread or process can keep computing after forward returns, outside the timed window.
    todo = "do all the work inside forward's kernel calls (OpenMP pragmas in C are fine: they join)"
    hits = [(line, f"{name} starts threads or processes", todo) for line, name in _refs(
        ctx, r"(threading|_thread|multiprocessing|torch\.multiprocessing|concurrent|subprocess|asyncio|pty)(\..*)?"
             r"|os\.(fork\w*|system|popen|spawn\w*|exec\w*|posix_spawn\w*)")]
    return _findings("threads", hits + _in_strings(ctx, cu.THREADS, "starts a thread or process", todo))


@check_named("monkeypatch")
def _monkeypatch(ctx: Context) -> list[Finding]:
    # Replacing a library function or class attribute changes what the judge itself runs.
    todo = "leave imported modules (torch, time, builtins, kernelevo, ...) untouched; keep state on self"
    hits = []
    for node in ctx.nodes:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in _flat(targets):
            if isinstance(t, ast.Subscript):  # __builtins__["open"] = f, torch.__dict__["sum"] = f
                t = t.value
                if getattr(t, "id", None) != "__builtins__" and getattr(t, "attr", None) != "__dict__":
                    continue
            if name := "__builtins__" if getattr(t, "id", None) == "__builtins__" else \
                    _name_of(ctx, t) if isinstance(t, ast.Attribute) else "":
                hits.append((t.lineno, f"assigning {name} replaces part of an imported module", todo))
        if isinstance(node, ast.Call) and node.args and (_name_of(ctx, node.func) in (
                "builtins.setattr", "builtins.delattr") or _attr_call(node, ("__setattr__", "__delattr__"))):
            # setattr(torch, "x", f), object.__setattr__(torch, "x", f), torch.__setattr__("x", f)
            obj = node.func.value if isinstance(node.args[0], ast.Constant) else node.args[0]
            if name := _name_of(ctx, obj):
                hits.append((node.lineno, f"setattr/delattr on {name} replaces part of an imported module", todo))
    return _findings("monkeypatch", hits)


@check_named("rng_control")
def _rng_control(ctx: Context) -> list[Finding]:
    # The judge seeds and draws the inputs; a candidate that seeds can predict them.
    return _findings("rng_control", [
        (line, f"{name} sets or forks the global random state the judge draws inputs from",
         "do not seed or restore RNG state; use a local torch.Generator if you need randomness")
        for line, name in _refs(ctx, r"torch(\.cuda|\.random|\.mps)?\.(manual_seed\w*|seed\w*|set_rng_state\w*)"
                                     r"|torch\.random\.fork_rng|torch\.(cuda\.)?default_generators?(\..*)?"
                                     r"|random\.(seed|setstate)|numpy\.random\.(seed|set_state)")])


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


@check_named("reference_fallback")
def _reference_fallback(ctx: Context) -> list[Finding]:
    # Only handlers on forward's path count (_per_call): there the kernel can launch, fail, and torch
    # compute the output while the profiler still lists the kernel. A handler around building or
    # loading the extension (module level, __init__) is no such fallback: if it is taken, forward runs
    # only torch and the policy check rejects the candidate as no_own_kernel.
    init = _method(_model_new(ctx), "__init__")
    modules = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) and _name_of(
        ctx, getattr(n.value, "func", None)).startswith("torch.nn.") for t in n.targets
        if isinstance(t, ast.Attribute)} if init else set()
    # a set: a function on the path can hold another (a class defined inside forward)
    handlers = {n for fn in _per_call(ctx) for n in ast.walk(fn) if isinstance(n, ast.ExceptHandler)}
    hits = []
    for handler in sorted(handlers, key=lambda h: (h.lineno, h.col_offset)):
        if isinstance(handler.body[-1], ast.Raise):  # it re-raises: whatever it computed is dropped
            continue
        # (line, rank, what): on one line, name the computation rather than the `return` around it
        bad = [(n.lineno, *what) for s in handler.body for n in ast.walk(s) if (what := (
            (0, "uses the reference Model") if getattr(n, "id", None) == "Model" and not _in_model(ctx, n) else
            (0, f"calls {name}()") if isinstance(n, ast.Call) and (name := _name_of(ctx, n.func)).startswith("torch.")
            else (1, f"calls .{n.func.attr}()") if _attr_call(n, _COMPUTE) else
            (1, f"calls self.{n.func.attr}()") if _attr_call(n, modules) and getattr(n.func.value, "id", "") == "self"
            else (2, "returns a value") if isinstance(n, ast.Return) and n.value is not None
            and not isinstance(n.value, ast.Constant)  # a status (`return False`) computes nothing
            else None))]
        if bad:
            line, _, what = min(bad)
            hits.append((line, f"except handler {what} instead of re-raising, hiding a failed kernel",
                         "let the error propagate (raise) so the judge sees it"))
    return _findings("reference_fallback", hits)


_TASK_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs", "get_test_inputs"})
_PACKAGES = frozenset({"torch", "numpy", "triton", "kernelevo", "cuda", "cupy", "numba", "einops", "pycuda",
                       "nvidia", "cutlass", "scipy", "functorch", "typing_extensions", "requests", "urllib3",
                       "httpx", "aiohttp", "dill", "joblib", "cloudpickle", "psutil"})


@check_named("reference_model")
def _reference_model(ctx: Context) -> list[Finding]:
    # Calling the reference makes the output right by construction and the timing meaningless.
    todo = "compute the output with ModelNew's own kernels; do not use or import the reference"
    hits = [(n.lineno, "uses the reference class Model", todo) for n in ctx.nodes
            if isinstance(n, ast.Name) and n.id == "Model" and isinstance(n.ctx, ast.Load) and not _in_model(ctx, n)]
    for node in ctx.nodes:
        if isinstance(node, ast.ImportFrom) and (node.level or any(a.name in _TASK_NAMES for a in node.names)):
            hits.append((node.lineno, f"imports {', '.join(a.name for a in node.names)} from the task module", todo))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for top in {(a.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                        for a in node.names}:
                if top == "__main__" or top not in sys.stdlib_module_names and top not in _PACKAGES:
                    hits.append((node.lineno, (f"imports {top}, neither the standard library nor a kernel package"
                                 " (the task's reference module?)"), todo))
    return _findings("reference_model", hits)


@check_named("tensor_subclass")
def _tensor_subclass(ctx: Context) -> list[Finding]:
    # A tensor subclass or lazy wrapper can defer or fake the computation until the judge looks.
    todo = "return a plain torch.Tensor that your kernel wrote"
    hits = [(line, f"{name} intercepts tensor operations", todo) for line, name in _refs(
        ctx, r"torch\.(utils\._python_dispatch|_subclasses)(\..*)?|.*\.(TorchDispatchMode|TorchFunctionMode)")]
    for node in ctx.nodes:
        name = getattr(node, "attr", None) or getattr(node, "name", None) or getattr(node, "id", None)
        if name in ("__torch_function__", "__torch_dispatch__", "_make_subclass", "_make_wrapper_subclass",
                    "as_subclass"):
            hits.append((node.lineno, f"{name} makes or drives a tensor subclass", todo))
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [_name_of(ctx, b) for b in node.bases]
        if any(b in ("torch.Tensor", "torch._C._TensorBase", "torch._C.TensorBase") for b in bases):
            hits.append((node.lineno, f"class {node.name} subclasses torch.Tensor", todo))
        elif node.name != "ModelNew" and not any(b.startswith("torch.nn.") for b in bases):
            hits += [(f.lineno, f"class {node.name} defines {f.name}, a lazy wrapper that can stand in for a tensor",
                      todo) for f in node.body if getattr(f, "name", "") in ("__getattr__", "__getattribute__")]
    return _findings("tensor_subclass", hits)


# Torch's global numerics, which the judge fixes before anything runs (TF32 off, matmul precision
# "highest"): lowering them also lowers the reference the candidate is compared with, so no candidate
# sets them honestly. Dtypes, casts, fp16 headers and autocast are no such setting: what they compute
# is judged by the task dtype's tolerance (float32's 5e-5 rejects TF32 and fp16 compute).
_FLAGS = frozenset({"allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"})
_LOW_MODES = frozenset({"high", "medium", "tf32", "bf16"})  # below "highest" / "ieee"


@check_named("precision_downgrade")
def _precision_downgrade(ctx: Context) -> list[Finding]:
    hits = []
    for node in ctx.nodes:
        value = getattr(node, "value", None)
        if isinstance(node, ast.Assign) and getattr(value, "value", None) is not False:  # `= False` restores
            hits += [(node.lineno, f"setting {t.attr}") for t in _flat(node.targets) if isinstance(t, ast.Attribute)
                     and _name_of(ctx, t).startswith("torch.") and (t.attr in _FLAGS or t.attr == "fp32_precision"
                                                                  and getattr(value, "value", None) in _LOW_MODES)]
        elif isinstance(node, ast.Call) and _name_of(ctx, node.func) == "torch.set_float32_matmul_precision" and \
                (mode := getattr(node.args[0] if node.args else None, "value", None)) in _LOW_MODES:
            hits.append((node.lineno, f"set_float32_matmul_precision({mode!r})"))
    return _findings("precision_downgrade", [
        (line, f"{what} lowers torch's precision for the judge's reference as well as the candidate",
         "leave torch's precision settings as the judge set them (TF32 off, matmul precision \"highest\")")
        for line, what in hits])


# Registered last, in this order: checks of what the code reaches beyond its inputs, then of state kept
# across calls and of the constructor.
from . import static_reach, static_state  # noqa: E402, F401
