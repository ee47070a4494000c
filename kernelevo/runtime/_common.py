"""What both launchers share: errors, the cache, and reading parameter types from source."""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path


class CompileError(RuntimeError):
    """The compiler rejected the source; `log` holds its full output."""

    def __init__(self, compiler: str, log: str):
        self.compiler = compiler
        self.log = log
        super().__init__(f"{compiler} failed:\n{log}")


class LaunchError(RuntimeError):
    """A kernel could not be called as written (bad arguments, unknown name, driver error)."""


def cache_dir() -> Path:
    """The cache's root: $KERNELEVO_CACHE_DIR, else ~/.cache/kernelevo."""
    root = os.environ.get("KERNELEVO_CACHE_DIR") or Path.home() / ".cache" / "kernelevo"
    return Path(root)


BUILD_VARIABLE = "KERNELEVO_BUILD_DIR"
# Cache entries found not to be what their record says they were built to, and built again: the judge
# shows these in its verdict's notes.
REBUILT: list[str] = []


def build_dir() -> Path:
    """Where compiled modules are kept: $KERNELEVO_BUILD_DIR (in the judge, the folder of the candidate
    being judged, which no other source's process may write), else the cache's root."""
    return Path(os.environ.get(BUILD_VARIABLE) or cache_dir())


def _record(path: Path) -> Path:
    return path.with_name(path.name + ".built")


def keep_built(path: Path, key: str) -> None:
    """Write beside the binary at `path` what it was built from (`key`) and its own digest (`kept`)."""
    data = path.read_bytes()
    write_atomic(_record(path), f"{key} {hashlib.sha256(data).hexdigest()}\n".encode())


def kept(path: Path, key: str) -> bool:
    """Whether the binary at `path` is the build of `key` that keep_built recorded. A file there that is
    not (rewritten, or put there without its record) is noted in REBUILT: the caller builds it again."""
    if not path.exists():
        return False
    try:
        stored = _record(path).read_text().split()
        ok = stored == [key, hashlib.sha256(path.read_bytes()).hexdigest()]
    except OSError:
        ok = False
    if not ok:
        REBUILT.append(f"rebuilt {path.name}: cache entry did not match its source")
    return ok


def slug(*parts: str) -> str:
    """A file-name-safe join of `parts` ("NVIDIA H100 80GB HBM3", "2.11.0+cu130" -> "NVIDIA-H100-...")."""
    import re

    return re.sub(r"[^A-Za-z0-9.]+", "-", "-".join(parts)).strip("-")


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def write_atomic(path: Path, data: bytes) -> None:
    # Several judge workers compile at once; a rename makes a half-written cache file impossible.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_SCALARS = {  # C type -> struct format character (native size, little-endian host)
    "bool": "?", "char": "b", "signed char": "b", "unsigned char": "B", "int8_t": "b",
    "uint8_t": "B", "short": "h", "int16_t": "h", "unsigned short": "H", "uint16_t": "H",
    "int": "i", "int32_t": "i", "signed": "i", "unsigned": "I", "unsigned int": "I",
    "uint32_t": "I", "long": "q", "long long": "q", "int64_t": "q", "ptrdiff_t": "q",
    "unsigned long": "Q", "unsigned long long": "Q", "uint64_t": "Q", "size_t": "Q",
    "float": "f", "double": "d",
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct)\b")


def _param_kind(decl: str) -> str:
    """'P' for a pointer, else the struct format of the scalar type."""
    if "*" in decl or "[" in decl:
        return "P"
    words = _QUALIFIERS.sub(" ", decl).split()
    ctype = " ".join(words[:-1]) if len(words) > 1 else " ".join(words)
    if ctype not in _SCALARS:
        raise LaunchError(f"unsupported parameter type {ctype!r} in {decl.strip()!r}: "
                          "use pointers and plain integer or floating-point scalars")
    return _SCALARS[ctype]


def _split_params(params: str) -> list[str]:
    params = params.strip()
    if params in ("", "void"):
        return []
    return [p.strip() for p in params.split(",")]


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_CUDA_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)")
# A definition whose line starts with its return type (or `static`/`inline`); one declared static
# is not exported (_declared_static).
_C_FUNCTION = re.compile(
    r"^[ \t]*(?:static\s+)?(?:inline\s+)?(void|int|float|double|int64_t|long)\s+(\w+)\s*\(([^)]*)\)\s*\{",
    re.M)


