# A residual block of a module's forward (its submodules' work written out as torch calls on their
# weights), one part of a model, written by `kernelevo split --granularity block`; its call sites
# and their shares of the model's time are in split.json beside this file.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm2_weight = nn.Parameter(torch.full([384], 1.0, dtype=torch.bfloat16))
        self.norm2_bias = nn.Parameter(torch.full([384], 0.0, dtype=torch.bfloat16))
        self.ff_fc_weight = nn.Parameter(torch.randn([1536, 384], dtype=torch.bfloat16) * 0.029)
        self.ff_fc_bias = nn.Parameter(torch.randn([1536], dtype=torch.bfloat16) * 0.029)
        self.ff_proj_weight = nn.Parameter(torch.randn([384, 1536], dtype=torch.bfloat16) * 0.015)
        self.ff_proj_bias = nn.Parameter(torch.randn([384], dtype=torch.bfloat16) * 0.014)

    def forward(self, add):
        norm2_weight = self.norm2_weight
        norm2_bias = self.norm2_bias
        ff_fc_weight = self.ff_fc_weight
        ff_fc_bias = self.ff_fc_bias
        ff_proj_weight = self.ff_proj_weight
        ff_proj_bias = self.ff_proj_bias
        layer_norm = torch.nn.functional.layer_norm(add, (384,), weight = norm2_weight, bias = norm2_bias, eps = 1e-05)
        linear = torch._C._nn.linear(layer_norm, ff_fc_weight, ff_fc_bias)
        gelu = torch._C._nn.gelu(linear, approximate = 'tanh')
        linear_1 = torch._C._nn.linear(gelu, ff_proj_weight, ff_proj_bias)
        add_1 = add + linear_1
        return add_1


def get_inputs():
    return [torch.randn([8, 256, 384], dtype=torch.bfloat16)]


def get_init_inputs():
    return []
