"""Static anti-cheat checks: read a candidate's source (never run it) for the obvious ways to fool
the judge. Each check is a small function in `CHECKS`, registered under its stable reason id; the
dynamic checks (guards.py) catch what reading cannot.

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
    dtype: tuple[str, int] | None        # the task's float dtype and its precision rank; None: no float input


CHECKS: dict[str, Callable[[Context], list[Finding]]] = {}
# On a line both flag, the more specific reason wins (a TF32 flag is also an assignment into torch).
_SUPERSEDED_BY = {"monkeypatch": ("precision_downgrade", "io_access")}


def check_named(reason: str) -> Callable:
    def register(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        CHECKS[reason] = fn
        return fn
    return register


def check(source: str, *, task_source: str | None = None,
          input_dtypes: frozenset[str] | None = None) -> list[Finding]:
    """All findings, in registry order then line order. A source that does not parse returns [] (the
    judge reports syntax errors itself). `input_dtypes` None: the dtypes named in the task's
    get_inputs (torch.float16, .half(), ...), else float32, torch.randn's default; mixed dtypes are
    judged against the lowest; no floating dtype at all skips precision_downgrade."""
    try:
        ctx = _context(source, task_source, input_dtypes)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found = {reason: fn(ctx) for reason, fn in CHECKS.items()}
    for reason, specific in _SUPERSEDED_BY.items():
        taken = {f.line for s in specific for f in found[s]}
        found[reason] = [f for f in found[reason] if f.line not in taken]
    return [f for fs in found.values() for f in fs]


# --- context ---------------------------------------------------------------------------------------

_BUILTINS = frozenset(dir(builtins))
_RANKS = {"float64": 4, "double": 4, "complex128": 4, "float32": 3, "float": 3, "complex64": 3,
          "float16": 1, "half": 1, "bfloat16": 1}


def _task_dtype(input_dtypes: frozenset[str] | None, task: ast.Module | None, task_source: str | None):
    if input_dtypes is None:
        fn = next((n for n in task.body if getattr(n, "name", "") == "get_inputs"), None) if task else None
        text = ast.get_source_segment(task_source, fn) or "" if fn else ""
        input_dtypes = frozenset(re.findall(r"\b(float64|double|float16|half|bfloat16|float8\w*)\b", text)) \
            or frozenset({"float32"})
    ranked = sorted((0 if d.startswith("float8") else _RANKS.get(d, -1), d)
                    for d in (d.removeprefix("torch.") for d in input_dtypes))
    ranked = [(r, d) for r, d in ranked if r >= 0]
    return (ranked[0][1], ranked[0][0]) if ranked else None


def _task_params(task: ast.Module | None) -> tuple[list[str], bool] | None:
    model = next((n for n in task.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None) if task else None
    if model is None:
        return None
    init = _method(model, "__init__")
    a = init.args if init else None
    return ([p.arg for p in (a.posonlyargs + a.args)[1:]], bool(a.vararg or a.kwarg)) if a else ([], False)


def _resolve(node: ast.AST, aliases: dict[str, str], bound: set[str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    base = aliases.get(node.id) or (f"builtins.{node.id}" if node.id in _BUILTINS and node.id not in bound else None)
    return ".".join([base, *reversed(parts)]) if base else None


def _context(source: str, task_source: str | None, input_dtypes: frozenset[str] | None) -> Context:
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
                   cu.literals(tree), _task_params(task), _task_dtype(input_dtypes, task, task_source))


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


@check_named("reference_fallback")
def _reference_fallback(ctx: Context) -> list[Finding]:
    # A handler that computes the answer hides a kernel that crashed or was never built.
    init = _method(_model_new(ctx), "__init__")
    modules = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) and _name_of(
        ctx, getattr(n.value, "func", None)).startswith("torch.nn.") for t in n.targets
        if isinstance(t, ast.Attribute)} if init else set()
    hits = []
    for handler in (n for n in ctx.nodes if isinstance(n, ast.ExceptHandler)):
        # (line, rank, what): on one line, name the computation rather than the `return` around it
        bad = [(n.lineno, *what) for s in handler.body for n in ast.walk(s) if (what := (
            (0, "uses the reference Model") if getattr(n, "id", None) == "Model" and not _in_model(ctx, n) else
            (0, f"calls {name}()") if isinstance(n, ast.Call) and (name := _name_of(ctx, n.func)).startswith("torch.")
            else (1, f"calls .{n.func.attr}()") if _attr_call(n, _COMPUTE) else
            (1, f"calls self.{n.func.attr}()") if _attr_call(n, modules) and getattr(n.func.value, "id", "") == "self"
            else (2, "returns a value") if isinstance(n, ast.Return) else None))]
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


# Precision ranks: float64 4 > float32 3 > tf32 2 > float16/bfloat16 1 > float8 0.
_PY_RANK = {"torch.float16": 1, "torch.half": 1, "torch.bfloat16": 1, "torch.HalfTensor": 1, "torch.BFloat16Tensor": 1,
            "torch.cuda.HalfTensor": 1, "torch.cuda.BFloat16Tensor": 1, "torch.autocast": 1, "torch.float32": 3,
            "torch.float": 3, "torch.FloatTensor": 3, "torch.cuda.FloatTensor": 3}
_FLAG_RANK = {"allow_tf32": 2, "allow_fp16_reduced_precision_reduction": 1, "allow_bf16_reduced_precision_reduction": 1}
_MODE_RANK = {"high": 2, "medium": 1, "tf32": 2, "bf16": 1}


def _py_rank(ctx: Context, node: ast.AST, name: str) -> int | None:
    parent = ctx.parents.get(node)
    while isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        parent = ctx.parents.get(parent)
    if isinstance(parent, ast.Compare):  # x.dtype == torch.float16 only asks
        return None
    return 0 if name.startswith("torch.float8_") else 1 if re.match(r"torch\.((cuda|cpu)\.)?amp(\.|$)", name) \
        else _PY_RANK.get(name)


@check_named("precision_downgrade")
def _precision_downgrade(ctx: Context) -> list[Finding]:
    # The judge compares at the task's dtype; lower-precision compute is faster and less accurate.
    if ctx.dtype is None:
        return []
    dtype, task_rank = ctx.dtype
    hits = [(node.lineno, name, r) for name, node in ctx.refs if (r := _py_rank(ctx, node, name)) is not None]
    for node in ctx.nodes:
        if _attr_call(node, ("half", "bfloat16", "float")) and not node.args:
            hits.append((node.lineno, f".{node.func.attr}()", 3 if node.func.attr == "float" else 1))
        elif isinstance(node, ast.Assign) and getattr(node.value, "value", None) is not False:
            for t in (t for t in node.targets if isinstance(t, ast.Attribute)
                      and _name_of(ctx, t).startswith("torch.")):
                r = _MODE_RANK.get(getattr(node.value, "value", None)) if t.attr == "fp32_precision" else \
                    _FLAG_RANK.get(t.attr)
                hits += [(node.lineno, f"setting {t.attr}", r)] if r is not None else []
        elif isinstance(node, ast.Call) and _name_of(ctx, node.func) == "torch.set_float32_matmul_precision" and \
                (mode := getattr(node.args[0] if node.args else None, "value", None)) in _MODE_RANK:
            hits.append((node.lineno, f"set_float32_matmul_precision({mode!r})", _MODE_RANK[mode]))
    hits += [(line, f"{text} in the kernel source", r)
             for pattern, r in cu.PRECISION for line, text in cu.find(ctx.literals, ctx.lines, pattern)]
    return _findings("precision_downgrade", [
        (line, f"{what} computes below the task's {dtype} precision",
         f"compute and accumulate in {dtype} (or wider) throughout") for line, what, r in hits if r < task_rank])


@check_named("io_access")
def _io_access(ctx: Context) -> list[Finding]:
    # Files, environment and network let a candidate remember answers or tell checking from timing.
    todo = "compute from forward's inputs only (print() for logging is fine)"
    what = "reaches files, the environment or the network"
    hits = [(line, f"{name} {what}", todo) for line, name in _refs(
        ctx, r"(pathlib|shutil|tempfile|socket|urllib|urllib3|http|requests|httpx|aiohttp|ftplib|smtplib|pickle|dill"
             r"|cloudpickle|joblib|shelve|dbm|sqlite3|glob|fcntl|mmap)(\..*)?|builtins\.(open|exit|quit|input)"
             r"|io\.(open|FileIO)|os\.(environ\w*|getenv\w*|putenv|unsetenv|open|read|write|remove|unlink|rename"
             r"|replace|makedirs|mkdir|rmdir|removedirs|listdir|scandir|walk|dup2?|kill|killpg|_exit|abort|truncate"
             r"|chdir|chmod|link|symlink|pipe|mkfifo|fdopen)(\..*)?|sys\.(exit|argv|stdin)(\..*)?"
             r"|torch\.(save|load|from_file|hub)(\..*)?|numpy\.(save\w*|load\w*|fromfile|memmap|genfromtxt)")]
    return _findings("io_access", hits + _in_strings(ctx, cu.IO, what, todo))


_FRAME_ATTRS = frozenset({"__subclasses__", "__globals__", "__code__", "__closure__", "f_back", "f_locals",
                          "f_globals", "tb_frame", "gi_frame", "cr_frame", "__builtins__"})


@check_named("introspection")
def _introspection(ctx: Context) -> list[Finding]:
    # Frames, the garbage collector and the judge's modules hold the reference output and the timers.
    todo = "use only torch, math and kernelevo.runtime (launch kernels through it, not ctypes)"
    what = "reaches into the interpreter or the judge"
    hits = [(line, f"{name} {what}", todo) for line, name in _refs(
        ctx, r"(gc|inspect|ctypes|_ctypes|importlib|cffi)(\..*)?|sys\.(_getframe|_current_frames|modules|settrace"
             r"|setprofile|meta_path|path_hooks)(\..*)?|builtins\.(__import__|eval|exec|compile|globals|locals"
             r"|breakpoint)|kernelevo\.(?!runtime(\.|$)).*")]
    hits += [(n.lineno, f"vars() {what}", todo) for n in ctx.nodes
             if isinstance(n, ast.Call) and not n.args and _name_of(ctx, n.func) == "builtins.vars"]
    hits += [(n.lineno, f"{name} {what}", todo) for n in ctx.nodes
             if (name := getattr(n, "attr", None) or getattr(n, "id", None)) in _FRAME_ATTRS]
    return _findings("introspection", hits + _in_strings(ctx, cu.INTROSPECTION, what, todo))


# Registered last, in this order: checks of state kept across calls and of the constructor.
from . import static_state  # noqa: E402, F401
