"""Statistics of the timer (not timings of anything: those belong in benchmarks/)."""
import math
import random
import subprocess
import sys
import time

import pytest
import torch

from kernelevo.judge.measure.timing import TimingConfig, measure, paired_ratio, summarize


def test_summary_of_known_samples():
    stats = summarize([float(x) for x in range(1, 102)])
    assert stats.median_ms == 51
    assert stats.min_ms == 1 and stats.n == 101
    assert stats.p10_ms == 11 and stats.p90_ms == 91
    assert stats.mean_ms == pytest.approx(51)


def test_interval_narrows_with_more_samples():
    rng = random.Random(0)
    few = summarize([rng.gauss(1.0, 0.05) for _ in range(20)])
    many = summarize([rng.gauss(1.0, 0.05) for _ in range(2000)])
    assert many.rel_ci < few.rel_ci
    assert many.rel_ci < 0.01  # 2000 samples at 5 % scatter pin the median within 1 %


def test_median_resists_outliers():
    stats = summarize([1.0] * 99 + [1000.0])
    assert stats.median_ms == 1.0


def test_measure_interleaves_and_orders_costs():
    x = torch.randn(256, 256)
    calls = []

    def cheap(args):
        calls.append("cheap")
        return args[0] + 1

    def costly(args):
        calls.append("costly")
        return args[0] @ args[0] @ args[0]

    measured = measure({"cheap": cheap, "costly": costly}, [[x], [x.clone()]], "cpu",
                       TimingConfig(min_reps=10, max_seconds=0.5, flush=False), ratios=(("costly", "cheap"),))
    stats = measured.stats
    assert stats["costly"].median_ms > stats["cheap"].median_ms
    assert stats["cheap"].n == stats["costly"].n >= 10
    last = calls[-20:]  # after warm-up, rounds alternate A B, B A
    assert last.count("cheap") == last.count("costly")
    ratio, ci = measured.ratio("costly", "cheap")
    assert ratio > 1 and ci >= 0
    assert len(measured.samples["costly"]) == stats["costly"].n


def test_paired_ratio_cancels_what_both_calls_of_a_round_share():
    # A clock that slows down round after round: the medians spread, each round's ratio does not.
    slow = [1.0 + 0.1 * r for r in range(40)]
    ratio, ci = paired_ratio([3 * s for s in slow], slow)
    assert ratio == pytest.approx(3.0) and ci == pytest.approx(0.0)
    assert summarize([3 * s for s in slow]).rel_ci > 0.05


@pytest.mark.gpu
def test_relocated_inputs_keep_their_values_at_new_addresses():
    from kernelevo.judge.measure.timing import _relocated

    x, t = torch.randn(1000, device="cuda"), torch.randn(8, 4, device="cuda").t()
    (moved,), pad = _relocated([[x, t, 3]], 5)
    assert pad is not None and torch.equal(moved[0], x) and moved[0].data_ptr() != x.data_ptr()
    assert moved[1] is t and moved[2] == 3  # a non-contiguous view keeps its layout, as given


def test_intervals_of_products_combine_on_a_log_scale():
    from kernelevo.judge.measure.timing import combined, interval

    assert interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    low, high = combined(2.0, (1.0, 0.9, 1.2))  # one factor: its own relative spread
    assert low == pytest.approx(1.8) and high == pytest.approx(2.4)
    low, high = combined(1.0, (1.0, 0.9, 1.1), (1.0, 0.9, 1.1))
    assert low == pytest.approx(math.exp(-math.sqrt(2) * math.log(1 / 0.9)))
    assert high == pytest.approx(math.exp(math.sqrt(2) * math.log(1.1)))


def test_load_from_other_processes_is_seen_and_said():
    """A process outside the judge kept busy during a measurement shows in the verdict's load."""
    from kernelevo.judge.measure.timing import LoadWatch, load_note

    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.2)
        watch = LoadWatch()
        time.sleep(0.8)
        load = watch.stop()
    finally:
        busy.kill()
        busy.wait()
    assert load["other_cores"] > 0.5 and load["loaded"], load
    assert load_note(load).startswith("other processes kept") and load_note({"loaded": False}) == ""


