"""diag(a) @ b: the reference builds an N x N matrix and multiplies; the honest kernel scales rows."""
import torch
import torch.nn as nn

# N is smaller than KernelBench's 4096 so that the CPU reference (an N*N*M matmul) stays
# near 0.1 s on two cores; M is doubled to keep the GPU kernel's traffic at 64 MB.
N = 1024
M = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.diag(a) @ b


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
