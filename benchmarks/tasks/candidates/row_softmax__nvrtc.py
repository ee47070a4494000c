"""One block per row: an online max/sum pass, then a write pass (the row is hot in L1/L2)."""
import re

import torch
import torch.nn as nn

from kernelevo import runtime

CUDA_SRC = r"""
#define BLOCK 256
#define NEG_INF __int_as_float(0xff800000)

// Merge two (max, sum of exp(x - max)) pairs.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == NEG_INF) return;   // both still empty: exp(-inf - -inf) would be NaN
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_rows(const float* __restrict__ x, float* __restrict__ out, int cols, int vec) {
    __shared__ float sh_m[32], sh_s[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = out + (long long)blockIdx.x * cols;

    float m = NEG_INF, s = 0.0f;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = threadIdx.x; i < cols / 4; i += BLOCK) {
            float4 v = x4[i];
            float mn = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
            if (mn != NEG_INF) {
                s = s * expf(m - mn) + expf(v.x - mn) + expf(v.y - mn) + expf(v.z - mn) + expf(v.w - mn);
                m = mn;
            }
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += BLOCK) {
            float v = xr[i];
            float mn = fmaxf(m, v);
            if (mn != NEG_INF) {
                s = s * expf(m - mn) + expf(v - mn);
                m = mn;
            }
        }
    }

#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
    __syncthreads();
    // Every warp merges the per-warp results itself, so no second barrier is needed.
    m = lane < BLOCK / 32 ? sh_m[lane] : NEG_INF;
    s = lane < BLOCK / 32 ? sh_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const float inv = 1.0f / s;

    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = threadIdx.x; i < cols / 4; i += BLOCK) {
            float4 v = x4[i];
            y4[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv,
                                expf(v.z - m) * inv, expf(v.w - m) * inv);
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += BLOCK)
            yr[i] = expf(xr[i] - m) * inv;
    }
}
"""

_mod = runtime.load_cuda(CUDA_SRC)
BLOCK = int(re.search(r"#define\s+BLOCK\s+(\d+)", CUDA_SRC).group(1))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return out
        vec = int(cols % 4 == 0 and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0)
        _mod.softmax_rows(rows, BLOCK, x, out, cols, vec)
        return out
