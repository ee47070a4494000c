"""Whose code does the work: the candidate's own kernels, or torch's?

`mixed` (the default) lets torch do glue and library calls, but at least one of the candidate's
own kernels must run during forward: a candidate that only rearranges torch calls is not a
kernel. `strict` allows no torch compute at all besides the candidate's kernels; copies, fills
and views are glue either way.

On a GPU the evidence is the profiler's list of device kernels, matched by name against the
`__global__` functions in the candidate's source. On the CPU it is which functions forward calls:
kernelevo.runtime's C functions and functions of a compiled extension module count as the
candidate's own; aten operators other than glue count as torch compute.
"""
from __future__ import annotations

import re
import sys

from kernelevo.judge.guards import Rejected

POLICIES = ("mixed", "strict")
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
    """Names of the `__global__` functions written in the candidate's source strings."""
    return set(_GLOBAL.findall(source))


def check(policy: str, forward, args: list, device: str, source: str) -> dict:
    """Raise Rejected if forward's work breaks `policy`; return the evidence either way."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {POLICIES}")
    if device.startswith("cuda"):
        own, other = _cuda_kernels(forward, args, own_kernel_names(source))
    else:
        own, other = _cpu_calls(forward, args)
    evidence = {"policy": policy, "own_kernels": sorted(set(own)), "torch_compute": sorted(set(other))}
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
    extensions = _extension_modules()

    def watch(frame, event, arg):
        if event == "call" and frame.f_code is c_call:
            own.append(frame.f_locals["self"].name)
        elif event == "c_call" and getattr(arg, "__module__", None) in extensions:
            own.append(f"{arg.__module__}.{getattr(arg, '__name__', '?')}")

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        previous = sys.getprofile()
        sys.setprofile(watch)
        try:
            forward(args)
        finally:
            sys.setprofile(previous)
    ops = [e.name.removeprefix("aten::") for e in prof.events() if e.name.startswith("aten::")]
    return own, [f"aten::{op}" for op in ops if op not in _GLUE_OPS]


def _extension_modules() -> set[str]:
    """Modules loaded from compiled extensions built for this candidate (load_inline)."""
    import os

    root = os.environ.get("TORCH_EXTENSIONS_DIR", "")
    return {name for name, mod in list(sys.modules.items())
            if root and str(getattr(mod, "__file__", "") or "").startswith(root)}
