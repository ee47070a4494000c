"""Where a load_inline build spends its time, and what shortens it. Run on a GPU machine:

    python benchmarks/inline_build.py [--pch]

Builds one trivial extension (a fused scale + ReLU kernel and its torch wrapper) once per variant,
one at a time, each in a fresh build directory and a fresh derived-header cache, and prints the
wall time of load_inline and the time ninja spent per target (from .ninja_log): main.o (the
pybind11 bindings, host compiler), cuda.cuda.o (the .cu through nvcc) and the link. Variants:
- default: as KernelBench candidates are written (torch/extension.h in the .cu);
- types: torch/types.h in the .cu instead (torch prepends it anyway);
- lean: the judge's build (judge/run/inline.py): per-file preludes of only what the source names;
- with --pch: torch's use_pch=True (a precompiled torch/extension.h for main.cpp; the first
  build also builds the header, so it runs twice).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

KERNEL = r'''
__global__ void relu_scale(const float* __restrict__ x, float* __restrict__ y, long long n, float s) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i] * s; y[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor relu_scale_cuda(torch::Tensor x, double s) {
  auto y = torch::empty_like(x); long long n = x.numel();
  relu_scale<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n, (float)s);
  return y;
}
'''
HEADERS = {
    "extension": "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n",
    "types": "#include <torch/types.h>\n#include <ATen/cuda/CUDAContext.h>\n",
}
VARIANTS = [("default", "extension", False), ("types", "types", False), ("lean", "extension", False)]
PCH_VARIANTS = [("pch", "extension", True), ("pch2", "extension", True)]


def build(tag: str, header: str, pch: bool) -> dict:
    import torch
    from torch.utils import cpp_extension

    from kernelevo.judge.run import inline

    directory = tempfile.mkdtemp(prefix=f"inline-{tag}-")
    os.environ["KERNELEVO_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"lean-{tag}-")
    load_inline = getattr(cpp_extension.load_inline, "__wrapped__", cpp_extension.load_inline)
    if tag == "lean":  # the derived headers, as the judging process prepares them (not timed: once per torch)
        inline.prepare(Path(os.environ["KERNELEVO_CACHE_DIR"]), inline.torch_include(), torch.__version__)
        inline.install()
        load_inline = cpp_extension.load_inline
    started = time.time()
    ext = load_inline(name=f"e_{tag}", cpp_sources="torch::Tensor relu_scale_cuda(torch::Tensor x, double s);",
                      cuda_sources=HEADERS[header] + KERNEL, functions=["relu_scale_cuda"],
                      build_directory=directory, use_pch=pch)
    total = time.time() - started
    x = torch.randn(1000, device="cuda")
    assert torch.equal(ext.relu_scale_cuda(x, 2.0), torch.relu(x * 2))
    steps = {}
    for line in open(os.path.join(directory, ".ninja_log")).read().splitlines()[1:]:
        start, end, _, target, _ = line.split("\t")
        steps[target] = (int(end) - int(start)) / 1000
    return {"variant": tag, "header": header, "pch": pch, "total_s": round(total, 2), "steps_s": steps}


def main() -> None:
    for tag, header, pch in VARIANTS + (PCH_VARIANTS if "--pch" in sys.argv else []):
        print(json.dumps(build(tag, header, pch)), flush=True)


if __name__ == "__main__":
    main()
