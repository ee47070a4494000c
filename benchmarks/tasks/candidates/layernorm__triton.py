"""Rows that fit in MAX_BLOCK are read once into registers (BLOCK_R short rows per program): mean,
two-pass variance from the registers, affine store. Longer rows loop over MAX_BLOCK chunks: a sum
pass, a squared-deviation pass and a write pass (the last two mostly from cache)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 4096  # tune: 1024 2048 4096 8192
ROW_TILE = 4096  # tune: 1024 2048 4096 8192
NUM_WARPS = 4  # tune: 2 4 8 16


@triton.jit
def _layernorm(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols, eps,
               BLOCK_R: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = r < rows
    row_off = r.to(tl.int64)[:, None] * cols
    c = tl.arange(0, BLOCK)
    if ONE_PASS:
        cmask = c < cols
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        mean = tl.sum(x, axis=1) / cols
        d = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(d * d, axis=1) / cols + eps)
        w = tl.load(w_ptr + c, mask=cmask, other=0.0)
        b = tl.load(b_ptr + c, mask=cmask, other=0.0)
        y = d * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(out_ptr + row_off + c[None, :], y, mask=mask)
    else:
        acc = tl.zeros([BLOCK_R, BLOCK], dtype=tl.float32)
        for c0 in range(0, cols, BLOCK):
            cc = c0 + c
            mask = rmask[:, None] & (cc < cols)[None, :]
            acc += tl.load(x_ptr + row_off + cc[None, :], mask=mask, other=0.0)
        mean = tl.sum(acc, axis=1) / cols
        acc = tl.zeros([BLOCK_R, BLOCK], dtype=tl.float32)
        for c0 in range(0, cols, BLOCK):
            cc = c0 + c
            mask = rmask[:, None] & (cc < cols)[None, :]
            x = tl.load(x_ptr + row_off + cc[None, :], mask=mask, other=0.0)
            d = tl.where(mask, x - mean[:, None], 0.0)
            acc += d * d
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / cols + eps)
        for c0 in range(0, cols, BLOCK):
            cc = c0 + c
            cmask = cc < cols
            mask = rmask[:, None] & cmask[None, :]
            x = tl.load(x_ptr + row_off + cc[None, :], mask=mask, other=0.0)
            w = tl.load(w_ptr + cc, mask=cmask, other=0.0)
            b = tl.load(b_ptr + cc, mask=cmask, other=0.0)
            y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
            tl.store(out_ptr + row_off + cc[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        x = x.contiguous()
        w, b = self.ln.weight.contiguous(), self.ln.bias.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return out
        block = min(triton.next_power_of_2(cols), MAX_BLOCK)
        block_r = max(1, ROW_TILE // block)   # several short rows per program
        _layernorm[(triton.cdiv(rows, block_r),)](
            x, w, b, out, rows, cols, float(self.ln.eps),
            BLOCK_R=block_r, BLOCK=block, ONE_PASS=cols <= block, num_warps=NUM_WARPS)
        return out
