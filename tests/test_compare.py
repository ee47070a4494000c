"""Tolerances: honest rounding passes; zeros, TF32-level error, constants and NaN do not."""
import torch

from kernelevo.judge.trials.compare import Match, Mismatch, compare, reference_error


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


def _attention(q, k, v, reorder: bool = False):
    """softmax(q k^T / 8) v; `reorder` sums the dot products sequentially from the last term, as a
    kernel with another reduction order would."""
    if reorder:
        scores = torch.zeros(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype)
        for i in reversed(range(q.shape[-1])):
            scores += q[..., i:i + 1] * k[..., i].unsqueeze(-2)
    else:
        scores = q @ k.transpose(-2, -1)
    return torch.softmax(scores / 8, dim=-1) @ v


def test_ill_conditioned_large_values_allow_what_input_roundings_move():
    """Attention at x1024 makes softmax an argmax among near-ties: an honest kernel summing in another
    order picks another key in a few rows. The slack lets that pass; a wrong element or a NaN elsewhere
    does not. (Inputs the judge draws for seed 3; the plain comparison fails there.)"""
    from kernelevo.judge.trials import generality, inputs

    def get_inputs():
        return [torch.randn(4, 8, 256, 64) for _ in range(3)]

    args, _ = generality.large_values(inputs.trial_inputs(get_inputs, 6, 3, "cpu", "as given")[0], lambda a: True)
    ref, exact = _attention(*args), _attention(*inputs.to_float64(args))
    honest = _attention(*args, reorder=True)
    assert isinstance(compare(honest, ref, exact, reference_error(ref, exact)), Mismatch)
    slack = generality.conditioning_slack(lambda moved: _attention(*moved), inputs.to_float64(args), exact)
    floor = reference_error(ref, exact, slack)  # the reference's own flipped near-ties do not count
    result = compare(honest, ref, exact, floor, slack)
    assert isinstance(result, Match) and "input roundings" in result.tolerance
    near_tie = slack[0] > 1e-3 * exact.abs().max()
    wrong = honest.clone()
    row = (~near_tie).all(-1).nonzero()[0].tolist()  # a row the inputs' roundings leave alone
    wrong[tuple(row)][0] *= 1.01
    assert isinstance(compare(wrong, ref, exact, floor, slack), Mismatch)
    nan = honest.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert compare(nan, ref, exact, floor, slack).reason == "non_finite"


def test_where_the_reference_itself_misses_the_elementwise_bound_only_the_norm_applies():
    """KernelBench's SDPA at x1024 (positive inputs, 1024-long dot products, 512 keys): a float32 sum of
    same-signed terms rounds by far more than the inputs' roundings move the answer, so a near-tie the exact
    answer settles one way goes the other in the float32 reference itself (on the CPU, 276 of its 134M outputs
    missed the elementwise bound against float64; an honest kernel summing in another order was refused for
    its own near-ties on an H200). Here: such a flip in the reference at one element, in a candidate at
    another. The elementwise test the reference misses is not asked of the candidate; the norm bound still is."""
    from kernelevo.judge.trials.compare import reference_misses

    gen = torch.Generator().manual_seed(0)
    exact = 300 + 1000 * torch.rand(512, 1024, generator=gen, dtype=torch.float64)  # attention outputs: v's range
    ref, honest = exact.float(), exact.float()
    ref[10, 5] += 40.0  # a near-tie gone the other way: another key's value, partly
    honest[300, 900] -= 40.0
    floor = reference_error(ref, exact)
    assert reference_misses(ref, exact, floor) == 1
    assert isinstance(compare(ref, ref, exact, floor), Mismatch)  # the reference fails its own elementwise test
    assert isinstance(compare(honest, ref, exact, floor), Mismatch)  # so an honest kernel did too
    result = compare(honest, ref, exact, floor, elementwise=False)
    assert isinstance(result, Match) and "no elementwise bound" in result.tolerance
    uniform = exact.mean(0, keepdim=True).expand_as(exact).float().contiguous()  # every row the mean row
    assert isinstance(compare(uniform, ref, exact, floor, elementwise=False), Mismatch)
    rows = honest.clone()
    rows[:8] *= 1.01  # eight rows 1 % off: beyond the norm bound (8x the reference's own error)
    assert isinstance(compare(rows, ref, exact, floor, elementwise=False), Mismatch)


def test_a_well_conditioned_reference_misses_nothing():
    from kernelevo.judge.trials.compare import reference_misses

    x, w = torch.randn(256, 64), torch.randn(64, 32)
    ref, exact = x @ w, x.double() @ w.double()
    assert reference_misses(ref, exact, reference_error(ref, exact)) == 0
