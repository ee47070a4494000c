"""CPU attention: one query row per task; scores for all keys in a scratch row, softmax with a
double sum, then the weighted sum of V rows (contiguous, vectorizes)."""
import math

import torch
import torch.nn as nn

from kernelevo import runtime

C_SRC = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

void attention(const float* q, const float* k, const float* v, float* out,
               int64_t heads, int64_t S, int64_t D, float scale) {
    #pragma omp parallel
    {
        float* p = (float*)malloc((size_t)S * sizeof(float));
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < heads * S; ++r) {
            const int64_t h = r / S;
            const float* qr = q + r * D;
            const float* kh = k + h * S * D;
            const float* vh = v + h * S * D;
            float* orow = out + r * D;
            float m = -INFINITY;
            for (int64_t j = 0; j < S; ++j) {
                float d = 0.0f;
                for (int64_t c = 0; c < D; ++c) d += qr[c] * kh[j * D + c];
                p[j] = d * scale;
                m = fmaxf(m, p[j]);
            }
            double l = 0.0;
            for (int64_t j = 0; j < S; ++j) { p[j] = expf(p[j] - m); l += p[j]; }
            for (int64_t c = 0; c < D; ++c) orow[c] = 0.0f;
            for (int64_t j = 0; j < S; ++j)
                for (int64_t c = 0; c < D; ++c) orow[c] += p[j] * vh[j * D + c];
            const float inv = (float)(1.0 / l);
            for (int64_t c = 0; c < D; ++c) orow[c] *= inv;
        }
        free(p);
    }
}
"""

_lib = runtime.load_c(C_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        S, D = q.shape[-2], q.shape[-1]
        out = torch.empty_like(q)
        if out.numel():
            _lib.attention(q, k, v, out, q.numel() // (S * D), S, D, 1.0 / math.sqrt(D))
        return out
