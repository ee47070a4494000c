"""A streaming copy: each program moves BLOCK contiguous floats (16-byte vector loads and
stores, several in flight per thread); only the tail block is masked."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024  # tune: 1024 2048 4096 8192
NUM_WARPS = 4  # tune: 4 8 16


@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        if n:
            _copy[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
        return out
