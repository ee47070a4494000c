"""CPU: per row, max, then exp written to out while the sum is kept in double, then scale."""
import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <math.h>
#include <stdint.h>

void softmax_rows(const float* x, float* out, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = out + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = expf(xr[c] - m);
            s += yr[c];
        }
        const float inv = (float)(1.0 / s);
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
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
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        _lib.softmax_rows(x, out, rows, cols)
        return out
