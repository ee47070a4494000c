"""One block per row; rows that fit are kept in registers so x is read from DRAM once."""
import re

import torch
import torch.nn as nn

from kernelevo import runtime

CUDA_SRC = r"""
#define BLOCK 256
#define ITEMS 4   // float4s per thread held in registers: rows up to BLOCK*ITEMS*4 floats

// Sum over the block, returned to every thread. The leading barrier lets sh be reused.
__device__ __forceinline__ float block_sum(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < BLOCK / 32 ? sh[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_vec(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
              float* __restrict__ out, int cols, float eps) {
    __shared__ float sh[32];
    const long long row = blockIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x + row * cols);
    float4* y4 = reinterpret_cast<float4*>(out + row * cols);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    const int n4 = cols / 4;

    float4 v[ITEMS];
    float sum = 0.0f;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        int i = threadIdx.x + it * BLOCK;
        v[it] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        sum += (v[it].x + v[it].y) + (v[it].z + v[it].w);
    }
    const float mean = block_sum(sum, sh) / cols;

    // Two-pass variance: no cancellation when |mean| >> std.
    float sq = 0.0f;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        if (threadIdx.x + it * BLOCK < n4) {
            float dx = v[it].x - mean, dy = v[it].y - mean, dz = v[it].z - mean, dw = v[it].w - mean;
            sq += (dx * dx + dy * dy) + (dz * dz + dw * dw);
        }
    }
    const float rstd = rsqrtf(block_sum(sq, sh) / cols + eps);

#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        int i = threadIdx.x + it * BLOCK;
        if (i < n4) {
            float4 g = __ldg(&w4[i]), h = __ldg(&b4[i]);
            y4[i] = make_float4((v[it].x - mean) * rstd * g.x + h.x, (v[it].y - mean) * rstd * g.y + h.y,
                                (v[it].z - mean) * rstd * g.z + h.z, (v[it].w - mean) * rstd * g.w + h.w);
        }
    }
}

// Any row length: three passes over the row, the last two mostly from cache.
extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_generic(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                  float* __restrict__ out, int cols, float eps) {
    __shared__ float sh[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = out + (long long)blockIdx.x * cols;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < cols; i += BLOCK) sum += xr[i];
    const float mean = block_sum(sum, sh) / cols;
    float sq = 0.0f;
    for (int i = threadIdx.x; i < cols; i += BLOCK) { float d = xr[i] - mean; sq += d * d; }
    const float rstd = rsqrtf(block_sum(sq, sh) / cols + eps);
    for (int i = threadIdx.x; i < cols; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}
"""

_mod = runtime.load_cuda(CUDA_SRC)


def _define(name):
    return int(re.search(rf"#define\s+{name}\s+(\d+)", CUDA_SRC).group(1))


BLOCK, ITEMS = _define("BLOCK"), _define("ITEMS")


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        x = x.contiguous()
        w, b = self.ln.weight.contiguous(), self.ln.bias.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return out
        aligned = all(t.data_ptr() % 16 == 0 for t in (x, w, b, out))
        if cols % 4 == 0 and cols <= BLOCK * ITEMS * 4 and aligned:
            _mod.layernorm_vec(rows, BLOCK, x, w, b, out, cols, float(self.ln.eps))
        else:
            _mod.layernorm_generic(rows, BLOCK, x, w, b, out, cols, float(self.ln.eps))
        return out
