"""CPU: one fused pass over rows, threads split the rows, the column loop vectorizes."""
import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <math.h>
#include <stdint.h>

void chain(const float* x, const float* bias, float* out, float scale, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = out + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
            float y = fmaxf(xr[c] * scale + bias[c], 0.0f);
            yr[c] = tanhf(y) / (1.0f + expf(-y));
        }
    }
}
"""

_lib = runtime.load_c(C_SRC)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        _lib.chain(x, self.bias.contiguous(), out, float(self.scale), rows, cols)
        return out
