"""C functions compiled by the system compiler and called through ctypes (the CPU backend)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ._common import CompileError, LaunchError, build_dir, c_functions, digest, keep_built, kept, pack_values

_c_modules: dict[str, "CModule"] = {}
C_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-std=c11")
# The judge's bounds trial (judge/run/bounds.py) sets this in the process it starts with AddressSanitizer's
# runtime preloaded: every load of a candidate's C there is built with the checks compiled in.
SANITIZE_VARIABLE = "KERNELEVO_C_SANITIZE"
SANITIZE_FLAGS = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g")


class CFunction:
    """One C function; tensors are passed as data pointers, scalars by declared type."""

    _CTYPES = {"P": ctypes.c_void_p, "?": ctypes.c_bool, "b": ctypes.c_int8, "B": ctypes.c_uint8,
               "h": ctypes.c_int16, "H": ctypes.c_uint16, "i": ctypes.c_int32, "I": ctypes.c_uint32,
               "q": ctypes.c_int64, "Q": ctypes.c_uint64, "f": ctypes.c_float, "d": ctypes.c_double}
    _RESTYPES = {"void": None, "int": ctypes.c_int, "float": ctypes.c_float,
                 "double": ctypes.c_double, "int64_t": ctypes.c_int64, "long": ctypes.c_long}

    def __init__(self, library: ctypes.CDLL, name: str, restype: str, kinds: str):
        self.name, self.kinds = name, kinds
        self._fn = getattr(library, name)
        self._fn.argtypes = [self._CTYPES[k] for k in kinds]
        self._fn.restype = self._RESTYPES[restype]

    def __call__(self, *args):
        return self._fn(*pack_values(self.name, self.kinds, args, want_cuda=False))


class CModule:
    """A compiled C source; its top-level non-static functions are attributes."""

    def __init__(self, source: str, options: tuple[str, ...] = ()):
        self.source, self.options = source, tuple(options)
        signatures = c_functions(source)
        if not signatures:
            raise LaunchError("no top-level C function found in the source")
        self.path, self.log = compile_c(source, options)
        library = ctypes.CDLL(str(self.path))
        self.functions = {n: CFunction(library, n, r, k) for n, (r, k) in signatures.items()}

    def __getattr__(self, name: str) -> CFunction:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"no C function named {name!r}; found {sorted(functions)}")


def _c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise CompileError("cc", "no C compiler found: install gcc or set CC")
    return cc


def compiler_command() -> str:
    """How candidates are built: "cc -O3 ... -lm (cc (Debian 12.2.0-14) 12.2.0)"; "" without a compiler."""
    try:
        cc = _c_compiler()
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10)
    except (CompileError, OSError, subprocess.SubprocessError):
        return ""
    version = out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    command = " ".join([Path(cc).name, *C_FLAGS, "-lm"])
    return f"{command} ({version})" if version else command


def compile_c(source: str, options: tuple[str, ...] = ()) -> tuple[Path, str]:
    """Compile C source to a shared library in the build folder (build_dir); return (path, compiler log)."""
    cc = _c_compiler()
    flags = (*C_FLAGS, *options, *(SANITIZE_FLAGS if os.environ.get(SANITIZE_VARIABLE) == "address" else ()))
    key = digest(source, cc, " ".join(flags))
    path = build_dir() / "c" / f"{key}.so"
    if kept(path, key):
        return path, ""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        src = Path(tmp) / "candidate.c"
        src.write_text(source)
        out = Path(tmp) / "candidate.so"
        # Relative paths and the C locale keep the log short and its quotes plain ASCII.
        proc = subprocess.run([cc, *flags, src.name, "-o", out.name, "-lm"], cwd=tmp,
                              capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
        if proc.returncode != 0:
            raise CompileError(Path(cc).name, (proc.stderr or proc.stdout).strip())
        os.replace(out, path)
    keep_built(path, key)
    return path, proc.stderr.strip()


def load_c(source: str, options: tuple[str, ...] = ()) -> CModule:
    """Compile C source with the system compiler (cached by source hash) and return its functions."""
    key = digest(source, " ".join(options))
    module = _c_modules.get(key)
    if module is None:
        module = _c_modules[key] = CModule(source, tuple(options))
    return module
