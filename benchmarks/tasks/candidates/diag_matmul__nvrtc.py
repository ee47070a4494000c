"""diag(a) @ b is b with row i scaled by a[i]: one streaming pass, float4 when rows allow."""
import re

import torch
import torch.nn as nn

from kernelevo import runtime

CUDA_SRC = r"""
#define BLOCK 256
#define ITEMS 4   // float4s per thread, all loaded before any is stored: more bytes in flight

extern "C" __global__ void __launch_bounds__(BLOCK)
scale_rows_vec4(const float* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ out,
                long long n4, int cols4) {
    const long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
    float4 v[ITEMS];
    float s[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) {
            v[it] = b[i];
            s[it] = __ldg(&a[i / cols4]);
        }
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) out[i] = make_float4(v[it].x * s[it], v[it].y * s[it], v[it].z * s[it], v[it].w * s[it]);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
scale_rows(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
           long long n, int cols) {
    const long long stride = (long long)gridDim.x * BLOCK;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride)
        out[i] = b[i] * __ldg(&a[i / cols]);
}
"""

_mod = runtime.load_cuda(CUDA_SRC)


def _define(name):
    return int(re.search(rf"#define\s+{name}\s+(\d+)", CUDA_SRC).group(1))


BLOCK, ITEMS = _define("BLOCK"), _define("ITEMS")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        assert a.dim() == 1 and b.dim() == 2 and b.shape[0] == a.shape[0]
        out = torch.empty_like(b)
        n, cols = b.numel(), b.shape[1]
        if n == 0:
            return out
        if cols % 4 == 0 and b.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0:
            n4 = n // 4
            grid = (n4 + BLOCK * ITEMS - 1) // (BLOCK * ITEMS)
            _mod.scale_rows_vec4(grid, BLOCK, a, b, out, n4, cols // 4)
        else:
            grid = min((n + BLOCK - 1) // BLOCK, 65536)
            _mod.scale_rows(grid, BLOCK, a, b, out, n, cols)
        return out
