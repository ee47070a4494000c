"""How accurate is a float32 GEMM done as three fp16 products of a scaled split? (issue 52)

    python benchmarks/split_gemm_range.py [--size 512]

The yardstick's 1_Square reply 197 (3.9x torch.compile on an H200) computes A @ B on the fp16 tensor cores: each
row of A and column of B scaled by a power of two so that its largest element lies in [2^14, 2^15), split into an
fp16 high part and an fp16 low part, and lo*hi + hi*lo + hi*hi summed in float32. Here the same arithmetic runs on
the CPU in torch (fp16 rounding by casting, subnormals included; a product of two fp16 values is exact in float32,
as on the tensor cores), against float64, beside the float32 reference, on inputs of the judge's kinds and on
inputs whose elements each move by 2^k, k uniform in [-w, w]; last, a case built to break it: A's and B's
exponents opposite, so that every product has one size and a row's small elements matter. Prints relative L2
errors and their ratio to the float32 reference's own. Record: split_gemm_range-CPU-2026-11-30.txt."""
import argparse

import torch


def split(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """hi, lo (fp16 values held in float32) of x scaled by 2^s along `dim`, and s."""
    amax = x.abs().amax(dim=dim, keepdim=True)
    _, e = torch.frexp(amax)
    s = (15 - e).where(amax > 0, torch.zeros_like(e))
    xs = torch.ldexp(x, s.float())
    hi = xs.half().float()
    lo = (xs - hi).half().float()
    return hi, lo, s


def split_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ah, al, sa = split(a, 1)
    bh, bl, sb = split(b, 0)
    acc = al @ bh + ah @ bl + ah @ bh
    return torch.ldexp(acc, -(sa + sb).float())


def errors(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    exact = a.double() @ b.double()
    rel = lambda c: float((c.double() - exact).norm() / exact.norm())  # noqa: E731
    return rel(a @ b), rel(split_gemm(a, b))


def moved(x: torch.Tensor, w: int, g: torch.Generator) -> torch.Tensor:
    return torch.ldexp(x, torch.randint(-w, w + 1, x.shape, generator=g).float())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    n = parser.parse_args().size
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(n, n, generator=g), torch.rand(n, n, generator=g)
    cases = {"torch.rand, as the task draws": (a, b),
             "randn": (torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)),
             "x1024 + 1024 std (the large-value trial)": (a * 1024 + 1024 * a.std(), b * 1024 + 1024 * b.std())}
    for w in (8, 20, 40):
        cases[f"each element x2^k, k in [-{w}, {w}]"] = (moved(a, w, g), moved(b, w, g))
    k = torch.randint(-20, 21, (n,), generator=g).float()
    cases["built to break it: A[:, j] x2^k_j, B[j, :] x2^-k_j"] = (torch.ldexp(a, k[None, :]), torch.ldexp(b, -k[:, None]))
    print(f"{n}x{n} @ {n}x{n}, float32; relative L2 error against float64")
    print(f"{'inputs':55s} {'fp32 reference':>15s} {'fp16 split':>12s} {'ratio':>7s}")
    for name, (x, y) in cases.items():
        ref, got = errors(x, y)
        print(f"{name:55s} {ref:15.2e} {got:12.2e} {got / ref:7.1f}")


if __name__ == "__main__":
    main()
