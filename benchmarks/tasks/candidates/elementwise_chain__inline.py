"""One fused pass (float4 when rows allow), launched from a torch C++ host function.
Same kernels as elementwise_chain__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
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

static bool aligned16(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

torch::Tensor chain_forward(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    TORCH_CHECK(bias.numel() == x.size(-1), "bias must have x.size(-1) elements");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t n = xc.numel(), cols = xc.size(-1);
    if (n == 0) return out;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (cols % 4 == 0 && aligned16(xc) && aligned16(bc) && aligned16(out)) {
        const int64_t n4 = n / 4;
        const unsigned grid = (unsigned)((n4 + BLOCK * ITEMS - 1) / (BLOCK * ITEMS));
        chain_vec4<<<grid, BLOCK, 0, stream>>>(
            reinterpret_cast<const float4*>(xc.data_ptr<float>()), reinterpret_cast<const float4*>(bc.data_ptr<float>()),
            reinterpret_cast<float4*>(out.data_ptr<float>()), (float)scale, n4, (int)(cols / 4));
    } else {
        const unsigned grid = (unsigned)std::min<int64_t>((n + BLOCK - 1) / BLOCK, 65536);
        chain_scalar<<<grid, BLOCK, 0, stream>>>(xc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
                                                 (float)scale, n, (int)cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor chain_forward(torch::Tensor x, torch::Tensor bias, double scale);"

_ext = load_inline(name="kernelevo_elementwise_chain_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["chain_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _ext.chain_forward(x, self.bias, float(self.scale))
