"""Which kind of candidate a source is, read from the calls it makes (not from its text alone)."""
from __future__ import annotations

import ast

# The call that builds a candidate's kernels decides its format, first match wins.
_BUILDERS = (("load_cuda", "nvrtc"), ("load_inline", "inline"), ("load", "inline"), ("load_c", "c"))


def called_names(source: str) -> set[str]:
    """Names of every function called in `source` (attribute calls by their last part)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute):
                names.add(fn.attr)
            elif isinstance(fn, ast.Name):
                names.add(fn.id)
    return names


def detect_format(source: str) -> str:
    """'nvrtc', 'inline', 'c', or 'torch' (no kernel of its own). Raises SyntaxError."""
    called = called_names(source)
    for builder, fmt in _BUILDERS:
        if builder in called and (builder != "load" or "cpp_extension" in source):
            return fmt
    return "torch"
