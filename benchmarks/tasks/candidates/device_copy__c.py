"""CPU: the copy split across threads, each a memcpy of its contiguous share."""
import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <stdint.h>
#include <string.h>
#include <omp.h>

void copy_floats(const float* x, float* out, int64_t n) {
    #pragma omp parallel
    {
        int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t chunk = (n + threads - 1) / threads;
        int64_t start = t * chunk, end = start + chunk < n ? start + chunk : n;
        if (start < end) memcpy(out + start, x + start, (size_t)(end - start) * sizeof(float));
    }
}
"""

_lib = runtime.load_c(C_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _lib.copy_floats(x, out, x.numel())
        return out
