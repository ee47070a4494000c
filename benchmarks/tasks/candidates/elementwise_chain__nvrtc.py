"""One fused pass: each element of x is read once and written once (float4 when rows allow)."""
import re

import torch
import torch.nn as nn

from kernelevo import runtime

CUDA_SRC = r"""
#define BLOCK 256
#define ITEMS 4   // float4s per thread, all loaded before any is stored: more bytes in flight

__device__ __forceinline__ float chain(float v, float b, float scale) {
    float y = fmaxf(v * scale + b, 0.0f);
    return tanhf(y) / (1.0f + expf(-y));   // y >= 0, so expf(-y) cannot overflow
}

extern "C" __global__ void __launch_bounds__(BLOCK)
chain_vec4(const float4* __restrict__ x, const float4* __restrict__ bias, float4* __restrict__ out,
           float scale, long long n4, int cols4) {
    long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
    float4 v[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) v[it] = x[i];
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) {
            float4 b = __ldg(&bias[i % cols4]);
            float4 r;
            r.x = chain(v[it].x, b.x, scale);
            r.y = chain(v[it].y, b.y, scale);
            r.z = chain(v[it].z, b.z, scale);
            r.w = chain(v[it].w, b.w, scale);
            out[i] = r;
        }
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
chain_scalar(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
             float scale, long long n, int cols) {
    long long stride = (long long)gridDim.x * BLOCK;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride)
        out[i] = chain(x[i], __ldg(&bias[i % cols]), scale);
}
"""

_mod = runtime.load_cuda(CUDA_SRC)


def _define(name):
    return int(re.search(rf"#define\s+{name}\s+(\d+)", CUDA_SRC).group(1))


BLOCK, ITEMS = _define("BLOCK"), _define("ITEMS")


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        bias = self.bias.contiguous()
        out = torch.empty_like(x)
        n, cols = x.numel(), x.shape[-1]
        if n == 0:
            return out
        if cols % 4 == 0 and all(t.data_ptr() % 16 == 0 for t in (x, bias, out)):
            n4 = n // 4
            grid = (n4 + BLOCK * ITEMS - 1) // (BLOCK * ITEMS)
            _mod.chain_vec4(grid, BLOCK, x, bias, out, float(self.scale), n4, cols // 4)
        else:
            grid = min((n + BLOCK - 1) // BLOCK, 65536)
            _mod.chain_scalar(grid, BLOCK, x, bias, out, float(self.scale), n, cols)
        return out
