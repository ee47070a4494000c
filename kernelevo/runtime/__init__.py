"""Compile and launch hand-written kernels from a PyTorch module.

This package is what candidate kernels import. It depends on the standard library, torch and
(for CUDA) NVIDIA's cuda-python, and on nothing else in kernelevo, so that an exported kernel
runs wherever this folder is copied beside it (its imports are relative).

    from kernelevo import runtime
    mod = runtime.load_cuda(CUDA_SRC)            # NVRTC -> cubin, cached by source hash
    mod.my_kernel(grid, block, x, out, n)        # launched on torch's current stream

    lib = runtime.load_c(C_SRC)                  # system C compiler -> shared library, cached
    lib.my_function(x, out, n)                   # tensors are passed as data pointers

Kernel and function parameters are read from the source: pointers take tensors (or raw
addresses), scalars are converted to the declared C type. Only `extern "C"` CUDA kernels and
plain C functions are callable, so that names are never mangled.
"""
from ._common import (BUILD_VARIABLE, REBUILT, CompileError, LaunchError, build_dir, c_functions, cache_dir,
                      cuda_kernels, digest, expand_kernel_macros, slug, write_atomic)
from .c import CModule, compile_c, load_c
from .cuda import CudaKernel, CudaModule, compile_cubin, load_cuda, nvrtc_version

__all__ = ["CompileError", "LaunchError", "load_cuda", "load_c", "cache_dir", "build_dir", "compile_cubin", "compile_c",
           "cuda_kernels", "c_functions", "expand_kernel_macros", "nvrtc_version", "CudaModule", "CudaKernel", "CModule",
           "digest", "slug", "write_atomic",  # the cache's helpers, which the judge's own builds share
           "BUILD_VARIABLE", "REBUILT"]  # where the judge puts a job's builds, and what it found tampered with
