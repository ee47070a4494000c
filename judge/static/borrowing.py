"""Static checks of outputs the candidate's kernels did not compute: torch computing it in an
except handler on forward's path (`reference_fallback`), the reference model used or imported
(`reference_model`), tensor subclasses and lazy wrappers that fake or defer the work (`tensor_subclass`)."""
from __future__ import annotations

import ast
import sys

from .context import (
    _COMPUTE,
    Context,
    Finding,
    _attr_call,
    _findings,
    _in_model,
    _method,
    _model_new,
    _name_of,
    _per_call,
    _refs,
)


def reference_fallback(ctx: Context) -> list[Finding]:
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


_TASK_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs", "get_test_inputs", "get_call_sites"})
_PACKAGES = frozenset({"torch", "numpy", "triton", "kernelevo", "cuda", "cupy", "numba", "einops", "pycuda",
                       "nvidia", "cutlass", "scipy", "functorch", "typing_extensions", "requests", "urllib3",
                       "httpx", "aiohttp", "dill", "joblib", "cloudpickle", "psutil"})


def reference_model(ctx: Context) -> list[Finding]:
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


def tensor_subclass(ctx: Context) -> list[Finding]:
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
