"""CPU: diag(a) @ b scales row i of b by a[i]."""
import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <stdint.h>

void scale_rows(const float* a, const float* b, float* out, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float s = a[r];
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = s * b[r * cols + c];
    }
}
"""

_lib = runtime.load_c(C_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(b)
        _lib.scale_rows(a, b, out, b.shape[0], b.shape[1])
        return out
