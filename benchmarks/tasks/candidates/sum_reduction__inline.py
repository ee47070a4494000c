"""Sum over one dim as (outer, N, inner): split partial sums, then a fixed-order finish; torch C++ host.
Same kernels as sum_reduction__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
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

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    dim = ((dim % xc.dim()) + xc.dim()) % xc.dim();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    const int64_t N = xc.size(dim);
    auto shape = xc.sizes().vec();
    shape[dim] = 1;
    auto out = torch::empty(shape, xc.options());
    const int64_t total = outer * inner;
    if (total == 0) return out;
    TORCH_CHECK(outer <= 65535, "grid.z holds the outer dim");
    auto partial = torch::empty({outer * SPLIT * inner}, xc.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    const int chunk = (int)((N + SPLIT - 1) / SPLIT);
    dim3 grid((unsigned)((inner + COLS - 1) / COLS), SPLIT, (unsigned)outer);
    sum_partial<<<grid, dim3(COLS, ROWS), 0, stream>>>(xc.data_ptr<float>(), partial.data_ptr<float>(),
                                                       (int)N, (int)inner, chunk);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sum_finish<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(partial.data_ptr<float>(), out.data_ptr<float>(),
                                                                   (int)inner, (long long)total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim);"

_ext = load_inline(name="kernelevo_sum_reduction_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["sum_dim_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_dim_forward(x, self.dim)
