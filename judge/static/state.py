"""Static checks of state: results kept across calls (`input_cache`) and constructor arguments not
used as given (`init_args`). Registered in the package's CHECKS."""
from __future__ import annotations

import ast
import re

from .context import (
    Context,
    Finding,
    _attr_call,
    _findings,
    _flat,
    _method,
    _model_new,
    _name_of,
    _refs,
    _self_attr,
)

_IDENTITY_CALLS = frozenset({"data_ptr", "untyped_storage", "storage", "__hash__"})
_META = frozenset({"shape", "dtype", "device", "ndim", "size", "numel", "dim", "stride", "is_contiguous", "layout",
                   "is_cuda", "element_size", "requires_grad", "new_empty", "new_zeros", "new_ones", "new_full"})


def _identity(ctx: Context, expr: ast.AST | None, keys: set[str]) -> bool:
    """Whether `expr` involves an object's identity (its address, id, storage, version)."""
    return expr is not None and any(
        _attr_call(n, _IDENTITY_CALLS) or isinstance(n, ast.Attribute) and n.attr in ("_cdata", "_version")
        or isinstance(n, ast.Call) and _name_of(ctx, n.func) in ("builtins.id", "builtins.hash")
        or isinstance(n, ast.Name) and n.id in keys for n in ast.walk(expr))


def _mentions(ctx: Context, expr: ast.AST | None, names: set[str]) -> bool:
    """Whether `expr` uses the data of one of `names` (x.shape, len(x), empty_like(x) use only metadata)."""
    def meta(n: ast.Name) -> bool:
        p = ctx.parents.get(n)
        return isinstance(p, ast.Attribute) and p.attr in _META or isinstance(p, ast.Call) and n in p.args and \
            re.fullmatch(r"builtins\.(len|isinstance)|torch\.(empty|zeros|ones|full)_like", _name_of(ctx, p.func))
    return expr is not None and any(isinstance(n, ast.Name) and n.id in names and not meta(n) for n in ast.walk(expr))


def _stores(fn: ast.AST) -> list[tuple[list[ast.AST], ast.AST]]:
    """(targets, value) of every binding in `fn`, the value being what the targets are computed from."""
    return [([n.target], n.value) if isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) else
            ([n.target], n.iter) if isinstance(n, (ast.For, ast.AsyncFor)) else
            ([n.optional_vars], n.context_expr) if isinstance(n, ast.withitem) else (n.targets, n.value)
            for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.NamedExpr, ast.For, ast.AsyncFor))
            or isinstance(n, ast.AnnAssign) and n.value or isinstance(n, ast.withitem) and n.optional_vars]


# Objects work is compiled or captured into: a CUDA graph or torch's graphed callables, a module or
# kernel of kernelevo.runtime, a torch extension. Keying one by where the inputs live is honest: a
# graph replays the very addresses it was captured with, so graphs must be kept per placement (as
# torch.compile's reduce-overhead mode keeps them), and the dynamic checks judge what comes back.
_COMPILED = re.compile(r"torch\.cuda\.(graphs\.)?(CUDAGraph|make_graphed_callables)"
                       r"|torch\.utils\.cpp_extension\.load(_inline)?"
                       r"|kernelevo\.runtime(\.cuda|\.c)?\.(load_cuda|load_c|CudaModule|CudaKernel|CModule)")
_READS = frozenset({"get", "pop", "popitem", "keys", "values", "items", "clear", "__contains__", "__getitem__",
                    "__len__", "__delitem__"})
_ADDS = frozenset({"setdefault", "__setitem__", "update", "append", "appendleft", "add", "insert", "extend"})


def _scope(ctx: Context, node: ast.AST) -> ast.AST:
    """The function `node` is in, or the module."""
    while (node := ctx.parents.get(node)) is not None and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        pass
    return node or ctx.tree


