"""Behaviour descriptors: which *kind* of kernel a candidate is, read from its source text.

The search keeps the best kernel of each niche (MAP-Elites) so that different strategies coexist
long enough to mature, instead of the first fast one crowding out every other. Each descriptor
below separates kernels that are worth keeping side by side:

- `launches` (bucketed "0", "1", "2", "3+"): how many kernel launches one forward makes. One fused
  kernel saves launch overhead and HBM round trips; a pipeline (split reduction + finish pass,
  GEMM then epilogue) buys parallelism or simpler kernels. Which wins depends on shapes, and a
  fused kernel usually starts slower than a pipeline of easy kernels, so it needs its own cell.
- `shared_memory`: tiling with on-chip reuse versus streaming through registers and L1. Tiled
  kernels are harder to get right and slow until tuned, yet they are the only road to
  compute-bound speed on GEMM/conv-like work.
- `tensor_cores` (mma/wmma/wgmma/ldmatrix, Triton's `tl.dot` unless in IEEE fp32): a different
  arithmetic path with its own layout and precision constraints; its ceiling is far higher than
  SIMT code, its first versions are not.
- `vector_io` (float4/int4/half2/... accesses): wide memory transactions with alignment and
  shape fallbacks; the main lever of memory-bound kernels, with a separate tuning ladder.
- `torch_ops`: forward still calls torch compute (cuBLAS/cuDNN through torch.matmul, F.*,
  submodules). Such hybrids are often fast early but fail `--policy strict`; fully custom kernels
  must not be judged against them alone.

Everything here is static and heuristic, and must never raise on arbitrary text (LLM output):
a source that cannot be parsed still gets regex-based descriptors.
"""
from __future__ import annotations

import ast
import re
from typing import Mapping

from kernelevo.formats import BUILDERS, dotted as _dotted, triton_kernels

# Calls that build a candidate's kernels; the names they are assigned to are launch handles.
_BUILDERS = {name for name, _ in BUILDERS}
_DEFAULT_HANDLES = {"nvrtc": {"_mod", "mod"}, "c": {"_lib", "lib"}, "inline": {"_ext", "ext"}}
_HANDLE_METHODS = {"set_max_shared_memory", "build", "cubin"}  # handle.kernel.METHOD(): not launches
LOOP_FACTOR = 3  # a launch inside a Python loop counts as "many": the loop runs it repeatedly

# torch calls that move, view or allocate memory rather than compute (cf. judge/trials/policy.py's glue,
# kept separate here so that the search does not import the judge).
_GLUE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "view", "reshape", "contiguous", "clone", "copy_", "to", "as_strided", "t",
    "transpose", "permute", "expand", "select", "unsqueeze", "squeeze", "flatten", "detach", "item",
    "narrow", "unbind", "split", "chunk", "cat", "stack", "view_as", "unflatten", "expand_as", "movedim",
    "new_empty", "new_zeros", "tensor", "as_tensor", "from_numpy", "arange", "is_tensor", "is_floating_point",
    "device", "dtype", "Size", "no_grad", "inference_mode", "parallel_for", "get_num_threads",
    "data_ptr", "numel", "size", "dim", "stride", "is_contiguous", "float", "half", "cuda", "cpu",
}
_TORCH_ROOTS = {"torch", "F", "nn", "functional"}
_NON_COMPUTE_TORCH = ("torch.cuda.", "torch.backends.", "torch.utils.", "torch.version", "torch.jit.",
                      "torch.compiler.", "torch.library.", "torch.ops.")
_TENSOR_COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "softmax", "log_softmax", "relu", "gelu",
    "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "sum", "mean", "max", "min", "amax", "amin",
    "var", "std", "norm", "pow", "mul", "add", "sub", "div", "neg", "abs", "clamp", "where", "cumsum",
    "prod", "topk", "sort", "argmax", "argmin", "masked_fill", "conv2d", "linear", "layer_norm",
}

_C_HINT = re.compile(r'__global__|#\s*include|#\s*define|extern\s+"C"|[;{}]\s*$', re.M)
_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_PY_COMMENT = re.compile(r"(?m)#(?!\s*(?:define|include|pragma|if|ifdef|ifndef|else|elif|endif|undef|"
                         r"error|line)\b)[^\n]*$")
