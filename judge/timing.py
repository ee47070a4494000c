"""Timing several callables interleaved in one process, to a stated precision.

Method (GPU): each repetition flushes the L2 cache by overwriting a buffer twice its size, keeps
the GPU busy for a calibrated head start (longer than the host needs to enqueue the call), then
records a CUDA event, calls the function on the next of several rotated input sets, and
records a second event. The events so bracket device time only: measured on an H100, host
launch overhead otherwise leaked into 30-50 us kernels and made their medians bimodal across
processes (CV up to 15 %). Host time per call is measured separately. Functions take turns in
alternating order (A B, B A, ...) so that drift in clocks or temperature falls on all of them
alike. Every batch of repetitions ends with a device-wide synchronize, so every stream has
finished before its events are read. Repetitions continue until the 95 % confidence interval
of every median is within `target_rel_ci` of it, or the time or repetition cap is hit.

CPU: the same, with a host clock around each call and a buffer sized from the last-level cache.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelevo.records import TimingStats


@dataclass(frozen=True)
class TimingConfig:
    target_rel_ci: float = 0.005
    min_reps: int = 30
    max_reps: int = 2000
    max_seconds: float = 1.5  # of measuring, per call of measure()
    warmup_calls: int = 3
    warmup_seconds: float = 0.05
    flush: bool = True


def summarize(samples: list[float]) -> TimingStats:
    """Median with a distribution-free 95 % interval (order statistics), p10, p90, min, mean."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    median = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    k = math.ceil(0.98 * math.sqrt(n))  # 1.96 * sqrt(n) / 2 ranks either side of the middle
    lo, hi = xs[max(0, (n - 1) // 2 - k)], xs[min(n - 1, n // 2 + k)]
    rel_ci = (hi - lo) / 2 / median if median > 0 else 0.0
    return TimingStats(median_ms=median, p10_ms=xs[int(0.1 * (n - 1))], p90_ms=xs[int(0.9 * (n - 1))],
                       min_ms=xs[0], mean_ms=sum(xs) / n, n=n, rel_ci=rel_ci)


def _llc_bytes() -> int:
    """Last-level cache size of CPU 0, from sysfs; 32 MiB when it cannot be read."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024**2}.get(text[-1], 1)
        best = max(best, int(text.rstrip("KM")) * scale)
    return best or 32 * 1024**2


class _Clock:
    """Events and an L2 flush on a CUDA device; a host clock and an LLC flush on the CPU."""

    def __init__(self, device, flush: bool):
        import torch

        self.cuda = torch.device(device).type == "cuda"
        if self.cuda:
            cache = torch.cuda.get_device_properties(device).L2_cache_size
        else:
            cache = _llc_bytes()
        self.buffer = torch.empty(2 * cache // 4 + 1024, dtype=torch.int32, device=device) if flush else None
        self.head_start_cycles = 0
        self.cycles_per_ms = _sleep_rate() if self.cuda else 0.0

    def set_head_start(self, host_ms: float) -> None:
        """GPU spin before each timed call: twice the host's time per call, within [20 us, 5 ms]."""
        self.head_start_cycles = int(self.cycles_per_ms * min(5.0, max(0.02, 2 * host_ms)))

    def flush(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()
        if self.head_start_cycles:
            import torch

            torch.cuda._sleep(self.head_start_cycles)

    def time_batch(self, calls: list[tuple[str, Callable[[], Any]]]) -> list[tuple[str, float]]:
        import torch

        if not self.cuda:
            out = []
            for name, fn in calls:
                self.flush()
                t0 = time.perf_counter_ns()
                fn()
                out.append((name, (time.perf_counter_ns() - t0) / 1e6))
            return out
        events = []
        for name, fn in calls:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush()
            start.record()
            fn()
            end.record()
            events.append((name, start, end))
        torch.cuda.synchronize()  # device-wide: every stream, not only the current one
        return [(name, start.elapsed_time(end)) for name, start, end in events]


def _sleep_rate() -> float:
    """GPU clock cycles per millisecond of torch.cuda._sleep, measured once per process."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    torch.cuda.synchronize()
    return 2_000_000 / max(start.elapsed_time(end), 1e-3)


def host_times(fns: dict[str, Callable[[list], Any]], input_sets: list[list], device, calls: int = 10
               ) -> dict[str, float]:
    """Median host milliseconds to issue one call (the device is synchronised between calls)."""
    import torch

    out = {}
    for name, fn in fns.items():
        xs = []
        for i in range(calls):
            if device_is_cuda(device):
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            fn(input_sets[i % len(input_sets)])
            xs.append((time.perf_counter_ns() - t0) / 1e6)
        if device_is_cuda(device):
            torch.cuda.synchronize()
        out[name] = sorted(xs)[len(xs) // 2]
    return out


def device_is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def measure(fns: dict[str, Callable[[list], Any]], input_sets: list[list], device,
            config: TimingConfig = TimingConfig()) -> dict[str, TimingStats]:
    """Time each function interleaved with the others; returns their statistics by name."""
    import torch

    clock = _Clock(device, config.flush)
    names = list(fns)
    with torch.no_grad():
        _warm_up(fns, input_sets, clock, config)
        # On the CPU the host time is the measurement itself; only a GPU needs it apart.
        host = host_times(fns, input_sets, device) if clock.cuda else dict.fromkeys(fns)
        if clock.cuda:
            clock.set_head_start(max(host.values()))
        samples: dict[str, list[float]] = {name: [] for name in names}
        started, rounds, batch = time.perf_counter(), 0, 4
        while True:
            calls = []
            for r in range(rounds, rounds + batch):
                inputs = input_sets[r % len(input_sets)]
                order = names if r % 2 == 0 else names[::-1]
                calls += [(name, _bind(fns[name], inputs)) for name in order]
            for name, ms in clock.time_batch(calls):
                samples[name].append(ms)
            rounds += batch
            stats = {name: summarize(xs) for name, xs in samples.items()}
            precise = all(s.rel_ci <= config.target_rel_ci for s in stats.values())
            elapsed = time.perf_counter() - started
            if rounds >= config.max_reps or (rounds >= config.min_reps and precise) or elapsed > config.max_seconds:
                return {name: dataclasses.replace(s, host_ms=host[name]) for name, s in stats.items()}
            batch = min(64, max(4, rounds))


def _bind(fn: Callable[[list], Any], inputs: list) -> Callable[[], Any]:
    return lambda: fn(inputs)


def _warm_up(fns, input_sets, clock: _Clock, config: TimingConfig) -> None:
    """Run each function until caches, autotuners and lazy initialisation have settled."""
    import torch

    deadline = time.perf_counter() + config.warmup_seconds
    calls = 0
    while calls < config.warmup_calls or time.perf_counter() < deadline:
        for fn in fns.values():
            fn(input_sets[calls % len(input_sets)])
        if clock.cuda:
            torch.cuda.synchronize()  # so the deadline counts device time, not enqueued calls
        calls += 1
        if calls >= 1000:
            break
