"""CUDA kernels compiled by NVRTC and launched on torch's current stream."""
from __future__ import annotations

import ctypes
import os
import struct
import threading

from ._common import (CompileError, LaunchError, build_dir, cuda_kernels, digest, keep_built, kept, pack_values,
                      write_atomic)

_nvrtc_lock = threading.Lock()
_cuda_modules: dict[str, "CudaModule"] = {}


def _cuda_include_dirs() -> list[str]:
    dirs = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cudart")
        if found:
            dirs.append(found)
    except Exception:  # older cuda-python, or headers not installed as a wheel
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(os.path.join(os.environ[env], "include"))
    dirs.append("/usr/local/cuda/include")
    return [d for d in dict.fromkeys(dirs) if os.path.isfile(os.path.join(d, "cuda_fp16.h"))]


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise LaunchError(f"{what} failed: {err!r}")
    return rest[0] if len(rest) == 1 else rest


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


# NVRTC has no <cstdint>; kernels written for nvcc use these names. C++ allows repeating a
# typedef of the same type, so a source that declares them itself still compiles.
# NVRTC has no C library headers: what kernels reach for from <stdint.h>, <math.h> and <float.h> is
# given before the source (the prompts say so), each only where the source's own includes leave it out.
_CONSTANTS = {"INFINITY": "__int_as_float(0x7f800000)", "NAN": "__int_as_float(0x7fffffff)",
              "FLT_MAX": "3.402823466e+38F", "FLT_MIN": "1.175494351e-38F", "FLT_EPSILON": "1.192092896e-07F",
              "DBL_MAX": "1.7976931348623158e+308", "DBL_MIN": "2.2250738585072014e-308",
              "M_PI": "3.14159265358979323846", "M_PI_2": "1.57079632679489661923", "M_E": "2.7182818284590452354",
              "M_LN2": "0.69314718055994530942", "M_LOG2E": "1.4426950408889634074", "M_SQRT2": "1.41421356237309504880",
              "M_SQRT1_2": "0.70710678118654752440", "M_2_SQRTPI": "1.12837916709551257390"}
_PRELUDE = ("typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t;\n"
            "typedef unsigned short uint16_t; typedef int int32_t; typedef unsigned int uint32_t;\n"
            "typedef long long int64_t; typedef unsigned long long uint64_t;\n"
            + "".join(f"#ifndef {name}\n#define {name} {value}\n#endif\n" for name, value in _CONSTANTS.items())
            + '#line 1 "candidate.cu"\n')


def compile_cubin(source: str, arch: str, options: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """Compile CUDA source to a cubin for `arch` (e.g. 'sm_90'); return (cubin, compiler log).

    Needs no GPU, so CI can check that CUDA sources compile.
    """
    from cuda.bindings import nvrtc
    opts = [f"--gpu-architecture={arch}", "--std=c++17", "-lineinfo",
            "--ptxas-options=-v", *[f"--include-path={d}" for d in _cuda_include_dirs()],
            *options]
    prog = _check(nvrtc.nvrtcCreateProgram((_PRELUDE + source).encode(), b"candidate.cu", 0, [], []),
                  "nvrtcCreateProgram")
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.rstrip(b"\0 ").decode(errors="replace")
        if int(err) != 0:
            raise CompileError("nvrtc", log_text)
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin, log_text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_api: tuple | None = None


def _cuda_api():
    """(torch, cuda.bindings.driver), imported once: this module must import without them."""
    global _api
    if _api is None:
        import torch
        from cuda.bindings import driver
        _api = (torch, driver)
    return _api


def _raw_stream(device: int) -> int:
    torch = _cuda_api()[0]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object per launch
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


def _dim3(value) -> tuple[int, int, int]:
    if isinstance(value, int):
        return value, 1, 1
    value = tuple(int(v) for v in value)
    return value + (1,) * (3 - len(value))


def _slot_format(kinds: str) -> str:
    """A struct format putting each value at the start of its own 8-byte slot."""
    parts = []
    for kind in kinds:
        code = "Q" if kind == "P" else kind
        pad = 8 - struct.calcsize("=" + code)
        parts.append(code + (f"{pad}x" if pad else ""))
    return "=" + "".join(parts)


class CudaKernel:
    """One `extern "C" __global__` function; call it as kernel(grid, block, *args, shared_mem=0)."""

    def __init__(self, module: "CudaModule", name: str, kinds: str):
        self.module, self.name, self.kinds = module, name, kinds
        self._functions: dict[int, object] = {}
        # One argument buffer per kernel: values are packed into 8-byte slots and the driver
        # copies them at launch, so reusing the buffer after cuLaunchKernel returns is safe.
        self._fmt = _slot_format(kinds)
        self._values = ctypes.create_string_buffer(max(8, 8 * len(kinds)))
        base = ctypes.addressof(self._values)
        self._pointers = (ctypes.c_void_p * max(1, len(kinds)))(*[base + 8 * i for i in range(len(kinds))])
        self._address = ctypes.addressof(self._pointers)
        self._lock = threading.Lock()

    def _function(self, device: int):
        fn = self._functions.get(device)
        if fn is None:
            fn = self.module._function(device, self.name)
            self._functions[device] = fn
        return fn

    def __call__(self, grid, block, *args, shared_mem: int = 0, stream=None) -> None:
        # The hot path of every candidate: no imports, no Stream objects, one struct call.
        torch, driver = _cuda_api()
        device = torch.cuda.current_device()
        fn = self._functions.get(device) or self._function(device)
        if stream is None:
            handle = _raw_stream(device)
        else:
            handle = stream if isinstance(stream, int) else stream.cuda_stream
        gx, gy, gz = _dim3(grid)
        bx, by, bz = _dim3(block)
        values = pack_values(self.name, self.kinds, args, want_cuda=True)
        with self._lock:
            struct.pack_into(self._fmt, self._values, 0, *values)
            err, = driver.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_mem, handle, self._address, 0)
        if int(err):
            raise LaunchError(f"launching {self.name} grid={_dim3(grid)} block={_dim3(block)}: {err!r}")

    def set_max_shared_memory(self, nbytes: int) -> None:
        """Allow more than 48 KiB of dynamic shared memory for this kernel."""
        import torch
        from cuda.bindings import driver
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(self._function(torch.cuda.current_device()), attr, int(nbytes)),
               "cuFuncSetAttribute")