_SMEM = re.compile(r"__shared__|set_max_shared_memory|MaxDynamicSharedMemorySize|shared_mem\s*=\s*[^0\s,)]"
                   r"|\.shared::|cp\.async|__pipeline_memcpy_async|cuda::memcpy_async")
_TC = re.compile(r"\bwmma\b|\bmma\.sync\b|\bmma_sync\b|\bwgmma\b|\bldmatrix\b|\bmma\s*\(|tcgen05|"
                 r"__hmma|nvcuda::wmma|load_matrix_sync")
_VEC = re.compile(r"\b(?:float[24]|double2|u?int[24]|u?short[24]|u?char4|u?longlong2|__half2|half2|"
                  r"__nv_bfloat162|nv_bfloat162)\b|\.v[24]\.|\b__m(?:128|256|512)[di]?\b|\b_mm\d*_load")
_LAUNCH_CHEVRON = re.compile(r"<<<")
_TL_DOT = re.compile(r"\btl\.dot\s*\(")
_TL_IEEE = re.compile(r"input_precision\s*=\s*['\"]ieee['\"]|allow_tf32\s*=\s*False")
_CXX_TORCH_CALL = re.compile(r"\b(?:torch|at)::(?:native::)?(\w+)\s*\(")


def describe(source: str, fmt: str, measured: Mapping | None = None) -> dict:
    """Descriptors of one kernel: {launches, shared_memory, tensor_cores, vector_io, torch_ops}.

    `measured`, when given, overrides static guesses with what the judge saw: an int "launches",
    or the policy check's "torch_compute" list (evaluation evidence). Never raises."""
    out = {"launches": 0, "shared_memory": False, "tensor_cores": False, "vector_io": False, "torch_ops": False}
    try:
        source = source if isinstance(source, str) else str(source or "")
        python, c_parts, tree = code_parts(source)
        c_text = "\n".join(c_parts)
        device_text = c_text if tree is not None else _C_COMMENT.sub("", _PY_COMMENT.sub("", source))
        out["shared_memory"] = bool(_SMEM.search(device_text) or _SMEM.search(python))
        dots = len(_TL_DOT.findall(python))  # Triton's tensor cores, except where every product is IEEE fp32
        out["tensor_cores"] = bool(_TC.search(device_text)) or dots > len(_TL_IEEE.findall(python))
        out["vector_io"] = bool(_VEC.search(device_text))
        out["launches"] = _launches(source, tree, c_text, fmt)
        out["torch_ops"] = _torch_ops(tree, c_text)
        if measured:
            if isinstance(measured.get("launches"), int):
                out["launches"] = measured["launches"]
            if isinstance(measured.get("torch_compute"), (list, tuple)):
                out["torch_ops"] = bool(measured["torch_compute"])
    except Exception:  # descriptors are a hint for diversity; a weird source must not stop the run
        pass
    return out


def launch_bucket(launches: int) -> str:
    return "3+" if launches >= 3 else str(max(0, int(launches)))


def niche_key(descriptors: Mapping) -> str:
    """A stable name such as "L1-smem-vec": launch bucket, then the true flags in a fixed order."""
    try:
        parts = [f"L{launch_bucket(int(descriptors.get('launches', 0) or 0))}"]
    except (TypeError, ValueError):
        parts = ["L0"]
    for key, tag in (("shared_memory", "smem"), ("tensor_cores", "tc"), ("vector_io", "vec"), ("torch_ops", "torch")):
        if descriptors.get(key):
            parts.append(tag)
    return "-".join(parts)