def _compiled(ctx: Context, expr: ast.AST | None, seen: frozenset[str] = frozenset()) -> bool:
    """Whether `expr` is or directly holds a compiled object: a call that makes one, a kernel of one
    (mod.kernel), a name that every binding in its function gives one, or a tuple, list, dict or
    constructor of a class of the file holding one of those."""
    def holds(parts: list) -> bool:
        return any(_compiled(ctx, e, seen) for e in parts)

    if isinstance(expr, ast.Attribute):
        return isinstance(expr.value, (ast.Call, ast.Name)) and getattr(expr.value, "id", "") != "self" \
            and _compiled(ctx, expr.value, seen)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return holds(expr.elts)
    if isinstance(expr, ast.Dict):
        return holds(expr.values)
    if isinstance(expr, ast.Call):
        name = _name_of(ctx, expr.func)
        classes = {n.name for n in ctx.nodes if isinstance(n, ast.ClassDef)}
        return bool(_COMPILED.fullmatch(name)) or (getattr(expr.func, "id", None) in classes or name in (
            "types.SimpleNamespace", "builtins.dict")) and holds(expr.args + [k.value for k in expr.keywords])
    if not isinstance(expr, ast.Name) or expr.id in seen:
        return False
    # Bound in the same function (or, at module level, by the module's own statements), to compiled
    # objects only. A binding that unpacks something else (`g, y = graphs[key]`, the graph read back)
    # tells nothing either way; a name bound only so holds no known graph.
    scope = _scope(ctx, expr)
    stores = _stores(scope) if scope is not ctx.tree else \
        [(s.targets, s.value) for s in ctx.tree.body if isinstance(s, ast.Assign)]
    values = [v for targets, value in stores for t, v in _pairs(targets, value)
              if isinstance(t, ast.Name) and t.id == expr.id and v is not None]
    return bool(values) and all(_compiled(ctx, v, seen | {expr.id}) for v in values)


def _pairs(targets: list[ast.AST], value: ast.AST) -> list[tuple[ast.AST, ast.AST | None]]:
    """(target, what it is bound to) of one binding: `a, b = g, y` binds a to g and b to y; a target
    whose own part of the value cannot be read off (`a, b = f()`) is paired with None."""
    out = []
    for t in targets:
        if not isinstance(t, (ast.Tuple, ast.List)):
            out.append((t, value))
        elif isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(t.elts) \
                and not any(isinstance(e, ast.Starred) for e in t.elts + value.elts):
            out += [p for e, v in zip(t.elts, value.elts) for p in _pairs([e], v)]
        else:
            out += [(e, None) for e in _flat([t])]
    return out


def _added(call: ast.Call) -> list[ast.AST] | None:
    """What a call of one of _ADDS puts into its container; None where that cannot be read off."""
    method, args = call.func.attr, call.args
    if method == "update":
        if not all(isinstance(a, ast.Dict) and None not in a.keys for a in args) or \
                any(k.arg is None for k in call.keywords):
            return None
        return [v for a in args for v in a.values] + [k.value for k in call.keywords]
    if method == "extend":
        return [e for a in args for e in a.elts] if all(isinstance(a, (ast.Tuple, ast.List)) for a in args) else None
    return args[1:] if method in ("setdefault", "__setitem__", "insert") else args


def _adds_compiled(ctx: Context, call: ast.Call) -> bool:
    added = _added(call)
    return bool(added) and all(_compiled(ctx, v) for v in added)


def _container(n: ast.AST) -> ast.AST | None:
    """The container a lookup reads: c of c[k], k in c, c.get(k)."""
    if isinstance(n, ast.Subscript):
        return n.value
    if isinstance(n, ast.Compare):
        return next((c for o, c in zip(n.ops, n.comparators) if isinstance(o, (ast.In, ast.NotIn))), None)
    return n.func.value


def _holds_compiled(ctx: Context, container: ast.AST | None, memo: dict[str, bool]) -> bool:
    """Whether every entry ever put into `container` (c[k] = V, c.setdefault(k, V), c.update(...), and
    into its nested entries) holds a compiled object, there is one at least, and the container is
    never handed anywhere else (an alias could fill it unseen)."""
    while isinstance(container, ast.Subscript):  # c[dev][k]: the container is c
        container = container.value
    if not isinstance(container, (ast.Name, ast.Attribute)):
        return False
    root = ast.unparse(container)
    if root not in memo:
        last = root.rsplit(".", 1)[-1]
        uses = [_use(ctx, n) for n in ctx.nodes if isinstance(n, ast.Name) and n.id == root
                or isinstance(n, ast.Attribute) and n.attr == last and ast.unparse(n) == root]
        memo[root] = "store" in uses and "bad" not in uses
    return memo[root]


def _empty(ctx: Context, value: ast.AST | None) -> bool:
    """{}, [], dict(), OrderedDict(), None, or no value at all (`self.graphs: dict`)."""
    if value is None or isinstance(value, ast.Constant) and value.value is None:
        return True
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.Tuple)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    return isinstance(value, ast.Call) and not value.args and not value.keywords and \
        bool(re.fullmatch(r"builtins\.(dict|list|set)|collections\.\w+", _name_of(ctx, value.func)))


