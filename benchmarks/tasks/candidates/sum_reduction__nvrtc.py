"""Sum over one dim of x viewed as (outer, N, inner). Warps run along the contiguous inner
dim (coalesced); N is split over SPLIT blocks so small outputs still fill the GPU, and a
second tiny kernel adds the SPLIT partial sums in a fixed order (deterministic, no atomics)."""
import math
import re

import torch
import torch.nn as nn

from kernelevo import runtime

CUDA_SRC = r"""
#define COLS 32    // threads along the contiguous inner dim: one warp reads 128 bytes
#define ROWS 8     // threads along the reduced dim inside a block
#define SPLIT 16   // blocks along the reduced dim for each output column

extern "C" __global__ void __launch_bounds__(COLS * ROWS)
sum_partial(const float* __restrict__ x, float* __restrict__ partial, int N, int inner, int chunk) {
    __shared__ float sh[ROWS][COLS + 1];
    const int col = blockIdx.x * COLS + threadIdx.x;
    const int split = blockIdx.y;
    const long long o = blockIdx.z;
    const int n_end = min(N, (split + 1) * chunk);
    float acc = 0.0f;
    if (col < inner) {
        const float* p = x + o * N * inner + col;
#pragma unroll 4
        for (int n = split * chunk + threadIdx.y; n < n_end; n += ROWS) acc += p[(long long)n * inner];
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
        float t = 0.0f;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) t += sh[r][threadIdx.x];
        partial[(o * SPLIT + split) * inner + col] = t;
    }
}

extern "C" __global__ void __launch_bounds__(256)
sum_finish(const float* __restrict__ partial, float* __restrict__ out, int inner, long long total) {
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= total) return;
    const long long o = i / inner;
    const int col = (int)(i - o * inner);
    float t = 0.0f;
#pragma unroll
    for (int s = 0; s < SPLIT; ++s) t += partial[(o * SPLIT + s) * inner + col];
    out[i] = t;
}
"""

_mod = runtime.load_cuda(CUDA_SRC)


def _define(name):
    return int(re.search(rf"#define\s+{name}\s+(\d+)", CUDA_SRC).group(1))


COLS, ROWS, SPLIT = _define("COLS"), _define("ROWS"), _define("SPLIT")


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer, N, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
        out_shape = (*x.shape[:dim], 1, *x.shape[dim + 1:])
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        total = outer * inner
        if total == 0:
            return out
        assert outer <= 65535, "grid.z holds the outer dim"
        partial = torch.empty(outer * SPLIT * inner, dtype=x.dtype, device=x.device)
        chunk = (N + SPLIT - 1) // SPLIT
        grid = ((inner + COLS - 1) // COLS, SPLIT, outer)
        _mod.sum_partial(grid, (COLS, ROWS), x, partial, N, inner, chunk)
        _mod.sum_finish((total + 255) // 256, 256, partial, out, inner, total)
        return out
