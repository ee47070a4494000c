"""Statistics of the timer (not timings of anything: those belong in benchmarks/)."""
import random

import pytest
import torch

from kernelevo.judge.timing import TimingConfig, measure, summarize


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

    stats = measure({"cheap": cheap, "costly": costly}, [[x], [x.clone()]], "cpu",
                    TimingConfig(min_reps=10, max_seconds=0.5, flush=False))
    assert stats["costly"].median_ms > stats["cheap"].median_ms
    assert stats["cheap"].n == stats["costly"].n >= 10
    measured = calls[-20:]  # after warm-up, rounds alternate A B, B A
    assert measured.count("cheap") == measured.count("costly")
