"""Tolerances: honest rounding passes; zeros, TF32-level error, constants and NaN do not."""
import torch

from kernelevo.judge.compare import Match, Mismatch, compare, reference_error


def check(out, ref, exact=None):
    return compare(out, ref, exact, reference_error(ref, exact) if exact is not None else 0.0)


def test_exact_and_rounding_pass():
    x = torch.randn(1000, 100, dtype=torch.float64)
    assert isinstance(check(x.float(), x.float(), x), Match)
    assert isinstance(check(x.float() * (1 + 1e-7), x.float(), x), Match)


def test_zeros_fail_even_for_tiny_outputs():
    ref = torch.randn(1000) * 1e-4  # KernelBench's atol 1e-2 would pass all zeros here
    result = check(torch.zeros(1000), ref)
    assert isinstance(result, Mismatch) and result.reason == "value_mismatch"


def test_tf32_level_error_fails_in_float32():
    a, b = torch.randn(256, 512, dtype=torch.float64), torch.randn(512, 256, dtype=torch.float64)
    exact = a @ b
    tf32 = (a.float().to(torch.bfloat16).float() @ b.float().to(torch.bfloat16).float())  # coarse inputs
    result = check(tf32, exact.float(), exact)
    assert isinstance(result, Mismatch) and result.rel_l2 > 5e-5


def test_bfloat16_tolerance():
    exact = torch.randn(4096, dtype=torch.float64)
    assert isinstance(check(exact.to(torch.bfloat16), exact.to(torch.bfloat16), exact), Match)


def test_one_wrong_element_is_found():
    ref = torch.randn(64, 64)
    out = ref.clone()
    out[5, 7] += 1.0
    result = check(out, ref)
    assert isinstance(result, Mismatch) and result.index == (5, 7)


def test_constant_output_fails_on_offset_dominated_reference():
    exact = 10 + 2e-4 * torch.randn(128, 256, dtype=torch.float64)
    constant = torch.full((128, 256), 10.0)
    result = check(constant, exact.float(), exact)
    assert isinstance(result, Mismatch) and result.reason == "near_constant"
    assert isinstance(check(exact.float(), exact.float(), exact), Match)


def test_nan_shape_dtype_count():
    ref = torch.randn(8, 8)
    bad = ref.clone()
    bad[1, 1] = float("nan")
    assert check(bad, ref).reason == "non_finite"
    assert check(ref.t()[:4], ref).reason == "shape_mismatch"
    assert check(ref.double(), ref).reason == "dtype_mismatch"
    assert check((ref, ref), ref).reason == "output_count"
    assert check([3], ref).reason == "output_type"


def test_matching_infinities_pass():
    ref = torch.tensor([1.0, float("inf"), -float("inf")])
    assert isinstance(check(ref.clone(), ref), Match)


def test_integer_outputs_exact():
    ref = torch.arange(10)
    assert isinstance(check(ref.clone(), ref), Match)
    assert check(ref + (ref == 3), ref).index == (3,)