def code_parts(source: str) -> tuple[str, list[str], ast.Module | None]:
    """(Python code without comments and docstrings, C/CUDA string sources without comments, the AST).

    C sources inside the Python file are string constants that look like C; separating them lets
    `//` be a C comment in C and floor division in Python. Unparsable text: (text without
    comments, [], None)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _C_COMMENT.sub("", _PY_COMMENT.sub("", source)), [], None
    c_parts: list[str] = []
    stripped = ast.parse(source)  # a second copy to rewrite: `tree` stays the source as written
    for node in ast.walk(stripped):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body[0].value.value = ""  # a docstring is prose, not behaviour
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _C_HINT.search(node.value):
            c_parts.append(_C_COMMENT.sub("", node.value))
            node.value = f"<c{len(c_parts) - 1}>"
    try:
        python = ast.unparse(stripped)
    except Exception:  # unparse of exotic trees; fall back to the raw text without comments
        python = _PY_COMMENT.sub("", source)
    return python, c_parts, tree


def _launches(source: str, tree: ast.Module | None, c_text: str, fmt: str) -> int:
    text = c_text if tree is not None else _C_COMMENT.sub("", source)
    chevrons = len(_LAUNCH_CHEVRON.findall(text))
    if chevrons:
        try:
            chevrons = _CLaunches(text).total()
        except (RecursionError, IndexError):
            pass  # pathological nesting: keep the plain count
    if fmt == "inline" and chevrons:
        return chevrons  # the host function launches them; Python calls it once
    if tree is None:
        handles = "|".join(sorted(set().union(*_DEFAULT_HANDLES.values())))
        calls = re.findall(rf"\b(?:{handles})\.(\w+)\s*\(", source)
        return len([c for c in calls if c not in _HANDLE_METHODS]) or chevrons
    return _ForwardWalker(tree, fmt).launches() or chevrons


class _CLaunches:
    """`<<<` launches in C++ host code, branch-aware: if/else takes the larger arm, a loop counts as
    many (LOOP_FACTOR), so that a vectorised path and its scalar fallback count as one launch."""

    _TOKEN = re.compile(r'<<<|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[A-Za-z_]\w*|[{}()\[\];]')

    def __init__(self, text: str):
        text = re.sub(r"(?m)^\s*#[^\n]*$", "", text)  # preprocessor lines
        self.toks = [t for t in self._TOKEN.findall(text) if t[0] not in "\"'"]
        self.i = 0

    def total(self) -> int:
        n = 0
        while self.i < len(self.toks):
            start = self.i
            n += self._stmt()
            self.i += self.i == start  # a stray "}" at top level: step over it
        return n

    def _peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def _parens(self) -> int:
        """Skip a balanced (...) group if one starts here; launches inside it."""
        if self._peek() != "(":
            return 0
        depth, n = 0, 0
        while self.i < len(self.toks):
            t = self.toks[self.i]
            self.i += 1
            depth += t in "([{" and len(t) == 1
            depth -= t in ")]}" and len(t) == 1
            n += t == "<<<"
            if depth == 0:
                break
        return n

    def _stmt(self) -> int:
        t = self._peek()
        if t == "{":
            self.i += 1
            n = 0
            while self.i < len(self.toks) and self._peek() != "}":
                n += self._stmt()
            self.i += 1
            return n
        if t == "if":
            self.i += 1
            n = self._parens()
            arm = self._stmt()
            if self._peek() == "else":
                self.i += 1
                arm = max(arm, self._stmt())
            return n + arm
        if t in ("for", "while", "switch"):
            self.i += 1
            head = self._parens()
            body = self._stmt()
            return head + (body if t == "switch" else LOOP_FACTOR * body)
        if t == "do":
            self.i += 1
            body = LOOP_FACTOR * self._stmt()
            if self._peek() == "while":
                self.i += 1
                body += self._parens()
            return body
        return self._simple()

    def _simple(self) -> int:
        """A declaration or expression up to `;`, or a header followed by a `{` body (function)."""
        n, depth = 0, 0
        while self.i < len(self.toks):
            t = self.toks[self.i]
            if depth == 0 and t in "{}" and len(t) == 1:
                # a body opens (function, lambda-less block), or the enclosing block closes
                return n + (self._stmt() if t == "{" else 0)
            self.i += 1
            if t == "<<<":
                n += 1
            elif t in ("(", "[", "{"):
                depth += 1
            elif t in (")", "]", "}"):
                depth = max(0, depth - 1)
            elif t == ";" and depth == 0:
                return n
        return n


def _torch_ops(tree: ast.Module | None, c_text: str) -> bool:
    if any(name not in _GLUE for name in _CXX_TORCH_CALL.findall(c_text)):
        return True
    return tree is not None and _ForwardWalker(tree, "").torch_ops()


def _outside(tree: ast.AST, skipped: set[str]):
    """Every node of `tree` except those inside the functions named in `skipped` (Triton kernels)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node)
                    if not (isinstance(child, ast.FunctionDef) and child.name in skipped))


