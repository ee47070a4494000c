"""Tiled SGEMM with bias + erf-GELU fused into the store; torch C++ host function.
Same kernels as gemm_bias_gelu__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#define BM 64      // output rows per block
#define BN 64      // output columns per block
#define BK 16      // K-slice staged in shared memory per step
#define TM 4       // output rows per thread
#define TN 4       // output columns per thread
#define PAD 4      // keeps rows 16-byte aligned and spreads the transposing stores over banks
#define THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(THREADS)
linear_gelu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
            float* __restrict__ out, int M, int N, int K) {
    // Tiles are stored k-major so the inner loop reads TM (TN) consecutive floats.
    __shared__ __align__(16) float As[BK][BM + PAD];
    __shared__ __align__(16) float Bs[BK][BN + PAD];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Consecutive threads read consecutive k of one row: coalesced BK-float segments.
        for (int i = tid; i < BM * BK; i += THREADS) {
            int r = i / BK, c = i % BK, m = m0 + r, k = k0 + c;
            As[c][r] = (m < M && k < K) ? x[(long long)m * K + k] : 0.0f;
        }
        for (int i = tid; i < BN * BK; i += THREADS) {
            int r = i / BK, c = i % BK, n = n0 + r, k = k0 + c;
            Bs[c][r] = (n < N && k < K) ? w[(long long)n * K + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int m = m0 + ty * TM + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int n = n0 + tx * TN + j;
            if (n < N) {
                float v = acc[i][j] + __ldg(&bias[n]);
                out[(long long)m * N + n] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
            }
        }
    }
}

torch::Tensor linear_gelu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    const at::cuda::CUDAGuard guard(x.device());
    const int64_t K = x.size(-1), N = w.size(0);
    TORCH_CHECK(w.size(1) == K && b.numel() == N, "weight must be (N, K) and bias (N,)");
    auto x2 = x.contiguous().reshape({-1, K});
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    const int64_t M = x2.size(0);
    auto out = torch::empty({M, N}, x2.options());
    if (M > 0 && N > 0) {
        dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
        linear_gelu<<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
            x2.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
            (int)M, (int)N, (int)K);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    auto shape = x.sizes().vec();
    shape.back() = N;
    return out.reshape(shape);
}
"""

cpp_source = "torch::Tensor linear_gelu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

_ext = load_inline(name="kernelevo_gemm_bias_gelu_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["linear_gelu_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.linear_gelu_forward(x, self.linear.weight, self.linear.bias)
