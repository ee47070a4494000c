"""One fused pass over BLOCK_R x BLOCK_C tiles (bias loaded once per tile column, no modulo):
with e = exp(-y), tanh(y) * sigmoid(y) = (1 - e) / (1 + e*e), one exp per element; 1 - e
comes from its Taylor series for small y, where the subtraction would cancel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_R = 4  # tune: 1 2 4 8 16
BLOCK_C = 1024  # tune: 256 512 1024 2048
NUM_WARPS = 8  # tune: 4 8 16


@triton.jit
def _chain(x_ptr, bias_ptr, out_ptr, scale, rows, cols, col_blocks,
           BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    pid_r = pid // col_blocks
    pid_c = pid % col_blocks
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < cols
    mask = (r < rows)[:, None] & cmask[None, :]
    offs = r.to(tl.int64)[:, None] * cols + c[None, :]
    b = tl.load(bias_ptr + c, mask=cmask, other=0.0)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    y = tl.maximum(x * scale + b[None, :], 0.0)
    e = tl.exp(-y)  # y >= 0: e in (0, 1], no overflow
    # 1 - e^-y = y (1 - y/2 (1 - y/3 (... (1 - y/8)))): error below 1e-8 relative for y < 0.5
    p = 1.0 - y * 0.125
    p = 1.0 - y * (1.0 / 7.0) * p
    p = 1.0 - y * (1.0 / 6.0) * p
    p = 1.0 - y * 0.2 * p
    p = 1.0 - y * 0.25 * p
    p = 1.0 - y * (1.0 / 3.0) * p
    p = 1.0 - y * 0.5 * p
    one_minus_e = tl.where(y < 0.5, y * p, 1.0 - e)
    tl.store(out_ptr + offs, one_minus_e / (1.0 + e * e), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        bias = self.bias.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if rows:
            # Short rows: narrower, taller tiles of the same size, so few lanes are masked off.
            block_c = min(BLOCK_C, triton.next_power_of_2(cols))
            block_r = BLOCK_R * (BLOCK_C // block_c)
            col_blocks = triton.cdiv(cols, block_c)
            grid = (triton.cdiv(rows, block_r) * col_blocks,)
            _chain[grid](x, bias, out, float(self.scale), rows, cols, col_blocks,
                         BLOCK_R=block_r, BLOCK_C=block_c, num_warps=NUM_WARPS)
        return out
