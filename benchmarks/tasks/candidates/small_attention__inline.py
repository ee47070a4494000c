"""Flash-style fused fp32 attention (online softmax over smem K/V tiles); torch C++ host function.
Same kernels as small_attention__nvrtc.py, built with torch's load_inline (KernelBench style)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

HEAD_DIM = 64  # as the kernel's own #define

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#define HEAD_DIM 64   // the lane mapping below assumes TPQ * NC * 4 == HEAD_DIM
#define TPQ 4         // threads per query row
#define NC (HEAD_DIM / 4 / TPQ)   // float4 chunks of the row per thread
#define BQ 32         // query rows per block
#define BKV 64        // keys per shared-memory tile
#define THREADS (BQ * TPQ)
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void __launch_bounds__(THREADS)
attention_fwd(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              float* __restrict__ out, int S, float scale) {
    __shared__ float4 Ks[BKV][HEAD_DIM / 4];
    __shared__ float4 Vs[BKV][HEAD_DIM / 4];
    const int tid = threadIdx.x, qi = tid / TPQ, sub = tid % TPQ;
    const int row = blockIdx.x * BQ + qi;
    const long long base4 = (long long)blockIdx.y * S * (HEAD_DIM / 4);   // in float4s
    const float4* q4 = reinterpret_cast<const float4*>(q) + base4;
    const float4* k4 = reinterpret_cast<const float4*>(k) + base4;
    const float4* v4 = reinterpret_cast<const float4*>(v) + base4;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    // Chunk c of this thread is float4 c*TPQ + sub: the TPQ lanes of a row read adjacent
    // float4s of a K/V row, so shared-memory reads are conflict-free broadcasts.
    float4 qv[NC], ov[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        float4 t = row < S ? q4[(long long)row * (HEAD_DIM / 4) + c * TPQ + sub] : zero;
        qv[c] = make_float4(t.x * scale, t.y * scale, t.z * scale, t.w * scale);
        ov[c] = zero;
    }
    float m = NEG_INF, l = 0.0f;

    for (int kt = 0; kt < S; kt += BKV) {
        __syncthreads();   // the previous tile is no longer read
        for (int i = tid; i < BKV * (HEAD_DIM / 4); i += THREADS) {
            int r = i / (HEAD_DIM / 4), c = i % (HEAD_DIM / 4);
            bool ok = kt + r < S;
            long long g = (long long)(kt + r) * (HEAD_DIM / 4) + c;
            Ks[r][c] = ok ? k4[g] : zero;
            Vs[r][c] = ok ? v4[g] : zero;
        }
        __syncthreads();

        float s[BKV];
        float mt = NEG_INF;
#pragma unroll
        for (int j = 0; j < BKV; ++j) {
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                float4 kv = Ks[j][c * TPQ + sub];
                d += qv[c].x * kv.x + qv[c].y * kv.y + qv[c].z * kv.z + qv[c].w * kv.w;
            }
#pragma unroll
            for (int o = TPQ / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            s[j] = kt + j < S ? d : NEG_INF;
            mt = fmaxf(mt, s[j]);
        }
        // Key kt is always in range, so mt and mn are finite.
        const float mn = fmaxf(m, mt);
        const float alpha = expf(m - mn);   // 0 on the first tile (m = -inf)
        l *= alpha;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            ov[c].x *= alpha; ov[c].y *= alpha; ov[c].z *= alpha; ov[c].w *= alpha;
        }
#pragma unroll
        for (int j = 0; j < BKV; ++j) {
            const float p = expf(s[j] - mn);
            l += p;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                float4 vv = Vs[j][c * TPQ + sub];
                ov[c].x += p * vv.x; ov[c].y += p * vv.y; ov[c].z += p * vv.z; ov[c].w += p * vv.w;
            }
        }
        m = mn;
    }

    if (row < S) {
        const float inv = 1.0f / l;
        float4* o4 = reinterpret_cast<float4*>(out) + base4 + (long long)row * (HEAD_DIM / 4);
#pragma unroll
        for (int c = 0; c < NC; ++c)
            o4[c * TPQ + sub] = make_float4(ov[c].x * inv, ov[c].y * inv, ov[c].z * inv, ov[c].w * inv);
    }
}

torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
    TORCH_CHECK(q.is_cuda() && q.scalar_type() == torch::kFloat32, "q must be a float32 CUDA tensor");
    TORCH_CHECK(q.sizes() == k.sizes() && q.sizes() == v.sizes(), "q, k, v must have one shape");
    const at::cuda::CUDAGuard guard(q.device());
    auto qc = q.contiguous();
    auto kc = k.contiguous();
    auto vc = v.contiguous();
    const int64_t S = qc.size(-2), D = qc.size(-1);
    TORCH_CHECK(D == HEAD_DIM, "kernel is built for head_dim ", HEAD_DIM);
    auto out = torch::empty_like(qc);
    for (const auto& t : {qc, kc, vc, out})
        TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "float4 loads need 16-byte alignment");
    const int64_t heads = S ? qc.numel() / (S * D) : 0;
    if (heads == 0) return out;
    dim3 grid((unsigned)((S + BQ - 1) / BQ), (unsigned)heads);
    attention_fwd<<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(), out.data_ptr<float>(),
        (int)S, (float)(1.0 / std::sqrt((double)D)));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v);"

_ext = load_inline(name="kernelevo_small_attention_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["attention_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        # Refused here, not by the extension's TORCH_CHECK: an exception thrown from nvcc-built code
        # killed the process with SIGSEGV (H100 host, torch 2.11 + CUDA 13) instead of reaching Python.
        if q.shape[-1] != HEAD_DIM:
            raise ValueError(f"this kernel is built for head_dim {HEAD_DIM}, got {q.shape[-1]}")
        return _ext.attention_forward(q, k, v)
