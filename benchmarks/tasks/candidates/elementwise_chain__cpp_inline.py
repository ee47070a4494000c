"""CPU C++ candidate through torch's load_inline (no CUDA): one fused pass split over rows by
at::parallel_for."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor chain_forward(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x: float32 CPU tensor");
    TORCH_CHECK(bias.scalar_type() == torch::kFloat32 && bias.numel() == x.size(-1), "bias: (features,)");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1);
    const int64_t rows = cols ? xc.numel() / cols : 0;
    const float* xp = xc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* yp = out.data_ptr<float>();
    const float s = static_cast<float>(scale);
    at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = xp + r * cols;
            float* yr = yp + r * cols;
            for (int64_t c = 0; c < cols; ++c) {
                float y = std::fmax(xr[c] * s + bp[c], 0.0f);
                yr[c] = std::tanh(y) / (1.0f + std::exp(-y));
            }
        }
    });
    return out;
}
"""

_ext = load_inline(name="kernelevo_elementwise_chain_cpp", cpp_sources=CPP_SRC,
                   functions=["chain_forward"], extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _ext.chain_forward(x, self.bias, float(self.scale))
