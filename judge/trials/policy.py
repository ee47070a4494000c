"""Whose code does the work: the candidate's own kernels, or torch's?

`mixed` (the default) lets torch do glue and library calls, but at least one of the candidate's
own kernels must run during forward: a candidate that only rearranges torch calls is not a
kernel. `strict` allows no torch compute at all besides the candidate's kernels; copies, fills
and views are glue either way.

On a GPU the evidence is the profiler's list of device kernels, matched by name against the
`__global__` and `@triton.jit` functions in the candidate's source. On the CPU it is which functions
forward calls: kernelevo.runtime's C functions, functions of an extension module built for this
candidate and Triton kernels launched in Triton's interpreter count as the candidate's own; aten
operators other than glue count as torch compute, whoever calls them.

An extension's C++ that calls ATen (`torch::relu(...)` inside a load_inline function) is both:
its function ran, so it is own code, and the ATen operators it dispatched are in the profile
as aten:: events like any others (the profiler records at the dispatcher, not at the Python
call), so they are torch compute. `strict` therefore rejects a C++ wrapper around torch ops.
`mixed` accepts it, deliberately: on the CPU there is no line the profiler can see between an
extension's own arithmetic and its glue (unlike a GPU's device kernels), and a time share of
"own" code would be a noisy threshold that rejects honest library-plus-epilogue kernels. This is
no weaker than `mixed` on a GPU, where any own kernel, even a trivial one, beside torch compute
passes: `mixed` asks that the candidate brought a kernel, `strict` that its kernels did the work.
Such a wrapper gains nothing over eager, so the search does not favour it.
"""
from __future__ import annotations

import re
import sys

from kernelevo.judge.trials.guards import Rejected

# "model": an assembled whole model (kernelevo assemble), whose own kernels do the parts in place and
# torch the rest, as the model wrote it: each kernel passed its own part's policy in its search, and a
# model with no part in place is judged as it is (that it still is the model), so none need run here.
POLICIES = ("mixed", "strict", "model")
_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                     r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
# Device activity that moves or initialises memory rather than computing.
_GLUE_KERNELS = re.compile(r"memcpy|memset|FillFunctor|fill_kernel|copy_kernel|CatArrayBatchedCopy|"
                           r"direct_copy|contiguous", re.I)
_GLUE_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "view", "reshape", "_reshape_alias", "contiguous", "clone", "copy_", "to", "_to_copy",
    "as_strided", "t", "transpose", "permute", "expand", "select", "slice", "unsqueeze", "squeeze",
    "flatten", "detach", "alias", "resolve_conj", "resolve_neg", "lift_fresh", "item", "_local_scalar_dense",
    "set_", "resize_", "narrow", "unbind", "split", "chunk", "cat", "stack", "view_as", "unflatten",
    "expand_as", "movedim", "_unsafe_view", "new_empty", "new_empty_strided", "new_zeros", "is_nonzero",
}


def own_kernel_names(source: str) -> set[str]:
    """Names of the `__global__` functions written in the candidate's source strings, and of its
    `@triton.jit` functions (the profiler names a Triton kernel by its function). A kernel a macro defines
    is named at each of the macro's uses (`GEMM(gemm_v4, 4)`), not by the macro's parameter."""
    from kernelevo.formats import triton_kernels
    from kernelevo.runtime import expand_kernel_macros

    try:
        jitted = set(triton_kernels(source))
    except SyntaxError:
        jitted = set()
    return set(_GLOBAL.findall(expand_kernel_macros(source))) | jitted


def check(policy: str, forward, args: list, device: str, source: str) -> dict:
    """Raise Rejected if forward's work breaks `policy`; return the evidence either way."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {POLICIES}")
    if device.startswith("cuda"):
        own, other = _cuda_kernels(forward, args, own_kernel_names(source))
    else:
        own, other = _cpu_calls(forward, args)
    evidence = {"policy": policy, "own_kernels": sorted(set(own)), "torch_compute": sorted(set(other))}
    if policy == "model":
        return evidence
    if not own:
        ran = f" (it ran only {', '.join(sorted(set(other))[:3])})" if other else ""
        raise Rejected("no_own_kernel", f"none of the candidate's own kernels ran during forward{ran}; "
                       f"under --policy {policy} at least one must", evidence)
    if policy == "strict" and other:
        raise Rejected("policy_strict", f"forward ran torch compute besides its own kernels "
                       f"({', '.join(sorted(set(other))[:3])}); --policy strict allows only the candidate's "
                       "kernels, copies and fills", evidence)
    return evidence


def name_pattern(names: set[str]) -> re.Pattern | None:
    """Matches a device kernel's name (demangled by CUPTI) that is one of `names`."""
    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b") if names else None