def test_a_loaded_measurement_reports_a_wider_interval():
    from kernelevo.judge.measure.timing import widened

    assert widened([0.24, 0.25], {"loaded": False, "cores": 2, "other_cores": 0.1}) == [0.24, 0.25]
    low, high = widened([0.24, 0.25], {"loaded": True, "cores": 2, "other_cores": 1.0})  # half the machine taken
    assert low == pytest.approx(0.12) and high == pytest.approx(0.5)
    low, high = widened([1.0, 1.0], {"loaded": True, "cores": 2, "other_cores": 2.0})  # at most 4x
    assert low == pytest.approx(0.25) and high == pytest.approx(4.0)


def test_a_cpu_interval_is_at_least_the_spread_between_processes():
    from kernelevo.judge.measure.timing import CPU_REPEAT_REL, reported

    low, high = reported(2.0, [1.99, 2.01], None, cpu=True)
    assert low == pytest.approx(2.0 * (1 - CPU_REPEAT_REL)) and high == pytest.approx(2.0 * (1 + CPU_REPEAT_REL))
    assert reported(2.0, [1.99, 2.01], None, cpu=False) == [1.99, 2.01]
    assert reported(2.0, [1.5, 2.6], None, cpu=True) == [1.5, 2.6]  # already wider


class ScriptedClock:
    """A CPU clock that gives each timed call the next of the times it was handed."""

    cuda = False

    def __init__(self, times: list[float]):
        self.times = iter(times)

    def time_batch(self, fns):
        for _, fn in fns:
            fn()
        return [(fns[0][0], next(self.times))]


def _fresh_against_control(control: list[float], fresh: list[float], rounds: int = 3) -> dict:
    """fresh_values on calls timed as scripted, pair by pair (a control, then a fresh call); the script
    must hold every pair it takes."""
    from kernelevo.judge.measure.crosscheck import fresh_values

    sources = [[torch.randn(4, 8)] for _ in range(3)]
    times = [t for pair in zip(control, fresh) for t in pair]
    clock = ScriptedClock(times)
    evidence = fresh_values(lambda a: a[0] * 2, lambda a: a[0] * 2, clock, sources, timed_ms=0.07, rounds=rounds)
    assert evidence["pairs"] == len(control), "the judge took fewer pairs than scripted"
    return evidence


def test_a_cache_is_slower_on_fresh_values_in_every_pair_of_two_batches():
    from kernelevo.judge.trials.guards import Rejected

    with pytest.raises(Rejected) as caught:
        _fresh_against_control([0.07] * 16, [2.5] * 16)
    assert caught.value.reason == "cached_result" and "slower in 16 of 16 pairs" in caught.value.message
    assert caught.value.evidence["pair_ms"][-1] == [0.07, 2.5]


def test_a_batch_that_looks_cached_by_chance_is_cleared_by_the_second_look():
    """Seen with a core kept busy: an honest OpenMP kernel's 8 fresh calls all slow (~2.5 ms, a thread
    descheduled at its barrier) while 7 of 8 controls were fast. The next batch is fast or slow at random
    on both sides."""
    control = [2.6, 0.12, 0.12, 0.13, 0.12, 0.14, 0.12, 0.12] + [0.12, 2.6, 0.12, 2.7, 0.13, 2.5, 0.12, 0.12]
    fresh = [2.4, 2.5, 2.6, 2.4, 2.5, 2.7, 2.4, 2.5] + [0.12, 0.13, 2.6, 2.5, 0.12, 0.12, 2.4, 0.13]
    evidence = _fresh_against_control(control, fresh, rounds=1)
    assert evidence["pairs_fresh_slower"] == 9  # 7 of the first 8, 9 of 16: not nearly every pair


def test_a_loaded_cpu_fast_or_slow_at_random_is_not_taken_for_a_cache():
    """An honest OpenMP kernel on a loaded 2-core machine: each call 0.07 ms, or ~100 times that when a
    thread is descheduled at its barrier. Seen in CI: no fresh call of the first batches fast while one
    control was; the fastest of each alone then pointed at a cache."""
    slow = [2.5, 6.9, 7.1, 3.0, 6.8, 7.0, 2.9, 6.95] * 3
    control = [0.07, *slow[1:8], 7.0, 0.08, *slow[10:]]  # two controls fast, every fresh call slow
    evidence = _fresh_against_control(control, slow, rounds=3)
    assert evidence["pairs"] == 24 and evidence["pairs_fresh_slower"] == 2  # the minima alone: 2.5 against 0.07
