"""diag(a) @ b is b with row i scaled by a[i]: one streaming pass over b in BLOCK_R x BLOCK_C
tiles (coalesced along the row, each program loads its BLOCK_R scales once); tails masked."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_R = 4  # tune: 1 2 4 8 16
BLOCK_C = 1024  # tune: 256 512 1024 2048
NUM_WARPS = 8  # tune: 4 8 16


@triton.jit
def _scale_rows(a_ptr, b_ptr, out_ptr, rows, cols, col_blocks,
                BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    pid_r = pid // col_blocks
    pid_c = pid % col_blocks
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    rmask = r < rows
    mask = rmask[:, None] & (c < cols)[None, :]
    offs = r.to(tl.int64)[:, None] * cols + c[None, :]
    s = tl.load(a_ptr + r, mask=rmask, other=0.0)
    v = tl.load(b_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    tl.store(out_ptr + offs, v * s[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        assert a.dim() == 1 and b.dim() == 2 and b.shape[0] == a.shape[0]
        rows, cols = b.shape
        out = torch.empty_like(b)
        if rows and cols:
            # Short rows: narrower, taller tiles of the same size, so few lanes are masked off.
            block_c = min(BLOCK_C, triton.next_power_of_2(cols))
            block_r = BLOCK_R * (BLOCK_C // block_c)
            col_blocks = triton.cdiv(cols, block_c)
            grid = (triton.cdiv(rows, block_r) * col_blocks,)
            _scale_rows[grid](a, b, out, rows, cols, col_blocks,
                              BLOCK_R=block_r, BLOCK_C=block_c, num_warps=NUM_WARPS)
        return out
