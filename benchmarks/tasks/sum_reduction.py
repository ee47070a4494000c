"""Sum over the middle dimension of a (B, N, M) tensor, keeping it: a strided reduction."""
import torch
import torch.nn as nn

BATCH = 64
N = 4096
M = 64
DIM = 1


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, N, M)]


def get_init_inputs():
    return [DIM]