def _short(name: str) -> str:
    return name if len(name) <= 80 else name[:77] + "..."


def _cuda_kernels(forward, args: list, names: set[str]) -> tuple[list[str], list[str]]:
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        forward(args)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    pattern = name_pattern(names)
    own = [_short(k) for k in kernels if pattern and pattern.search(k)]
    other = [_short(k) for k in kernels if not (pattern and pattern.search(k)) and not _GLUE_KERNELS.search(k)]
    return own, other


def _cpu_calls(forward, args: list) -> tuple[list[str], list[str]]:
    """Calls into runtime C functions or extension modules, and aten compute operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelevo.runtime.c import CFunction

    own: list[str] = []
    c_call = CFunction.__call__.__code__
    grid_call = _interpreter_launch()
    functions = _extension_functions()

    def watch(frame, event, arg):
        if event == "call" and frame.f_code is c_call:
            own.append(frame.f_locals["self"].name)
        elif event == "call" and frame.f_code is grid_call:  # a Triton kernel's grid, run by the interpreter
            own.append(getattr(frame.f_locals["self"].fn, "__name__", "triton kernel"))
        elif event == "c_call" and id(arg) in functions:  # by identity: a module name can be borrowed
            own.append(f"{getattr(arg, '__module__', '?')}.{getattr(arg, '__name__', '?')}")

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        previous = sys.getprofile()
        sys.setprofile(watch)
        try:
            forward(args)
        finally:
            sys.setprofile(previous)
    ops = [e.name.removeprefix("aten::") for e in prof.events() if e.name.startswith("aten::")]
    return own, [f"aten::{op}" for op in ops if op not in _GLUE_OPS]


def _interpreter_launch():
    """The code object that runs one launch of a Triton kernel in Triton's interpreter (every
    program of its grid), when the candidate loaded triton; None otherwise (triton is not imported
    here for a candidate that did not)."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    executor = getattr(interpreter, "GridExecutor", None)
    return executor.__call__.__code__ if executor is not None else None


def _extension_functions() -> set[int]:
    """Identities of the functions that the extensions built for this candidate define (pybind11's
    and the C API's module-level functions)."""
    import types

    return {id(v) for m in _extension_objects() for v in list(vars(m).values())
            if isinstance(v, types.BuiltinFunctionType)}


def _extension_modules() -> set[str]:
    """Names of the extension modules built for this candidate (judge/run/profiling.py times by them),
    less a name that sys.modules gives to another module (an extension called `torch`)."""
    return {m.__name__ for m in _extension_objects() if sys.modules.get(m.__name__, m) is m}


def _extension_objects() -> list:
    """Extension modules loaded from a file under TORCH_EXTENSIONS_DIR, which the worker sets per
    candidate, so torch's own extension modules (in its install directory) never count.

    torch's cpp_extension imports the module it built through importlib but never enters it in
    sys.modules, so a search of sys.modules alone found none and an honest load_inline kernel
    was rejected as no_own_kernel. They are looked for among all live objects as well.
    """
    import gc
    import os
    import types

    root = os.environ.get("TORCH_EXTENSIONS_DIR", "")
    if not root:
        return []
    # By type, not isinstance: isinstance reads `__class__`, which some lazy objects compute (and warn).
    found = [o for o in [*sys.modules.values(), *gc.get_objects()] if issubclass(type(o), types.ModuleType)]
    return list({id(m): m for m in found if _built_under(m, root)}.values())


def _built_under(module, root: str) -> bool:
    """Whether `module` is a compiled extension loaded from a file under `root`."""
    from importlib.machinery import ExtensionFileLoader
    from pathlib import Path

    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not isinstance(getattr(module, "__loader__", None), ExtensionFileLoader):
        return False
    return Path(path).resolve().is_relative_to(Path(root).resolve())