def _use(ctx: Context, node: ast.AST) -> str:
    """How one mention of a container uses it: "store" (of compiled objects only), "read", "init"
    (bound to an empty container) or "bad" (anything else, e.g. handed to a function or aliased)."""
    cur, parent = node, ctx.parents.get(node)
    while isinstance(parent, ast.Subscript) and parent.value is cur:
        cur, parent = parent, ctx.parents.get(parent)
    entry = cur is not node  # c[k], not c itself
    if isinstance(parent, ast.Attribute) and parent.value is cur:  # c.get(k), c[k].replay(), c[k].out = y
        call = ctx.parents.get(parent)
        method = isinstance(call, ast.Call) and call.func is parent
        if method and parent.attr in _ADDS:
            return "store" if _adds_compiled(ctx, call) else "bad"
        if not entry:
            return "read" if method and parent.attr in _READS else "bad"
        if not isinstance(parent.ctx, ast.Store):
            return "read"
        cur, parent = parent, ctx.parents.get(parent)
    if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and cur is not parent.value:
        if isinstance(parent, ast.AugAssign):  # c[k] += y, c |= {...}
            return "bad"
        if entry:  # c[k] = V
            return "store" if _compiled(ctx, parent.value) else "bad"
        return "init" if _empty(ctx, parent.value) else "store" if isinstance(parent.value, ast.Dict) and all(
            _compiled(ctx, v) for v in parent.value.values) else "bad"
    if isinstance(getattr(cur, "ctx", None), ast.Store):  # a, c[k] = ...; for c[k] in ...
        return "bad"
    if entry or isinstance(getattr(cur, "ctx", None), ast.Del):
        return "read"  # g, out = c[k]; del c[k]
    if isinstance(parent, ast.Compare) and cur in parent.comparators or isinstance(parent, (
            ast.For, ast.comprehension)) and parent.iter is cur or isinstance(parent, ast.Call) and \
            _name_of(ctx, parent.func) == "builtins.len":
        return "read"
    return "bad"


def _forward_hits(ctx: Context, fn: ast.FunctionDef, module_names: set[str],
                  containers: set[str]) -> list[tuple[int, str]]:
    """(line, target) where forward keeps data derived from its inputs or its output beyond the call."""
    a = fn.args
    tainted = {p.arg for p in (a.posonlyargs + a.args)[1:] + a.kwonlyargs + [a.vararg, a.kwarg] if p}
    stores = _stores(fn)
    for _ in stores:  # to a fixed point: the locals computed from the inputs' data
        grown = {t.id for targets, value in stores if _mentions(ctx, value, tainted)
                 for t in _flat(targets) if isinstance(t, ast.Name)} - tainted
        if not grown:
            break
        tainted |= grown
    local = {t.id for targets, _ in stores for t in _flat(targets) if isinstance(t, ast.Name)}
    dirty = tainted | ({n.id for r in ast.walk(fn) if isinstance(r, ast.Return) for n in ast.walk(r)
                        if isinstance(n, ast.Name)} & local)  # ... and the returned value
    declared = {g for n in ast.walk(fn) if isinstance(n, ast.Global) for g in n.names}

    def kept(t: ast.AST, holders: set[str], names: set[str]) -> str | None:
        """`t` if it outlives the call: a name in `names`, or an attribute or item under one of `holders`."""
        root = t
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        ok = t.id in names if isinstance(t, ast.Name) else isinstance(root, ast.Name) and root.id in holders
        return ast.unparse(t) if ok else None

    # An entry holding a compiled object (a CUDA graph with the static output it replays into) is
    # not kept data: what forward returns from it is for the dynamic checks to judge.
    hits = [(t, name) for targets, value in stores for t, v in _pairs(targets, value)
            if _mentions(ctx, value if v is None else v, dirty) and not _compiled(ctx, v)
            and (name := kept(t, {"self"} | declared | (module_names - local), declared))]
    # self._memo.append(y), _CACHE.update(...): a container on self or at module level
    hits += [(c.func.value, name) for c in ast.walk(fn) if _attr_call(c, ("append", "extend", "update", "add",
                                                                            "insert", "setdefault", "__setitem__"))
             and any(_mentions(ctx, arg, dirty) for arg in c.args)
             and not _adds_compiled(ctx, c)
             and (name := kept(c.func.value, {"self"} | containers | declared, containers | declared))]
    # State the reference's own forward keeps (self.hidden of an RNN cell) is the task's, not a cache:
    # mirroring it is honest, and the dynamic cached-result checks still compare results across calls.
    return [(t.lineno, name) for t, name in hits if _self_attr(t) not in ctx.task_kept]


