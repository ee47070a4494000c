# A residual block of a module's forward (its submodules' work written out as torch calls on their
# weights), one part of a model, written by `kernelevo split --granularity block`; its call sites
# and their shares of the model's time are in split.json beside this file.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1_weight = nn.Parameter(torch.full([384], 1.0, dtype=torch.bfloat16))
        self.norm1_bias = nn.Parameter(torch.full([384], 0.0, dtype=torch.bfloat16))
        self.attn_qkv_weight = nn.Parameter(torch.randn([1152, 384], dtype=torch.bfloat16) * 0.029)
        self.attn_proj_weight = nn.Parameter(torch.randn([384, 384], dtype=torch.bfloat16) * 0.03)

    def forward(self, x):
        norm1_weight = self.norm1_weight
        norm1_bias = self.norm1_bias
        attn_qkv_weight = self.attn_qkv_weight
        attn_proj_weight = self.attn_proj_weight
        layer_norm = torch.nn.functional.layer_norm(x, (384,), weight = norm1_weight, bias = norm1_bias, eps = 1e-05)
        linear = torch._C._nn.linear(layer_norm, attn_qkv_weight, None)
        view = linear.view(8, 256, 3, 6, 64)
        permute = view.permute(2, 0, 3, 1, 4)
        getitem = permute[0]
        getitem_1 = permute[1]
        getitem_2 = permute[2]
        scaled_dot_product_attention = torch._C._nn.scaled_dot_product_attention(getitem, getitem_1, getitem_2, is_causal = True)
        transpose = scaled_dot_product_attention.transpose(1, 2)
        reshape = transpose.reshape(8, 256, 384)
        linear_1 = torch._C._nn.linear(reshape, attn_proj_weight, None)
        add = x + linear_1
        return add


def get_inputs():
    return [torch.randn([8, 256, 384], dtype=torch.bfloat16)]


def get_init_inputs():
    return []
