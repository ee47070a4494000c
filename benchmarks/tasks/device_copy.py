"""Device-to-device copy of a 128 MiB tensor: pure data movement, the speed-of-light reference case
(its bound is bytes read + bytes written at the device's measured bandwidth)."""
import torch
import torch.nn as nn

ELEMENTS = 32 * 1024 * 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.randn(ELEMENTS)]


def get_init_inputs():
    return []
