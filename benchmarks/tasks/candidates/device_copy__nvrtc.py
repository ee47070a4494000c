"""A vectorised copy: each thread moves ITEMS float4s, all loaded before any is stored."""
import re

import torch
import torch.nn as nn

from kernelevo import runtime

CUDA_SRC = r"""
#define BLOCK 256
#define ITEMS 4   // float4s in flight per thread

extern "C" __global__ void __launch_bounds__(BLOCK)
copy_vec4(const float4* __restrict__ x, float4* __restrict__ out, long long n4) {
    long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
    float4 v[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) v[it] = __ldcs(&x[i]);   // streamed: read once, not worth keeping in cache
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) __stcs(&out[i], v[it]);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
copy_tail(const float* __restrict__ x, float* __restrict__ out, long long start, long long n) {
    long long i = start + (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) out[i] = x[i];
}
"""

_mod = runtime.load_cuda(CUDA_SRC)
BLOCK, ITEMS = (int(re.search(rf"#define\s+{name}\s+(\d+)", CUDA_SRC).group(1)) for name in ("BLOCK", "ITEMS"))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        aligned = x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
        n4 = n // 4 if aligned else 0
        if n4:
            _mod.copy_vec4((n4 + BLOCK * ITEMS - 1) // (BLOCK * ITEMS), BLOCK, x, out, n4)
        if n - 4 * n4:
            _mod.copy_tail((n - 4 * n4 + BLOCK - 1) // BLOCK, BLOCK, x, out, 4 * n4, n)
        return out