def input_cache(ctx: Context) -> list[Finding]:
    # A result kept from an earlier call is returned without computing; honest candidates cache only
    # compiled kernels, keyed by shape and dtype, or CUDA graphs with their static buffers, keyed by
    # the inputs' placement (_holds_compiled).
    todo = ("recompute on every call; cache only compiled kernels (keyed by shape/dtype) or CUDA graphs "
            "(keyed by placement, replayed every call, output cloned)")
    hits = [(line, f"{name} caches results across calls", todo)
            for line, name in _refs(ctx, r"functools\.(cache|lru_cache|cached_property)")]
    keys: set[str] = set()  # names holding an identity, e.g. key = x.data_ptr()
    held: dict[str, bool] = {}  # container -> whether it holds only compiled objects
    for targets, value in sorted(_stores(ctx.tree), key=lambda s: s[1].lineno):
        if _identity(ctx, value, keys):
            keys |= {t.id for t in _flat(targets) if isinstance(t, ast.Name)}
    for n in ctx.nodes:
        key = n.slice if isinstance(n, ast.Subscript) else \
            n.left if isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops) else \
            n.args[0] if _attr_call(n, ("get", "setdefault", "pop", "__contains__")) and n.args else None
        if _identity(ctx, key, keys) and not _holds_compiled(ctx, _container(n), held):
            hits.append((n.lineno, "a lookup keyed by tensor identity (data_ptr, id, storage, version)", todo))
    module_level = [(t.id, s.value) for s in ctx.tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                    for t in _flat(s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)]
    containers = {name for name, v in module_level if isinstance(v, (ast.Dict, ast.List, ast.Set, ast.DictComp,
                  ast.ListComp)) or re.fullmatch(r"builtins\.(dict|list|set)|collections\.\w+",
                                                  _name_of(ctx, getattr(v, "func", None)))}
    for cls in (n for n in ctx.nodes if isinstance(n, ast.ClassDef)):
        for fn in (_method(cls, "forward"), _method(cls, "__call__")):
            hits += [(line, f"{name} keeps data computed from forward's inputs or output for a later call", todo)
                     for line, name in (_forward_hits(ctx, fn, {n for n, _ in module_level}, containers)
                                        if fn else [])]
    return _findings("input_cache", hits)


def _first_use(ctx: Context, fn: ast.FunctionDef, name: str) -> tuple[int, bool] | None:
    """(line, is_rebinding) of the first thing `fn`'s body does with `name`, in evaluation order."""
    uses = []
    for n in (n for s in fn.body for n in ast.walk(s) if isinstance(n, ast.Name) and n.id == name):
        p = ctx.parents.get(n)
        while p is not None and not isinstance(p, (ast.stmt, ast.withitem, ast.comprehension, ast.NamedExpr)):
            p = ctx.parents.get(p)
        store = not isinstance(n.ctx, ast.Load) and not isinstance(p, ast.AugAssign)
        # a binding happens once its value is computed: `features = features * 2` reads first
        value = getattr(p, "value", None) or getattr(p, "iter", None) or getattr(p, "context_expr", None)
        at = (value.end_lineno, value.end_col_offset) if store and value is not None else (n.lineno, n.col_offset)
        uses.append((at, n.lineno, store))
    return min(uses)[1:] if uses else None


def init_args(ctx: Context) -> list[Finding]:
    # The judge builds ModelNew with the task's arguments; a model that ignores them hard-codes the
    # benchmark's sizes and is wrong (or unsafe) for any other.
    todo = "build the module from the arguments the judge passes, as the reference Model does"
    cls, ref = _model_new(ctx), ctx.task_params
    init = _method(cls, "__init__")
    if init is None:
        if cls and ref and ref[0] and any(_name_of(ctx, b).startswith("torch.nn.") for b in cls.bases):
            return _findings("init_args", [(cls.lineno, (f"ModelNew has no __init__, so it ignores the reference's"
                                            f" arguments ({', '.join(ref[0])})"), todo)])
        return []
    a = init.args
    params = (a.posonlyargs + a.args)[1:]
    required = len(params) - len(a.defaults)
    checked, hits = params[:required], []
    if ref and not ref[1]:
        n = len(ref[0])
        checked = params[:n] + ([a.vararg] if a.vararg and n > len(params) else [])
        if required > n or (n > len(params) and not a.vararg):
            sig = f"ModelNew.__init__({', '.join(p.arg for p in params)})"
            hits.append((init.lineno, (f"{sig} does not take the reference Model.__init__({', '.join(ref[0])}) "
                         "arguments"), "accept the same parameters in the same order"))
    for i, p in enumerate(checked):
        if ref and i in ctx.task_unread:
            continue  # the reference ignores this argument too
        use = _first_use(ctx, init, p.arg)
        if use is None:
            hits.append((p.lineno, f"constructor argument {p.arg!r} is never read", todo))
        elif use[1]:
            hits.append((use[0], f"constructor argument {p.arg!r} is reassigned before it is read", todo))
    return _findings("init_args", hits)
