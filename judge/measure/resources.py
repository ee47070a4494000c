"""What the compiler gave each kernel: registers, spills, stack and shared memory.

The source is ptxas's own report (`-v`), which both builds ask for: kernelevo.runtime passes
`--ptxas-options=-v` to NVRTC and keeps the log beside the cubin; inline builds add `-Xptxas=-v`
to nvcc and keep what ninja printed (judge/run/inline.py). ptxas writes, per kernel:

    ptxas info    : Compiling entry function 'softmax_rows' for 'sm_90'
    ptxas info    : Function properties for softmax_rows
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 31 registers, used 1 barriers, 256 bytes smem

(nvcc prints the properties line without the `ptxas .` prefix.) Register counts also come from
CUPTI per launch (judge/run/profiling.py); only ptxas says how much spilled.
"""
from __future__ import annotations

import re
from pathlib import Path

from kernelevo.evaluation import KernelResources

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
BUILD_LOG = "kernelevo_ptxas.log"  # inline builds: ptxas's report, kept in the extension's folder


def demangle(name: str) -> str:
    """The function's own name from an Itanium-mangled one (`_Z5twicePKfPfi` -> `twice`,
    `_ZN2ns4stepEv` -> `ns::step`); other names as they are."""
    if not name.startswith("_Z"):
        return name
    rest, nested = name[2:], name.startswith("_ZN")
    rest = rest[1:] if nested else rest
    parts = []
    while rest[:1].isdigit():
        digits = re.match(r"\d+", rest).group(0)
        size = int(digits)
        parts.append(rest[len(digits):len(digits) + size])
        rest = rest[len(digits) + size:]
        if not nested:
            break
    return "::".join(parts) if parts else name


def parse_ptxas(text: str, compiler: str = "") -> list[KernelResources]:
    """One record per entry function in ptxas's verbose output, in the order compiled."""
    found: list[KernelResources] = []
    current: dict | None = None

    def close() -> None:
        if current is not None:
            found.append(KernelResources(**current))

    for line in text.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            close()
            current = {"name": demangle(entry.group(1)), "arch": entry.group(2), "compiler": compiler}
            continue
        if current is None:
            continue
        frame = _FRAME.search(line)
        if frame:
            current.update(stack_bytes=int(frame.group(1)), spill_stores=int(frame.group(2)),
                           spill_loads=int(frame.group(3)))
        used = _USED.search(line)
        if used:
            current["registers"] = int(used.group(1))
            barriers, smem = _BARRIERS.search(line), _SMEM.search(line)
            current["barriers"] = int(barriers.group(1)) if barriers else 0
            current["shared_bytes"] = int(smem.group(1)) if smem else 0
    close()
    return found


def collect() -> list[KernelResources]:
    """Resources of every kernel this process built: NVRTC modules of kernelevo.runtime, and the
    inline extensions under TORCH_EXTENSIONS_DIR. Call after the candidate was constructed."""
    import os
    import sys

    found: list[KernelResources] = []
    cuda = sys.modules.get("kernelevo.runtime.cuda")
    for module in list(getattr(cuda, "_cuda_modules", {}).values()):
        from_log = parse_ptxas(getattr(module, "log", "") or "", "nvrtc")
        found += from_log or from_driver(module)
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root and Path(root).is_dir():
        for log in sorted(Path(root).rglob(BUILD_LOG)):
            found += parse_ptxas(log.read_text(errors="replace"), "nvcc")
    unique: dict[tuple[str, str], KernelResources] = {}
    for r in found:
        unique.setdefault((r.name, r.arch), r)
    return list(unique.values())


def from_driver(module) -> list[KernelResources]:
    """Registers, local and static shared memory of a loaded module's kernels, asked of the driver:
    for a cubin whose log has no ptxas report. The driver does not say what spilled (compiler
    "driver"); local memory holds spills and local arrays alike."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return []
    attrs = driver.CUfunction_attribute
    found = []
    for name, kernel in module.kernels.items():
        for fn in list(kernel._functions.values())[:1]:  # loaded on this device: the same cubin on every one
            values = {}
            for key, attr in (("registers", attrs.CU_FUNC_ATTRIBUTE_NUM_REGS),
                              ("stack_bytes", attrs.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
                              ("shared_bytes", attrs.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)):
                err, value = driver.cuFuncGetAttribute(attr, fn)
                values[key] = int(value) if int(err) == 0 else 0
            found.append(KernelResources(name=name, compiler="driver", **values))
    return found
