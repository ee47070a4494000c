"""The vectorised copy of device_copy__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#define BLOCK 256
#define ITEMS 4   // float4s in flight per thread

__global__ void __launch_bounds__(BLOCK)
copy_vec4(const float4* __restrict__ x, float4* __restrict__ out, long long n4) {
    long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
    float4 v[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) v[it] = __ldcs(&x[i]);
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        long long i = first + (long long)it * BLOCK;
        if (i < n4) __stcs(&out[i], v[it]);
    }
}

__global__ void __launch_bounds__(BLOCK)
copy_tail(const float* __restrict__ x, float* __restrict__ out, long long start, long long n) {
    long long i = start + (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) out[i] = x[i];
}

torch::Tensor copy_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const long long n = xc.numel();
    auto stream = at::cuda::getCurrentCUDAStream();
    const bool aligned = reinterpret_cast<uintptr_t>(xc.data_ptr()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
    const long long n4 = aligned ? n / 4 : 0;
    if (n4 > 0)
        copy_vec4<<<(unsigned)((n4 + BLOCK * ITEMS - 1) / (BLOCK * ITEMS)), BLOCK, 0, stream>>>(
            reinterpret_cast<const float4*>(xc.data_ptr<float>()), reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
    if (n - 4 * n4 > 0)
        copy_tail<<<(unsigned)((n - 4 * n4 + BLOCK - 1) / BLOCK), BLOCK, 0, stream>>>(
            xc.data_ptr<float>(), out.data_ptr<float>(), 4 * n4, n);
    return out;
}
"""

cpp_source = "torch::Tensor copy_forward(torch::Tensor x);"

_ext = load_inline(name="device_copy_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["copy_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.copy_forward(x)
