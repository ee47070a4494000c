"""Does the judge's large-value trial refuse honest float32 forms of a task? (issue 52: the KernelBench sample)

    python benchmarks/value_range_forms.py SUITE_DIR [cuda|cpu]

SUITE_DIR is the folder benchmarks/kernelbench_sample.py wrote. For 99_Matmul_GELU_Softmax and
97_ScaledDotProductAttention: the reference built, its weights redrawn as the judge does, inputs moved as the
judge's large-value trial moves them (x1024 shifted by 1024 std). Each honest form (the float32 reference
itself, a split-K or blocked float32 matmul, PyTorch's own SDPA math backend, float64 intermediates) is
compared exactly as the checker compares: against the float64 reference, with the float32 reference's own
error as floor and the input-rounding slack, before (the elementwise test always) and now (not where the
reference itself misses it). Prints one line per form.
"""
import copy
import sys
import time

import torch
import torch.nn.functional as F

from kernelevo.judge.trials import compare, generality
from kernelevo.tasks import load_task


def forms_99(m, a) -> dict:
    (x,) = a
    w, b = m.linear.weight, m.linear.bias
    k, h = x.shape[1], x.shape[1] // 2

    def tail(z):
        return F.softmax(F.gelu(z), dim=1)

    return {"split-K fp32": tail(x[:, :h] @ w[:, :h].T + x[:, h:] @ w[:, h:].T + b),
            "k-blocked fp32 (128)": tail(sum(x[:, i:i + 128] @ w[:, i:i + 128].T for i in range(0, k, 128)) + b),
            "fp64 matmul, fp32 tail": tail((x.double() @ w.double().T + b.double()).float())}


def forms_97(m, a) -> dict:
    q, k, v = a
    s = q.shape[-1] ** -0.5
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        math_backend = F.scaled_dot_product_attention(q, k, v)
    return {"explicit softmax fp32": torch.softmax((q @ k.transpose(-1, -2)) * s, -1) @ v,
            "sdpa math backend": math_backend,
            "fp64 scores, fp32 out": (torch.softmax((q.double() @ k.double().transpose(-1, -2)) * s, -1)
                                      @ v.double()).float()}


def one(path: str, forms, dev: str) -> None:
    t0 = time.time()
    task = load_task(path)
    torch.manual_seed(0)
    model = task.make_model().to(dev).eval()
    generality.redraw(model, None, {}, 0)
    m64 = copy.deepcopy(model).double()
    torch.manual_seed(1)
    xs, label = generality.large_values([a.to(dev) for a in task.get_inputs()], lambda a: True)
    with torch.no_grad():
        expected, exact = model(*xs), m64(*[a.double() for a in xs])
        slack = generality.conditioning_slack(lambda moved: m64(*moved), [a.double() for a in xs], exact)
        floor = compare.reference_error(expected, exact, slack)
        misses = compare.reference_misses(expected, exact, floor, slack)
        print(f"== {path.split('/')[-1]} on {dev}: {label}; floor (fp32 reference vs float64) {floor:.3g}; "
              f"the reference misses the elementwise bound at {misses} elements")
        for name, out in {"the reference itself": expected, **forms(model, xs), "float64 cast to fp32": exact.float()}.items():
            before = compare.compare(out, expected, exact, floor, slack)
            now = compare.compare(out, expected, exact, floor, slack, elementwise=not misses)
            print(f"  {name:26s} before {type(before).__name__:8s} now {type(now).__name__:8s} rel_l2 {before.rel_l2:.2e} "
                  f"max_abs {before.max_abs:.3g} " + (before.message if isinstance(before, compare.Mismatch) else ""))
    print(f"  ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    for name, forms in (("99_Matmul_GELU_Softmax.py", forms_99), ("97_ScaledDotProductAttention.py", forms_97)):
        one(f"{sys.argv[1]}/{name}", forms, sys.argv[2] if len(sys.argv) > 2 else "cuda")
