"""Static checks of state: results kept across calls (`input_cache`) and constructor arguments not
used as given (`init_args`). Registered into static.CHECKS when static.py is imported."""
from __future__ import annotations

import ast
import re

from .static import (
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
    check_named,
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

    hits = [(t, name) for targets, value in stores if _mentions(ctx, value, dirty)
            for t in _flat(targets) if (name := kept(t, {"self"} | declared | (module_names - local), declared))]
    # self._memo.append(y), _CACHE.update(...): a container on self or at module level
    hits += [(c.func.value, name) for c in ast.walk(fn) if _attr_call(c, ("append", "extend", "update", "add",
                                                                            "insert", "setdefault", "__setitem__"))
             and any(_mentions(ctx, arg, dirty) for arg in c.args)
             and (name := kept(c.func.value, {"self"} | containers | declared, containers | declared))]
    # State the reference's own forward keeps (self.hidden of an RNN cell) is the task's, not a cache:
    # mirroring it is honest, and the dynamic cached-result checks still compare results across calls.
    return [(t.lineno, name) for t, name in hits if _self_attr(t) not in ctx.task_kept]


@check_named("input_cache")
def _input_cache(ctx: Context) -> list[Finding]:
    # A result kept from an earlier call is returned without computing; honest candidates cache only
    # compiled kernels, keyed by shape and dtype.
    todo = "recompute on every call; cache only compiled kernels, keyed by shape/dtype"
    hits = [(line, f"{name} caches results across calls", todo)
            for line, name in _refs(ctx, r"functools\.(cache|lru_cache|cached_property)")]
    keys: set[str] = set()  # names holding an identity, e.g. key = x.data_ptr()
    for targets, value in sorted(_stores(ctx.tree), key=lambda s: s[1].lineno):
        if _identity(ctx, value, keys):
            keys |= {t.id for t in _flat(targets) if isinstance(t, ast.Name)}
    for n in ctx.nodes:
        key = n.slice if isinstance(n, ast.Subscript) else \
            n.left if isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops) else \
            n.args[0] if _attr_call(n, ("get", "setdefault", "pop", "__contains__")) and n.args else None
        if _identity(ctx, key, keys):
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


@check_named("init_args")
def _init_args(ctx: Context) -> list[Finding]:
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
