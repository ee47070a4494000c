"""CPU: x viewed as (outer, N, inner); rows of the reduced dim are added into a double
accumulator row, so the inner loop is contiguous and vectorizes."""
import math

import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <stdint.h>
#include <stdlib.h>

void sum_dim(const float* x, float* out, int64_t outer, int64_t N, int64_t inner) {
    #pragma omp parallel
    {
        double* acc = (double*)malloc((size_t)inner * sizeof(double));
        #pragma omp for schedule(static)
        for (int64_t o = 0; o < outer; ++o) {
            for (int64_t i = 0; i < inner; ++i) acc[i] = 0.0;
            const float* xo = x + o * N * inner;
            for (int64_t n = 0; n < N; ++n)
                for (int64_t i = 0; i < inner; ++i) acc[i] += xo[n * inner + i];
            for (int64_t i = 0; i < inner; ++i) out[o * inner + i] = (float)acc[i];
        }
        free(acc);
    }
}
"""

_lib = runtime.load_c(C_SRC)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer, N, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
        out = torch.empty((*x.shape[:dim], 1, *x.shape[dim + 1:]), dtype=x.dtype, device=x.device)
        if out.numel():
            _lib.sum_dim(x, out, outer, N, inner)
        return out
