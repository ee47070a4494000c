"""Rows in the external formats kernelevo imports, written by the tests: Sakana AI's AI CUDA Engineer
Archive (its column names; a functional model plus a pybind11 extension) and CUDA-L1's collection.
The kernels are kernelevo's own, small and honest, so a GPU can judge them."""
import json
from pathlib import Path

# A task's sizes and inputs; the functional rewrite of each task repeats them, as the archive's rows do.
RELU_TAIL = '''

batch_size = 64
dim = 65536


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

RELU_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU of a batch of rows."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
''' + RELU_TAIL

RELU_FUNCTIONAL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x)


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor, fn=module_fn) -> torch.Tensor:
        return fn(x)
''' + RELU_TAIL

RELU_CUDA = r'''#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void relu_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        y[i] = v;
    }
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    x = x.contiguous();
    TORCH_CHECK(x.numel() % 4 == 0, "numel must be a multiple of 4");
    auto y = torch::empty_like(x);
    int64_t n4 = x.numel() / 4;
    int blocks = (int)std::min<int64_t>((n4 + 255) / 256, 65535);
    relu_vec4<<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "ReLU (CUDA)");
}
'''

LINEAR_TAIL = '''

batch_size = 128
in_features = 512
out_features = 256


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# A task with parameters: the functional model holds them under other names than the module, so the
# judge must fall back on the seed convention to give both the same weights.
LINEAR_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ W^T + b + extra)"""
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.extra = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.extra)
''' + LINEAR_TAIL

LINEAR_FUNCTIONAL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


def module_fn(x, weight, bias, extra):
    return F.relu(F.linear(x, weight, bias) + extra)


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        gemm = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(gemm.weight)
        self.bias = nn.Parameter(gemm.bias)
        self.extra = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias, self.extra)
''' + LINEAR_TAIL

LINEAR_CUDA = r'''#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#define TILE 16

// One output tile per block; x and W tiles staged in shared memory, bias, extra and ReLU fused.
__global__ void linear_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                            const float* __restrict__ extra, float* __restrict__ y, int n, int k, int m) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < k; t += TILE) {
        xs[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < k) ? x[(int64_t)row * k + t + threadIdx.x] : 0.f;
        int wr = blockIdx.x * TILE + threadIdx.y;
        ws[threadIdx.y][threadIdx.x] = (wr < m && t + threadIdx.x < k) ? w[(int64_t)wr * k + t + threadIdx.x] : 0.f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i) acc += xs[threadIdx.y][i] * ws[threadIdx.x][i];
        __syncthreads();
    }
    if (row < n && col < m) y[(int64_t)row * m + col] = fmaxf(acc + b[col] + extra[col], 0.f);
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor extra) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    x = x.contiguous(); weight = weight.contiguous();
    int n = x.size(0), k = x.size(1), m = weight.size(0);
    auto y = torch::empty({n, m}, x.options());
    dim3 block(TILE, TILE), grid((m + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    linear_relu<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), extra.contiguous().data_ptr<float>(),
        y.data_ptr<float>(), n, k, m);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "Linear + bias + ReLU (CUDA)");
}
'''


def sakana_row(op: str, level: int, task: int, module: str, functional: str, cuda: str, speedup: float) -> dict:
    """One row with the archive's columns (the numbers are the row's claims, not measurements)."""
    return {"Op_Name": op, "Level_ID": level, "Task_ID": task, "Kernel_Name": f"{op.lower()}_kernel_v1",
            "CUDA_Runtime": 0.01, "PyTorch_Native_Runtime": 0.01 * speedup, "PyTorch_Compile_Runtime": 0.02,
            "CUDA_Speedup_Native": speedup, "CUDA_Speedup_Compile": speedup * 2, "CUDA_Code": cuda,
            "PyTorch_Code_Module": module, "PyTorch_Code_Functional": functional, "Correct": True,
            "Max_Diff": 0.0, "Error": None, "NCU_Profile": None, "Torch_Profile": None, "Clang_Tidy": None}


def sakana_rows() -> list[dict]:
    return [sakana_row("19_ReLU", 1, 19, RELU_MODULE, RELU_FUNCTIONAL, RELU_CUDA, 1.2),
            sakana_row("76_Gemm_Add_ReLU", 2, 76, LINEAR_MODULE, LINEAR_FUNCTIONAL, LINEAR_CUDA, 0.9)]


def write_jsonl(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
