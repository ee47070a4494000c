"""Implicit-GEMM convolution (stride 1, zero padding) with bias + ReLU fused: a program computes
BLOCK_P consecutive pixels of one image x BLOCK_OC channels; per filter tap, coordinates and padding
mask are computed once, then input channels are reduced BLOCK_C at a time with an IEEE-fp32 tl.dot."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P = 256  # tune: 32 64 128 256
BLOCK_OC = 32  # tune: 16 32 64
BLOCK_C = 16  # tune: 16 32
NUM_WARPS = 8  # tune: 2 4 8
NUM_STAGES = 1  # tune: 1 2 3


@triton.jit
def _conv2d_relu(x_ptr, w_ptr, b_ptr, out_ptr, C, H, W, OC, OH, OW, pad_h, pad_w, p_blocks,
                 KH: tl.constexpr, KW: tl.constexpr,
                 BLOCK_P: tl.constexpr, BLOCK_OC: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    n = (pid // p_blocks).to(tl.int64)
    p = (pid % p_blocks) * BLOCK_P + tl.arange(0, BLOCK_P)   # output pixels, row-major in the image
    oc = tl.program_id(1) * BLOCK_OC + tl.arange(0, BLOCK_OC)
    rc = tl.arange(0, BLOCK_C)
    p_mask = p < OH * OW
    oc_mask = oc < OC
    oy = p // OW
    ox = p % OW
    x_img = x_ptr + n * C * H * W
    KK: tl.constexpr = KH * KW
    x_chan = rc.to(tl.int64)[None, :] * (H * W)                # (1, BLOCK_C) channel offsets
    w_base = w_ptr + oc.to(tl.int64)[None, :] * (C * KK) + rc[:, None] * KK   # weight is (OC, C, KH, KW)
    w_mask = oc_mask[None, :]

    acc = tl.zeros([BLOCK_P, BLOCK_OC], dtype=tl.float32)
    for ky in tl.static_range(KH):
        iy = oy - pad_h + ky
        row_ok = p_mask & (iy >= 0) & (iy < H)
        for kx in tl.static_range(KW):
            ix = ox - pad_w + kx
            inside = (row_ok & (ix >= 0) & (ix < W))[:, None]
            x_ptrs = x_img + x_chan + (iy * W + ix)[:, None]      # (BLOCK_P, BLOCK_C)
            w_ptrs = w_base + (ky * KW + kx)                       # (BLOCK_C, BLOCK_OC)
            for c0 in range(0, C, BLOCK_C):
                c_ok = (c0 + rc) < C
                xs = tl.load(x_ptrs, mask=inside & c_ok[None, :], other=0.0)
                ws = tl.load(w_ptrs, mask=c_ok[:, None] & w_mask, other=0.0)
                acc = tl.dot(xs, ws, acc, input_precision="ieee")
                x_ptrs += BLOCK_C * H * W
                w_ptrs += BLOCK_C * KK

    acc += tl.load(b_ptr + oc, mask=oc_mask, other=0.0)[None, :]
    y = tl.maximum(acc, 0.0)
    out_img = out_ptr + n * OC * OH * OW
    tl.store(out_img + oc.to(tl.int64)[None, :] * (OH * OW) + p[:, None], y,
             mask=p_mask[:, None] & oc_mask[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        conv = self.conv
        assert conv.stride == (1, 1) and conv.dilation == (1, 1) and conv.groups == 1
        assert conv.padding_mode == "zeros"
        x = x.contiguous()
        w = conv.weight.contiguous()
        b = conv.bias.contiguous() if conv.bias is not None else torch.zeros(
            w.shape[0], dtype=x.dtype, device=x.device)
        N, C, H, W = x.shape
        OC, _, KH, KW = w.shape
        pad_h, pad_w = conv.padding
        OH, OW = H + 2 * pad_h - KH + 1, W + 2 * pad_w - KW + 1
        out = torch.empty(N, OC, OH, OW, dtype=x.dtype, device=x.device)
        if out.numel() == 0:
            return out
        p_blocks = triton.cdiv(OH * OW, BLOCK_P)
        grid = (N * p_blocks, triton.cdiv(OC, BLOCK_OC))
        _conv2d_relu[grid](x, w, b, out, C, H, W, OC, OH, OW, pad_h, pad_w, p_blocks,
                           KH=KH, KW=KW, BLOCK_P=BLOCK_P, BLOCK_OC=BLOCK_OC, BLOCK_C=BLOCK_C,
                           num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out
