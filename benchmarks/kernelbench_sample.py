"""The KernelBench sample of the yardstick (issue 52) as a suite folder, from a KernelBench checkout.

    python benchmarks/kernelbench_sample.py KERNELBENCH/KernelBench OUT_DIR [--max-gib 2]
    kernelevo bench OUT_DIR --format auto --baseline compile --max-llm-calls-per-task 6 \
        --model replay:out/prompts --out out          # in rounds: each serves the replies written so far

Eight level-1 and five level-2 tasks are copied at KernelBench's own sizes where one call's tensors (inputs,
outputs and the module's weights) fit in --max-gib. Where they do not, the task's batch (`batch_size = N` at
the top of the file, the first dimension of its inputs) is halved until they do, and the file says so in a
header line; sample.json lists every task with its bytes before and after and the factor. The bytes come from
building the module and its inputs on the meta device and running its forward there: nothing is allocated.
Why a cap at all: the judge holds several input sets and their reference outputs at once, beside the
candidate's, so a task of 13 GB a call (level 1's softmax: 4096 x 393216) does not fit its trials on one GPU.
KernelBench is MIT licensed; its files are read from the checkout given, never kept in this repository.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

SAMPLE = {
    "level1": ("1_Square_matrix_multiplication_", "23_Softmax", "36_RMSNorm_", "40_LayerNorm",
               "47_Sum_reduction_over_a_dimension", "88_MinGPTNewGelu", "95_CrossEntropyLoss",
               "97_ScaledDotProductAttention"),
    "level2": ("12_Gemm_Multiply_LeakyReLU", "17_Conv2d_InstanceNorm_Divide", "29_Matmul_Mish_Mish",
               "84_Gemm_BatchNorm_Scaling_Softmax", "99_Matmul_GELU_Softmax"),
}
BATCH = re.compile(r"^batch_size\s*=\s*(\d+)\s*$", re.M)


def call_bytes(source: str, name: str) -> int:
    """Bytes of one call's tensors: inputs, outputs and the module's parameters and buffers, on meta."""
    import torch

    from kernelevo.tasks import load_module

    module = load_module(source, name, "kernelbench_task")
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else [out]
    tensors = [*inputs, *outs, *model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def scaled(source: str, name: str, cap: int) -> tuple[str, dict]:
    """The task's source, its batch halved until a call fits `cap` bytes, and what was done."""
    before = now = call_bytes(source, name)
    found = BATCH.search(source)
    factor = 1
    while now > cap and found and int(found.group(1)) // (factor * 2) >= 1:
        factor *= 2
        now = call_bytes(BATCH.sub(f"batch_size = {int(found.group(1)) // factor}", source, count=1), name)
    record = {"bytes": before, "bytes_judged": now, "scaled_by": factor}
    if now > cap:
        raise SystemExit(f"{name}: {now / 2**30:.1f} GiB a call even with its batch scaled down; raise --max-gib")
    if factor == 1:
        return source, record
    batch = int(found.group(1))
    record["batch_size"] = [batch, batch // factor]
    header = (f"# kernelevo: batch_size {batch} -> {batch // factor} (KernelBench's size is "
              f"{before / 2**30:.1f} GiB a call; the yardstick's cap is {cap / 2**30:g} GiB)\n")
    return header + BATCH.sub(f"batch_size = {batch // factor}", source, count=1), record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernelbench", type=Path, help="the KernelBench folder of a checkout (holds level1/, level2/)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--max-gib", type=float, default=2.0, help="one call's tensors at most (GiB)")
    args = parser.parse_args(argv)
    cap = int(args.max_gib * 2**30)
    args.out.mkdir(parents=True, exist_ok=True)
    written = {}
    for level, names in SAMPLE.items():
        for name in names:
            path = args.kernelbench / level / f"{name}.py"
            if not path.is_file():
                raise SystemExit(f"{path}: not found; give the KernelBench folder of a checkout")
            source, record = scaled(path.read_text(), name, cap)
            (args.out / f"{name}.py").write_text(source)
            written[name] = {"level": level, **record}
            note = f", batch {record['batch_size'][0]} -> {record['batch_size'][1]}" if "batch_size" in record else ""
            print(f"{level}/{name}: {record['bytes_judged'] / 2**20:.0f} MiB a call{note}")
    (args.out / "sample.json").write_text(json.dumps({"max_gib": args.max_gib, "tasks": written}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