_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)(.*)$", re.M)


def cuda_kernels(source: str) -> dict[str, str]:
    """Map each `extern "C" __global__` kernel's name to its parameter formats, kernels that a
    function-like macro defines included, once for each of its uses (expand_kernel_macros)."""
    text = expand_kernel_macros(_COMMENTS.sub(" ", source))
    extern_blocks = [m.span() for m in re.finditer(r'extern\s+"C"\s*\{', text)]
    found = {}
    for m in _CUDA_KERNEL.finditer(text):
        prefix = text[max(0, m.start() - 40):m.start()]
        in_block = any(start < m.start() for start, _ in extern_blocks)
        if 'extern "C"' not in prefix and not in_block:
            continue  # C++ linkage: mangled name, not callable from here
        found[m.group(1)] = "".join(_param_kind(p) for p in _split_params(m.group(2)))
    return found


def expand_kernel_macros(text: str) -> str:
    """`text` with continued lines joined (as the preprocessor joins them), each function-like macro
    that defines a kernel (`#define INST(NAME, VEC) extern "C" __global__ void NAME(...)`, or a name
    pasted as `attn_##HD`) taken out, and each of its uses replaced by its body with the arguments
    put in: the one way to instantiate variants of a template under C linkage. A macro's own text
    is no kernel, and its parameter names are none."""
    text = text.replace("\\\n", " ")
    macros = {m.group(1): m for m in _MACRO.finditer(text) if _CUDA_KERNEL.search(m.group(3).replace("##", ""))}
    for name, m in macros.items():
        text = text.replace(m.group(0), "")
        params = [p.strip() for p in m.group(2).split(",")]
        text = re.sub(rf"\b{re.escape(name)}\s*\(([^()]*)\)",
                      lambda use, params=params, body=m.group(3): _instance(body, params, use), text)
    return text


def _instance(body: str, params: list[str], use: re.Match) -> str:
    """A kernel macro's body at one use: each parameter replaced by its argument, `##` pasted; the use
    as written where its arguments do not match the parameters."""
    args = [a.strip() for a in use.group(1).split(",")]
    if len(args) != len(params):
        return use.group(0)
    for param, arg in zip(params, args):
        body = re.sub(rf"\b{re.escape(param)}\b", lambda _, arg=arg: arg, body)
    return re.sub(r"\s*##\s*", "", body)


def c_functions(source: str) -> dict[str, tuple[str, str]]:
    """Map each top-level non-static C function to (return type, parameter formats)."""
    text = _COMMENTS.sub(" ", source)
    found = {}
    for m in _C_FUNCTION.finditer(text):
        if _declared_static(text, m.start(2)):
            continue
        found[m.group(2)] = (m.group(1), "".join(_param_kind(p) for p in _split_params(m.group(3))))
    return found


def _declared_static(text: str, name_at: int) -> bool:
    """Whether the function whose name starts at `name_at` is declared `static`, on its line or on
    one above (`static inline __attribute__((always_inline))` above `void f(...)`): such a function
    is not exported, and binding it fails with an undefined symbol, an honest kernel refused."""
    before = text[:name_at]
    head = before[max(before.rfind(";"), before.rfind("}")) + 1:]
    lines = [line for line in head.splitlines() if not line.lstrip().startswith("#")]
    return re.search(r"\bstatic\b", "\n".join(lines)) is not None


def _address(arg, name: str, index: int, want_cuda: bool) -> int:
    if arg is None:
        return 0
    if isinstance(arg, int):
        return arg
    if hasattr(arg, "data_ptr"):
        if arg.is_cuda != want_cuda:
            where = "a CUDA" if want_cuda else "a CPU"
            raise LaunchError(f"{name}: argument {index} must be {where} tensor, got {arg.device}")
        return arg.data_ptr()
    raise LaunchError(f"{name}: argument {index} is a pointer; pass a tensor, not {type(arg).__name__}")


def pack_values(name: str, kinds: str, args: tuple, want_cuda: bool) -> list:
    if len(args) != len(kinds):
        raise LaunchError(f"{name} takes {len(kinds)} arguments, got {len(args)}")
    values = []
    for i, (kind, arg) in enumerate(zip(kinds, args)):
        if kind == "P":
            values.append(_address(arg, name, i, want_cuda))
        elif kind in "fd":
            values.append(float(arg))
        elif kind == "?":
            values.append(bool(arg))
        else:
            values.append(int(arg))
    return values
