"""The candidate formats: the one list of them (what --format, `format =`, the prompts and the judge
take), and which format a source is, read from the calls it makes (not from its text alone). Pure
text, no judge: config, the agent, the judge and the search all read formats from here."""
from __future__ import annotations

import ast

# The formats a candidate is written in; "auto" asks for CUDA and Triton side by side.
FORMATS = ("nvrtc", "inline", "triton", "c")
FORMAT_CHOICES = FORMATS + ("auto",)
# The call that builds a candidate's kernels decides its format, first match wins.


def native(device: str) -> str:
    """The format a run on `device` asks for when none is given: C on the CPU, CUDA compiled by NVRTC on a GPU.
    The one place that decides it."""
    return "c" if device == "cpu" else "nvrtc"


BUILDERS = (("load_cuda", "nvrtc"), ("load_inline", "inline"), ("load", "inline"), ("load_c", "c"))


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


def dotted(node: ast.AST) -> str:
    """`a.b.c` of a name or attribute chain ("" for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _decorator_name(node: ast.expr) -> str:
    """`triton.jit`, `jit`, `triton.autotune` ... of a decorator, called or not ("" for others)."""
    return dotted(node.func if isinstance(node, ast.Call) else node)


def triton_kernels(source: str | ast.Module) -> list[str]:
    """Names of the functions decorated `@triton.jit` (or `@jit` imported from triton), in source
    order: a candidate's own Triton kernels. Raises SyntaxError."""
    tree = ast.parse(source) if isinstance(source, str) else source
    jit_names = {"triton.jit"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
            jit_names |= {a.asname or a.name for a in node.names if a.name == "jit"}
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and any(_decorator_name(d) in jit_names for d in node.decorator_list)]


def detect_format(source: str) -> str:
    """'nvrtc', 'inline', 'c', 'triton', or 'torch' (no kernel of its own). Raises SyntaxError."""
    called = called_names(source)
    for builder, fmt in BUILDERS:
        if builder in called and (builder != "load" or "cpp_extension" in source):
            return fmt
    if triton_kernels(source):
        return "triton"
    return "torch"
