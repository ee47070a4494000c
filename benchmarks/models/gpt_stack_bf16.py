"""A GPT-style decoder stack in bfloat16, in KernelBench format, about the size of gpt_stack.py: token and
position embeddings, pre-norm blocks of causal self-attention (torch's scaled_dot_product_attention,
which runs a fused attention kernel in bf16 on a GPU) and a GELU MLP, a final norm and the vocabulary
projection, all weights in bf16. `kernelevo split` keeps the dtype: its parts are bf16 tasks."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, HEADS, DEPTH = 4096, 256, 384, 6, 6
BATCH, TOKENS = 8, 256


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class FeedForward(nn.Module):
    def __init__(self, width, ratio):
        super().__init__()
        self.fc = nn.Linear(width, ratio * width)
        self.proj = nn.Linear(ratio * width, width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class DecoderBlock(nn.Module):
    def __init__(self, width, heads, ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.ff = FeedForward(width, ratio)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class Model(nn.Module):
    def __init__(self, vocab, context, width, heads, depth):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        self.layers = nn.ModuleList([DecoderBlock(width, heads, 4) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        nn.init.normal_(self.position, std=0.02)
        self.to(torch.bfloat16)

    def forward(self, idx):
        x = self.embed(idx) + self.position[: idx.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, TOKENS))]


def get_init_inputs():
    return [VOCAB, CONTEXT, WIDTH, HEADS, DEPTH]