class CudaModule:
    """A compiled CUDA source; its extern "C" kernels are attributes."""

    def __init__(self, source: str, options: tuple[str, ...] = ()):
        self.source = source
        self.options = tuple(options)
        self.kernels = {name: CudaKernel(self, name, kinds) for name, kinds in cuda_kernels(source).items()}
        if not self.kernels:
            raise LaunchError('no extern "C" __global__ kernel found in the CUDA source')
        self.log = ""
        self._cubins: dict[str, bytes] = {}
        self._modules: dict[int, object] = {}

    def __getattr__(self, name: str) -> CudaKernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"no extern \"C\" kernel named {name!r}; found {sorted(kernels)}")

    def cubin(self, arch: str) -> bytes:
        """The cubin for `arch`, from memory, the disk cache, or NVRTC."""
        if arch in self._cubins:
            return self._cubins[arch]
        key = digest(self.source, arch, " ".join(self.options), nvrtc_version())
        path = build_dir() / "nvrtc" / f"{key}.cubin"
        log_path = path.with_suffix(".log")
        if kept(path, key):
            cubin = path.read_bytes()
            self.log = log_path.read_text() if log_path.exists() else ""
        else:
            cubin, self.log = compile_cubin(self.source, arch, self.options)
            write_atomic(path, cubin)
            write_atomic(log_path, self.log.encode())
            keep_built(path, key)
        self._cubins[arch] = cubin
        return cubin

    def _function(self, device: int, name: str):
        import torch
        from cuda.bindings import driver
        with _nvrtc_lock:
            module = self._modules.get(device)
            if module is None:
                major, minor = torch.cuda.get_device_capability(device)
                cubin = self.cubin(f"sm_{major}{minor}")
                _ensure_context(device)
                module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
                self._modules[device] = module
        found = driver.cuModuleGetFunction(module, name.encode())
        if int(found[0]) == int(driver.CUresult.CUDA_ERROR_NOT_FOUND):
            raise AbsentKernel(f"kernel {name} was not compiled: the source defines it, but the preprocessor left it "
                               f"out (an #if or #ifdef around it), so it cannot be launched; compiled: "
                               f"{', '.join(self.compiled(device)) or 'none'}")
        return _check(found, f"cuModuleGetFunction({name})")

    def compiled(self, device: int) -> list[str]:
        """The kernels the loaded module holds (those the preprocessor kept), by name."""
        from cuda.bindings import driver
        module = self._modules[device]
        return [n for n in self.kernels if int(driver.cuModuleGetFunction(module, n.encode())[0]) == 0]

    def build(self, device: int | None = None) -> "CudaModule":
        """Compile (and load, when a GPU is present) now rather than at the first launch. A kernel the
        preprocessor left out is no error until it is launched."""
        import torch
        if torch.cuda.is_available():
            device = torch.cuda.current_device() if device is None else device
            for name in self.kernels:
                try:
                    self.kernels[name]._function(device)
                except AbsentKernel:
                    continue
        return self


class AbsentKernel(LaunchError):
    """A kernel its source text defines that the compiled module does not hold (left out by the preprocessor)."""


def _ensure_context(device: int) -> None:
    # torch makes the primary context current lazily; the driver API needs it current now.
    import torch
    from cuda.bindings import driver
    torch.cuda.init()
    with torch.cuda.device(device):
        torch.empty(1, device=f"cuda:{device}")
        ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if not int(ctx):
            dev = _check(driver.cuDeviceGet(device), "cuDeviceGet")
            ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def load_cuda(source: str, options: tuple[str, ...] = (), build: bool = True) -> CudaModule:
    """Compile CUDA source with NVRTC (cached by source hash) and return its kernels.

    With `build` (the default) the source is compiled and loaded at once when a GPU is present,
    so compile errors surface at construction rather than in the first forward.
    """
    key = digest(source, " ".join(options))
    module = _cuda_modules.get(key)
    if module is None:
        module = CudaModule(source, tuple(options))
        _cuda_modules[key] = module
    return module.build() if build else module
