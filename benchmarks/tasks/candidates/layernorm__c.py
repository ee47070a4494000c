"""CPU: per row, two-pass mean/variance accumulated in double, then one normalizing pass."""
import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <math.h>
#include <stdint.h>

void layernorm(const float* x, const float* w, const float* b, float* out,
               int64_t rows, int64_t cols, double eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = out + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        const double mean = s / cols;
        double sq = 0.0;
        for (int64_t c = 0; c < cols; ++c) { double d = xr[c] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / sqrt(sq / cols + eps));
        const float fm = (float)mean;
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - fm) * rstd * w[c] + b[c];
    }
}
"""

_lib = runtime.load_c(C_SRC)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        _lib.layernorm(x, self.ln.weight.contiguous(), self.ln.bias.contiguous(), out, rows, cols,
                       float(self.ln.eps))
        return out
