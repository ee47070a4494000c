"""diag(a) @ b as a row-scaling stream (float4 when rows allow); torch C++ host function.
Same kernels as diag_matmul__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
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

torch::Tensor scale_rows_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(b.is_cuda() && b.scalar_type() == torch::kFloat32, "b must be a float32 CUDA tensor");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0), "a (N,), b (N, M)");
    const at::cuda::CUDAGuard guard(b.device());
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(bc);
    const int64_t n = bc.numel(), cols = bc.size(1);
    if (n == 0) return out;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (cols % 4 == 0 && reinterpret_cast<uintptr_t>(bc.data_ptr()) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0) {
        const int64_t n4 = n / 4;
        const unsigned grid = (unsigned)((n4 + BLOCK * ITEMS - 1) / (BLOCK * ITEMS));
        scale_rows_vec4<<<grid, BLOCK, 0, stream>>>(ac.data_ptr<float>(),
            reinterpret_cast<const float4*>(bc.data_ptr<float>()), reinterpret_cast<float4*>(out.data_ptr<float>()),
            n4, (int)(cols / 4));
    } else {
        const unsigned grid = (unsigned)std::min<int64_t>((n + BLOCK - 1) / BLOCK, 65536);
        scale_rows<<<grid, BLOCK, 0, stream>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
                                               n, (int)cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor scale_rows_forward(torch::Tensor a, torch::Tensor b);"

_ext = load_inline(name="kernelevo_diag_matmul_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["scale_rows_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return _ext.scale_rows_forward(a, b)
