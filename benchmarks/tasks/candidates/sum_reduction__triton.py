"""Sum over one dim of x viewed as (outer, N, inner): a program accumulates a BLOCK_N x BLOCK_I tile
(coalesced along inner) down its 1/SPLIT share of N, reducing once at the end, so small outputs still
fill the GPU; a second kernel adds the SPLIT partials in a fixed order (deterministic, no atomics)."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_N = 128  # tune: 16 32 64 128
BLOCK_I = 64  # tune: 32 64 128 256
SPLIT = 8  # tune: 1 4 8 16 32
NUM_WARPS = 4  # tune: 2 4 8


@triton.jit
def _sum_partial(x_ptr, part_ptr, N, inner, inner_blocks, chunk, split,
                 BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr):
    pid = tl.program_id(0)
    s = tl.program_id(1)
    o = pid // inner_blocks
    i = (pid % inner_blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    imask = i < inner
    base = x_ptr + o.to(tl.int64) * N * inner
    n_lo = s * chunk
    n_hi = tl.minimum(n_lo + chunk, N)
    n = n_lo + tl.arange(0, BLOCK_N)
    ptrs = base + n.to(tl.int64)[:, None] * inner + i[None, :]
    acc = tl.zeros([BLOCK_N, BLOCK_I], dtype=tl.float32)
    for n0 in range(n_lo, n_hi, BLOCK_N):
        acc += tl.load(ptrs, mask=(n < n_hi)[:, None] & imask[None, :], other=0.0)
        ptrs += BLOCK_N * inner
        n += BLOCK_N
    total = tl.sum(acc, axis=0)
    tl.store(part_ptr + (o.to(tl.int64) * split + s) * inner + i, total, mask=imask)


@triton.jit
def _sum_finish(part_ptr, out_ptr, inner, total, split, BLOCK: tl.constexpr):
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = j < total
    o = j // inner
    src = part_ptr + o * split * inner + (j - o * inner)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, split):
        acc += tl.load(src + s * inner, mask=mask, other=0.0)
    tl.store(out_ptr + j, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer, N, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
        out = torch.empty((*x.shape[:dim], 1, *x.shape[dim + 1:]), dtype=x.dtype, device=x.device)
        total = outer * inner
        if total == 0:
            return out
        if N == 0:
            return out.zero_()
        # Narrow inner dims (down to 1, a contiguous row sum): a taller tile of the same size.
        block_i = min(BLOCK_I, triton.next_power_of_2(inner))
        block_n = BLOCK_N * (BLOCK_I // block_i)
        split = min(SPLIT, triton.cdiv(N, block_n))
        chunk = triton.cdiv(triton.cdiv(N, split), block_n) * block_n
        split = triton.cdiv(N, chunk)   # every split gets at least one row
        inner_blocks = triton.cdiv(inner, block_i)
        part = out if split == 1 else torch.empty(outer * split * inner, dtype=x.dtype, device=x.device)
        _sum_partial[(outer * inner_blocks, split)](
            x, part, N, inner, inner_blocks, chunk, split,
            BLOCK_N=block_n, BLOCK_I=block_i, num_warps=NUM_WARPS)
        if split > 1:
            _sum_finish[(triton.cdiv(total, 1024),)](part, out, inner, total, split, BLOCK=1024)
        return out