class _ForwardWalker:
    """Follows ModelNew.forward and the helpers it calls (methods on self, module functions)."""

    def __init__(self, tree: ast.Module, fmt: str):
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        cls = next((c for c in classes if c.name == "ModelNew"), None) or next(
            (c for c in classes if any(getattr(f, "name", "") == "forward" for f in c.body)), None)
        self.methods = {n.name: n for n in (cls.body if cls else []) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.handles = set(_DEFAULT_HANDLES.get(fmt, set().union(*_DEFAULT_HANDLES.values())))
        self.modules: set[str] = set()
        self.jitted = set(triton_kernels(tree))  # launched as name[grid](...)
        for node in _outside(tree, self.jitted):  # a kernel's own tl.load builds nothing
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and _dotted(node.value.func).split(".")[-1] in _BUILDERS:
                self.handles.update(_dotted(t).split(".")[-1] for t in node.targets if _dotted(t))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.modules.update((a.asname or a.name).split(".")[0] for a in node.names)

    def _callee(self, call: ast.Call) -> ast.AST | None:
        name = _dotted(call.func)
        if name.startswith("self.") and name.count(".") == 1:
            return self.methods.get(name[5:])
        return self.functions.get(name) if "." not in name else None

    def _is_launch(self, call: ast.Call) -> bool:
        if isinstance(call.func, ast.Subscript):  # kernel[grid](...), or self.kernel[grid](...) of a static method
            name = _dotted(call.func.value)
            return (name[5:] if name.startswith("self.") else name) in self.jitted
        parts = _dotted(call.func).split(".")
        if len(parts) >= 2 and parts[0] == "self":
            parts = parts[1:]
        return len(parts) == 2 and parts[0] in self.handles and parts[1] not in _HANDLE_METHODS

    def launches(self) -> int:
        forward = self.methods.get("forward")
        return self._count(forward.body, set()) if forward else 0

    def _count(self, stmts: list, stack: set) -> int:
        total = 0
        for st in stmts:
            if isinstance(st, ast.If):
                total += self._calls(st.test, stack) + max(self._count(st.body, stack), self._count(st.orelse, stack))
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
                total += LOOP_FACTOR * self._count(st.body, stack) + self._count(st.orelse, stack)
            elif isinstance(st, ast.Try):
                handlers = max([self._count(h.body, stack) for h in st.handlers] or [0])
                total += max(self._count(st.body, stack), handlers) + self._count(st.finalbody, stack)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                total += self._count(st.body, stack)
            elif not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                total += self._calls(st, stack)
        return total

    def _calls(self, node: ast.AST, stack: set) -> int:
        total = 0
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Call):
                continue
            if self._is_launch(sub):
                total += 1
            callee = self._callee(sub)
            if callee is not None and id(callee) not in stack:
                total += self._count(callee.body, stack | {id(callee)})
        return total

    def torch_ops(self) -> bool:
        forward = self.methods.get("forward")
        if not forward:
            return False
        seen, todo = set(), [forward]
        while todo:
            fn = todo.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Call):
                    callee = self._callee(sub)
                    if callee is not None:
                        todo.append(callee)
                    elif self._is_torch_compute(sub):
                        return True
        return False

    def _is_torch_compute(self, call: ast.Call) -> bool:
        name = _dotted(call.func)
        if not name:  # a method on a call's result: x.float().matmul(w)
            return isinstance(call.func, ast.Attribute) and call.func.attr in _TENSOR_COMPUTE_METHODS
        parts = name.split(".")
        if self._is_launch(call) or parts[-1] in _GLUE:
            return False
        if parts[0] == "self" and len(parts) == 2:
            return parts[1] not in self.methods  # self.linear(x): a torch submodule does the work
        if parts[0] in _TORCH_ROOTS:
            return len(parts) > 1 and not name.startswith(_NON_COMPUTE_TORCH)
        if parts[0] in self.modules or parts[0] in self.handles or len(parts) < 2:
            return False
        return parts[-1] in _TENSOR_COMPUTE_METHODS  # x.matmul(w), y.sum(dim)
