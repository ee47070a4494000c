"""LayerNorm: one block per row, row kept in registers when it fits; torch C++ host function.
Same kernels as layernorm__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
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

static bool aligned16(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1), rows = cols ? xc.numel() / cols : 0;
    TORCH_CHECK(wc.numel() == cols && bc.numel() == cols, "weight/bias must have x.size(-1) elements");
    if (rows == 0) return out;
    auto stream = at::cuda::getCurrentCUDAStream();
    const bool vec = cols % 4 == 0 && cols <= BLOCK * ITEMS * 4 && aligned16(xc) && aligned16(wc) &&
                     aligned16(bc) && aligned16(out);
    if (vec)
        layernorm_vec<<<(unsigned)rows, BLOCK, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
            bc.data_ptr<float>(), out.data_ptr<float>(), (int)cols, (float)eps);
    else
        layernorm_generic<<<(unsigned)rows, BLOCK, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
            bc.data_ptr<float>(), out.data_ptr<float>(), (int)cols, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"

_ext = load_inline(name="kernelevo_layernorm_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["layernorm_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return _ext.layernorm_forward(x, self.ln.weight, self.ln.bias, float(self.ln.eps))
