"""Memory-bound chain of elementwise ops: y = relu(x * scale + bias); out = tanh(y) * sigmoid(y)."""
import torch
import torch.nn as nn

ROWS = 4096
FEATURES = 4096
SCALE = 1.5


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        y = torch.relu(x * self.scale + self.bias)
        return torch.tanh(y) * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return [FEATURES, SCALE]
