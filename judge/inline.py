"""Faster builds for `load_inline` candidates, with the candidate's source meaning unchanged.

Measured on an H100 host (16 cores, torch 2.11, nvcc 13.0; benchmarks/results/inline_build.md):
a trivial extension took 53 s cold, of which the .cu file took 52 s and main.cpp 16 s (built in
parallel). `torch/extension.h` in the .cu pulls in all of libtorch's C++ API and pybind11; CUDA
sources need only tensors, so `torch/types.h` serves them and halves the .cu to 26 s.
Precompiled headers only shorten main.cpp, which is not on the critical path, and torch writes
the 700 MB header into its own install directory, racing between parallel builds: not used.

The worker installs `fast_load_inline` in place of torch's before the candidate runs. If the
slimmed source fails to build, the original is built as written, so the verdict is the
candidate's own.
"""
from __future__ import annotations

import re

_HEAVY = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<torch/extension\.h>", re.M)
# Uses that need more than torch/types.h: the Python binding layer and the C++ frontend.
_NEEDS_FULL = re.compile(r"\bpy::|pybind11|PYBIND11_|torch::nn\b|torch::optim\b|torch::autograd\b|torch::jit\b")


def slim(cuda_source: str) -> str | None:
    """The source with torch/extension.h replaced by torch/types.h, or None if unsafe."""
    if not _HEAVY.search(cuda_source) or _NEEDS_FULL.search(cuda_source):
        return None
    return _HEAVY.sub("#include <torch/types.h>", cuda_source)


def _join(sources) -> str:
    return sources if isinstance(sources, str) else "\n".join(sources)


def install() -> None:
    """Replace torch.utils.cpp_extension.load_inline with the slimming wrapper (idempotent)."""
    from torch.utils import cpp_extension

    original = getattr(cpp_extension.load_inline, "__wrapped__", cpp_extension.load_inline)

    def fast_load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        slimmed = slim(_join(cuda_sources)) if cuda_sources else None
        if slimmed is not None:
            try:
                return original(name, cpp_sources, slimmed, *args, **kwargs)
            except RuntimeError:
                pass  # built as written below; its error, if any, is the one reported
        return original(name, cpp_sources, cuda_sources, *args, **kwargs)

    fast_load_inline.__wrapped__ = original
    fast_load_inline.__doc__ = original.__doc__
    cpp_extension.load_inline = fast_load_inline
