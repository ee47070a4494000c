"""Direct conv (stride 1) with smem-staged input tile + weights, bias + ReLU fused; torch C++ host.
Same kernels as conv2d_relu__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#define TILE_W 32   // output columns per block: one warp spans a tile row
#define TILE_H 8    // output rows per block
#define OCB 8       // output channels per thread
#define ICB 16      // input channels staged per pass
#define THREADS (TILE_W * TILE_H)

extern "C" __global__ void __launch_bounds__(THREADS)
conv2d_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
            float* __restrict__ out, int C, int H, int W, int OC, int OH, int OW,
            int K, int pad, int tiles_w) {
    extern __shared__ float smem[];
    const int in_h = TILE_H + K - 1, in_w = TILE_W + K - 1, kk = K * K;
    float* xs = smem;                        // [ICB][in_h][in_w]
    float* ws = smem + ICB * in_h * in_w;    // [ICB * K * K][OCB]
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TILE_W + tx;
    const int oy0 = (blockIdx.x / tiles_w) * TILE_H, ox0 = (blockIdx.x % tiles_w) * TILE_W;
    const int oc0 = blockIdx.y * OCB;
    const long long n = blockIdx.z;

    float acc[OCB];
#pragma unroll
    for (int o = 0; o < OCB; ++o) acc[o] = 0.0f;

    for (int c0 = 0; c0 < C; c0 += ICB) {
        const int cn = min(ICB, C - c0);
        __syncthreads();   // the previous pass is done reading xs/ws
        for (int i = tid; i < cn * in_h * in_w; i += THREADS) {
            int ci = i / (in_h * in_w), r = (i / in_w) % in_h, c = i % in_w;
            int iy = oy0 - pad + r, ix = ox0 - pad + c;
            xs[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W)
                        ? x[((n * C + c0 + ci) * H + iy) * W + ix] : 0.0f;
        }
        for (int i = tid; i < cn * kk * OCB; i += THREADS) {
            int o = i % OCB, rest = i / OCB;  // rest = ci * K * K + ky * K + kx
            ws[i] = oc0 + o < OC ? w[((long long)(oc0 + o) * C + c0) * kk + rest] : 0.0f;
        }
        __syncthreads();
        for (int ci = 0; ci < cn; ++ci) {
            for (int ky = 0; ky < K; ++ky) {
                const float* xrow = xs + (ci * in_h + ty + ky) * in_w + tx;
                const float* wrow = ws + ((ci * K + ky) * K) * OCB;
                for (int kx = 0; kx < K; ++kx) {
                    const float v = xrow[kx];
#pragma unroll
                    for (int o = 0; o < OCB; ++o) acc[o] = fmaf(v, wrow[kx * OCB + o], acc[o]);
                }
            }
        }
    }

    const int oy = oy0 + ty, ox = ox0 + tx;
    if (oy < OH && ox < OW) {
#pragma unroll
        for (int o = 0; o < OCB; ++o) {
            if (oc0 + o < OC)
                out[((n * OC + oc0 + o) * OH + oy) * OW + ox] = fmaxf(acc[o] + __ldg(&bias[oc0 + o]), 0.0f);
        }
    }
}

torch::Tensor conv2d_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t pad) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "x must be float32 CUDA NCHW");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    const int64_t N = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3);
    const int64_t OC = wc.size(0), K = wc.size(2);
    TORCH_CHECK(wc.size(1) == C && wc.size(3) == K, "weight must be (OC, C, K, K)");
    const int64_t OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;
    auto out = torch::empty({N, OC, OH, OW}, xc.options());
    if (out.numel() == 0) return out;
    const int64_t tiles_w = (OW + TILE_W - 1) / TILE_W, tiles_h = (OH + TILE_H - 1) / TILE_H;
    const size_t smem = sizeof(float) * (ICB * (TILE_H + K - 1) * (TILE_W + K - 1) + ICB * K * K * OCB);
    if (smem > 48 * 1024)
        C10_CUDA_CHECK(cudaFuncSetAttribute(conv2d_relu, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)(tiles_w * tiles_h), (unsigned)((OC + OCB - 1) / OCB), (unsigned)N);
    conv2d_relu<<<grid, dim3(TILE_W, TILE_H), smem, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
        (int)C, (int)H, (int)W, (int)OC, (int)OH, (int)OW, (int)K, (int)pad, (int)tiles_w);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor conv2d_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t pad);"

_ext = load_inline(name="kernelevo_conv2d_relu_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["conv2d_relu_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return _ext.conv2d_relu_forward(x, self.conv.weight, self.conv.bias, self.conv.padding[0])
